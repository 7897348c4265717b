package httpapi

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/tsdht/tsdht/internal/testutil"
)

// rawLines are points whose raw answers take every form: floats short and long,
// tiny and huge, integers, strings that need escaping in JSON and quoting in CSV,
// fields missing at some times, tags that need escaping, times with and without
// fractions of a second.
func rawLines(base time.Time) string {
	floats := []string{"59.95", "1e-07", "1.5e21", "-0.001", "123456789.123", "0.3333333333333333", "60", "-2.5e-12", "7"}
	strs := []string{`say \"hi\", <b>&`, "plain", " lead", "a,b", "tab\there"}
	var b strings.Builder
	for i := 0; i < 40; i++ {
		t := base.Add(time.Duration(i) * time.Second / 60).UnixNano()
		if i%10 == 0 {
			t = base.Add(time.Duration(i) * time.Second).UnixNano()
		}
		for _, st := range []string{"s1", `s\ 2\,x`} {
			fmt.Fprintf(&b, "pmu,station=%s v=%s", st, floats[i%len(floats)])
			if i%3 == 0 {
				fmt.Fprintf(&b, ",n=%di", i*i-100)
			}
			if i%4 == 1 {
				fmt.Fprintf(&b, `,s="%s"`, strs[i%len(strs)])
			}
			fmt.Fprintf(&b, " %d\n", t)
		}
	}
	return b.String()
}

// TestRawAnswersByteForByte asks InfluxDB 1.x and the package's cluster the same raw
// SELECTs, in JSON (RFC 3339 times and every epoch, chunked) and CSV, and wants the
// same bytes.
func TestRawAnswersByteForByte(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: skipping the InfluxDB differential test")
	}
	addr := testutil.StartInfluxd(t)
	base := time.Now().Add(-5 * time.Hour).Truncate(time.Hour)
	urls := []string{"http://" + addr, srvURL}
	writeBoth(t, urls, "rawdiff", rawLines(base))
	rng := fmt.Sprintf("time >= '%s' AND time < '%s'", base.Format(time.RFC3339), base.Add(time.Minute).Format(time.RFC3339))
	queries := []string{
		"SELECT v FROM pmu WHERE station = 's1' AND " + rng,
		"SELECT v, n, s FROM pmu WHERE station = 's1' AND " + rng,
		"SELECT n FROM pmu WHERE station = 's1' AND " + rng,
		"SELECT s FROM pmu WHERE station = 's1' AND " + rng,
		"SELECT v, s FROM pmu WHERE " + rng + " GROUP BY station",
		"SELECT v FROM pmu WHERE station = 's1' AND " + rng + " ORDER BY time DESC LIMIT 5 OFFSET 2",
		"SELECT * FROM pmu WHERE " + rng,
		"SELECT v FROM pmu WHERE station = 's1' AND " + rng + "; SELECT n FROM pmu WHERE station = 's1' AND " + rng,
	}
	params := []url.Values{{}, {"epoch": {"ns"}}, {"epoch": {"ms"}}, {"epoch": {"s"}}, {"epoch": {"h"}},
		{"chunked": {"true"}, "chunk_size": {"7"}}}
	for _, q := range queries {
		for _, p := range params {
			for _, accept := range []string{"", "application/csv"} {
				v := url.Values{"db": {"rawdiff"}, "q": {q}}
				for k, x := range p {
					v[k] = x
				}
				var ans [2]string
				for i, u := range urls {
					req, err := http.NewRequest(http.MethodGet, u+"/query?"+v.Encode(), nil)
					if err != nil {
						t.Fatal(err)
					}
					if accept != "" {
						req.Header.Set("Accept", accept)
					}
					resp, err := http.DefaultClient.Do(req)
					if err != nil {
						t.Fatal(err)
					}
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					ans[i] = string(b)
				}
				if ans[0] != ans[1] {
					t.Errorf("%s %v accept %q\ninfluxdb: %s\n   tsdht: %s", q, p, accept, ans[0], ans[1])
				}
			}
		}
	}
}
