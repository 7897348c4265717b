package httpapi

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// A raw SELECT with LIMIT 1 and no condition on fields is answered from one
// AggregateMany of every series it reads — its partials hold each series' first and
// last point — with no read of points, and its answer is the one a read of every
// series gives; a string series among them is read as before.
func TestLimitOneFromPartials(t *testing.T) {
	t0 := time.Date(2016, 3, 1, 0, 0, 0, 0, time.UTC)
	var lines []string
	for i := range 60 {
		for h := range 3 {
			if h == 1 && (i < 5 || i > 50) {
				continue // h1 starts late and stops early
			}
			line := fmt.Sprintf("limone,host=h%d,dc=d%d lat=%g,lon=%g,n=%di %d", h, h%2, float64(h)+float64(i)/100, float64(i)/10, i*h, ns(t0.Add(time.Duration(i)*time.Minute)))
			if h == 2 && i%2 == 1 {
				// h2's lon every other minute: its newest row has lat alone.
				line = fmt.Sprintf("limone,host=h%d,dc=d%d lat=%g,n=%di %d", h, h%2, float64(h)+float64(i)/100, i*h, ns(t0.Add(time.Duration(i)*time.Minute)))
			}
			lines = append(lines, line)
		}
	}
	lines = append(lines, fmt.Sprintf("limone,host=h0,dc=d0 state=\"up\" %d", ns(t0.Add(3*time.Minute))))
	if code, b := write(t, "limone", "", strings.Join(lines, "\n")); code != http.StatusNoContent {
		t.Fatalf("write: %d %s", code, b)
	}
	fromPartials := map[string]int{"AggregateMany": 1}
	checkLimitCases(t, "limone", []limitCase{
		{`SELECT lat, lon FROM limone GROUP BY host ORDER BY time LIMIT 1`,
			[]string{rfc(t0), rfc(t0.Add(5 * time.Minute)), rfc(t0)}, fromPartials},
		{`SELECT lat, lon, n FROM limone GROUP BY host ORDER BY time DESC LIMIT 1`,
			[]string{rfc(t0.Add(59 * time.Minute)), rfc(t0.Add(50 * time.Minute)), rfc(t0.Add(59 * time.Minute))}, fromPartials},
		// Groups of several series each, with rows at the same time; tag columns (DESC
		// answers the groups in descending order).
		{`SELECT "host", lon FROM limone GROUP BY dc ORDER BY time DESC LIMIT 1`,
			[]string{rfc(t0.Add(50 * time.Minute)), rfc(t0.Add(59 * time.Minute))}, fromPartials},
		{`SELECT lat FROM limone WHERE time >= '` + rfc(t0.Add(52*time.Minute)) + `' AND (host = 'h1' OR host = 'h2') ORDER BY time LIMIT 1`,
			[]string{rfc(t0.Add(52 * time.Minute))}, fromPartials},
		// A string field: its series has no partials to answer from; its groups
		// are read as before, from the first window (h1's and h2's have none and are
		// answered from the partials).
		{`SELECT lat, state FROM limone GROUP BY host LIMIT 1`,
			[]string{rfc(t0), rfc(t0.Add(5 * time.Minute)), rfc(t0)},
			map[string]int{"AggregateMany": 1, "ReadMany": 1}},
	})
}
