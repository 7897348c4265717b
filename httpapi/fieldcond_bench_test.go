package httpapi

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// BenchmarkHighCPU asks the package's 3-node cluster TSBS' high-cpu queries over 20
// hosts' ten fields every 10 s for 2 hours (144,000 points), beside the same SELECT *
// without the condition on usage_user: what filtering costs over reading.
func BenchmarkHighCPU(b *testing.B) {
	base := time.Now().Add(-5 * time.Hour).Truncate(time.Hour)
	body := tsbsLines(base, 20, 720)
	resp, err := http.Post(srvURL+"/write?db=benchwhere", "text/plain", strings.NewReader(body))
	if err != nil {
		b.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		b.Fatalf("write: %d", resp.StatusCode)
	}
	rng := fmt.Sprintf("time >= '%s' AND time < '%s'", base.Format(time.RFC3339), base.Add(2*time.Hour).Format(time.RFC3339))
	for _, c := range []struct{ name, q string }{
		{"high-cpu-all", "SELECT * FROM cpu WHERE usage_user > 90.0 AND " + rng},
		{"high-cpu-1", "SELECT * FROM cpu WHERE usage_user > 90.0 AND " + rng + " AND hostname = 'host_1'"},
		{"select-all", "SELECT * FROM cpu WHERE " + rng},
	} {
		b.Run(c.name, func(b *testing.B) {
			u := srvURL + "/query?" + url.Values{"db": {"benchwhere"}, "q": {c.q}}.Encode()
			for i := 0; i < b.N; i++ {
				resp, err := http.Get(u)
				if err != nil {
					b.Fatal(err)
				}
				n, _ := io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK || n < 100 {
					b.Fatalf("%s: %d, %d bytes", c.q, resp.StatusCode, n)
				}
			}
		})
	}
}
