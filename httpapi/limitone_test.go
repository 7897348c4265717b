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

// TSBS' last-loc and single-last-loc (and their ASC twins) and cpu-only's lastpoint,
// even over a range ending before the newest quantum, cost each other node of the
// package's 3-node cluster at most one read or aggregate request (each series' newest
// or oldest quantum, all at once: EndsMany), and low-fuel at most three (its first
// window's read beside the statistics, then the groups' own windows); the listing of
// each costs every catalog replica one catalog read (wire.MethodListing: postings and
// entries at once), and nothing more: the entries that say where each series' newest
// quantum is are the listing's (EndsManyListed): counted by the nodes, the fewest over
// three asks so that a repair pass beside one does not count.
func TestIoTLimitRequestsPerNode(t *testing.T) {
	writeLines(t, "iotreq", iotFleetLines(base.Add(-2*time.Hour), 30, 60))
	writeLines(t, "iotreq", tsbsLines(base.Add(-2*time.Hour), 10, 60))
	// The catalog requests each node answers at most: the listing (wire.MethodListing:
	// postings and entries at once), whose entries also say where each series' newest
	// (oldest) quantum is.
	const listing = 1
	before := rfc(base.Add(-2*time.Hour + 5*time.Minute))
	for _, c := range []struct {
		name, q       string
		most, catalog int64
	}{
		{"last-loc", `SELECT "latitude", "longitude" FROM "readings" WHERE "fleet"='South' GROUP BY "name","driver" ORDER BY "time" DESC LIMIT 1`, 1, listing},
		{"first-loc", `SELECT "latitude", "longitude" FROM "readings" WHERE "fleet"='South' GROUP BY "name","driver" ORDER BY "time" LIMIT 1`, 1, listing},
		{"single-last-loc", `SELECT "name", "driver", "latitude", "longitude" FROM "readings" WHERE ("name" = 'truck_5') ORDER BY "time" DESC LIMIT 1`, 1, listing},
		{"low-fuel", `SELECT "name", "driver", "fuel_state" FROM "diagnostics" WHERE "fuel_state" <= 0.1 AND "fleet" = 'South' GROUP BY "name" ORDER BY "time" DESC LIMIT 1`, 3, listing},
		// cpu-only's lastpoint, as tsbs_generate_queries writes it.
		{"lastpoint", `SELECT * from cpu group by "hostname" order by time desc limit 1`, 1, listing},
		// A range that ends before the series' newest quantum: still one aggregate.
		{"lastpoint-before", `SELECT * from cpu WHERE time < '` + before + `' group by "hostname" order by time desc limit 1`, 1, listing},
	} {
		reads := make([]int64, len(cluster.Nodes)-1)
		listings := make([]int64, len(cluster.Nodes)-1)
		for try := range 3 {
			beforeReads, beforeListings := remoteReadRequests(), remoteCatalogReads()
			if code, ans := query(t, "iotreq", c.q); code != http.StatusOK || len(ans.Results) != 1 || len(ans.Results[0].Series) == 0 {
				t.Fatalf("%s: %d %+v", c.name, code, ans)
			}
			leastOf(reads, beforeReads, remoteReadRequests(), try)
			leastOf(listings, beforeListings, remoteCatalogReads(), try)
		}
		t.Logf("%s: read requests %v, catalog reads %v", c.name, reads, listings)
		for k, d := range reads {
			if d > c.most {
				t.Errorf("%s: node %d answered %d read and aggregate requests, want at most %d", c.name, k+1, d, c.most)
			}
		}
		for k, d := range listings {
			if d > c.catalog {
				t.Errorf("%s: node %d answered %d catalog reads, want at most %d", c.name, k+1, d, c.catalog)
			}
		}
	}
}

// leastOf keeps in least, per node, the fewest requests between before and after over
// the tries (the first try sets it).
func leastOf(least, before, after []int64, try int) {
	for k, n := range after {
		if d := n - before[k]; try == 0 || d < least[k] {
			least[k] = d
		}
	}
}

// remoteReadRequests is how many read and aggregate requests each node of the package's
// cluster but the first (whose engine the server asks) answered.
func remoteReadRequests() []int64 {
	var out []int64
	for _, n := range cluster.Nodes[1:] {
		out = append(out, n.Stats().ReadRequests)
	}
	return out
}

// remoteCatalogReads is how many catalog reads (entries, posting pages, listings) each
// node of the package's cluster but the first answered.
func remoteCatalogReads() []int64 {
	var out []int64
	for _, n := range cluster.Nodes[1:] {
		out = append(out, n.Stats().CatalogReads)
	}
	return out
}
