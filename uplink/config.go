package uplink

import (
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/tsdht/tsdht/clusterkey"
	"github.com/tsdht/tsdht/tsdb/catalog"
)

// Limits and defaults of an uplink.
const (
	// MaxBatchPoints bounds the points (or windows) of one request to the target.
	MaxBatchPoints = 10_000
	// MaxBatchBytes bounds one request's body before compression: what an uplink holds
	// in memory at once, and a size a WAN link carries in a few seconds.
	MaxBatchBytes = 1 << 20
	// MaxReadSpan bounds the span of one read of a series' raw points.
	MaxReadSpan = time.Minute
	// MaxReadWindows bounds the windows of one aggregate read.
	MaxReadWindows = 1000
	// MaxUplinks bounds the uplinks of one node.
	MaxUplinks = 8
	// CursorPrefix begins the keys of the internal series that hold the cursors; such
	// series are never forwarded.
	CursorPrefix = catalog.InternalPrefix + "uplink/"
)

// Config is one uplink.
type Config struct {
	// URL names the target and its protocol: influx+http(s)://H:P/DB,
	// prom+http(s)://H:P/PATH or tsdht://H:P[,H:P…].
	URL string
	// Select chooses the series forwarded (by prefix, tags or both); the zero value
	// forwards every series.
	Select catalog.Query
	// Every is the width of the windows sent as mean, min, max and count; 0 sends the
	// raw points.
	Every time.Duration

	// Interval is how often a forwarder looks for new points. Default 10 s: every
	// wake-up reads each series it forwards once, so a longer interval reads, encodes
	// and sends the same points in fewer, larger requests.
	Interval time.Duration
	// Settle is how far behind now a forwarder stays at first, so that a write still
	// reaching its quorum is not skipped; points found late just behind a cursor
	// double it, up to MaxSettle. Default 1 s.
	Settle time.Duration
	// SaveEvery is how often at most a forwarder writes a series' cursor to the DHT;
	// a takeover re-sends at most what was acknowledged since. Default 10 s.
	SaveEvery time.Duration
	// LateWindow is how far behind the cursor late points are looked for; LateEvery
	// how often. Defaults 15 minutes and 15 s.
	LateWindow, LateEvery time.Duration
	// MinBackoff and MaxBackoff bound the exponential back-off after a failed request
	// (Prometheus' own remote write uses 30 ms and 5 s). Defaults 250 ms and 5 s.
	MinBackoff, MaxBackoff time.Duration
	// Timeout bounds one request to the target. Default 30 s.
	Timeout time.Duration
	// Retention is the node's --retention (0: everything kept): a cursor older than it
	// jumps ahead, and what it skips is counted as never forwarded.
	Retention time.Duration
	// ClusterKey is what a tsdht target's client speaks with: the keys of the URL's
	// key=FILE, or else the node's own (nil for none), which the central cluster must
	// then accept.
	ClusterKey clusterkey.Ring
}

// WithDefaults returns c with its zero fields set to the defaults.
func (c Config) WithDefaults() Config {
	set := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	set(&c.Interval, 10*time.Second)
	set(&c.Settle, 2*time.Second)
	set(&c.SaveEvery, 10*time.Second)
	set(&c.LateWindow, 15*time.Minute)
	set(&c.LateEvery, 15*time.Second)
	set(&c.MinBackoff, 250*time.Millisecond)
	set(&c.MaxBackoff, 5*time.Second)
	set(&c.Timeout, 30*time.Second)
	return c
}

// Target is where an uplink sends, parsed from its URL.
type Target struct {
	Kind     string   // "influx", "prom" or "tsdht"
	Endpoint string   // the HTTP URL requests go to (influx: with db and precision)
	Addrs    []string // tsdht: the cluster's RPC addresses
	KeyFile  string   // tsdht: the central cluster's key file (?key=FILE); "" = the node's own key
	Name     string   // the URL without credentials (nor key file), for logs and status
}

// ParseURL parses an uplink URL, saying what is wrong and what is accepted.
func ParseURL(raw string) (Target, error) {
	const want = "want influx+http(s)://HOST:PORT/DB, prom+http(s)://HOST:PORT/PATH or tsdht://HOST:PORT[,HOST:PORT…][?key=FILE]"
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok || rest == "" {
		return Target{}, fmt.Errorf("uplink %q: no scheme: %s", raw, want)
	}
	if scheme == "tsdht" {
		hosts, query, _ := strings.Cut(rest, "?")
		var addrs []string
		for _, a := range strings.Split(strings.TrimSuffix(hosts, "/"), ",") {
			if a = strings.TrimSpace(a); a == "" || !strings.Contains(a, ":") {
				return Target{}, fmt.Errorf("uplink %q: %q is not HOST:PORT: %s", raw, a, want)
			}
			addrs = append(addrs, a)
		}
		t := Target{Kind: "tsdht", Addrs: addrs, Name: "tsdht://" + hosts}
		q, err := url.ParseQuery(query)
		if err != nil {
			return Target{}, fmt.Errorf("uplink %q: %v: %s", raw, err, want)
		}
		for k, v := range q {
			if k != "key" || len(v) != 1 || v[0] == "" {
				return Target{}, fmt.Errorf("uplink %q: the one parameter is key=FILE, given once (the central cluster's key file): %s", raw, want)
			}
			t.KeyFile = v[0]
		}
		return t, nil
	}
	kind, httpScheme, ok := strings.Cut(scheme, "+")
	if !ok || (kind != "influx" && kind != "prom") || (httpScheme != "http" && httpScheme != "https") {
		return Target{}, fmt.Errorf("uplink %q: unknown scheme %q: %s", raw, scheme, want)
	}
	u, err := url.Parse(httpScheme + "://" + rest)
	if err != nil {
		return Target{}, fmt.Errorf("uplink %q: %v: %s", raw, err, want)
	}
	if u.Host == "" {
		return Target{}, fmt.Errorf("uplink %q: no host: %s", raw, want)
	}
	name := *u
	name.User = nil
	t := Target{Kind: kind, Name: kind + "+" + name.String()}
	switch kind {
	case "influx":
		db := strings.Trim(u.Path, "/")
		if db == "" || strings.Contains(db, "/") {
			return Target{}, fmt.Errorf("uplink %q: the path must name one database: %s", raw, want)
		}
		q := u.Query()
		q.Set("db", db)
		q.Set("precision", "ns")
		if p := u.User; p != nil {
			q.Set("u", p.Username())
			pw, _ := p.Password()
			q.Set("p", pw)
		}
		w := url.URL{Scheme: u.Scheme, Host: u.Host, Path: "/write", RawQuery: q.Encode()}
		t.Endpoint = w.String()
	case "prom":
		if u.Path == "" || u.Path == "/" {
			return Target{}, fmt.Errorf("uplink %q: no path (Prometheus' receiver is /api/v1/write): %s", raw, want)
		}
		t.Endpoint = u.String()
	}
	return t, nil
}

// Validate reports a configuration that cannot work.
func (c Config) Validate() error {
	var errs []error
	if _, err := ParseURL(c.URL); err != nil {
		errs = append(errs, err)
	}
	if c.Every < 0 || (c.Every > 0 && c.Every%time.Second != 0) {
		errs = append(errs, fmt.Errorf("uplink every %v: must be 0 (raw) or a whole number of seconds", c.Every))
	}
	if strings.HasPrefix(c.Select.Prefix, CursorPrefix) {
		errs = append(errs, fmt.Errorf("uplink prefix %q: the %s series hold uplink cursors and are never forwarded", c.Select.Prefix, CursorPrefix))
	}
	return errors.Join(errs...)
}

// ID names an uplink in its cursors: the same target and windows give the same ID on
// every node, and a change of either starts from the beginning.
func (c Config) ID() string {
	t, _ := ParseURL(c.URL)
	h := sha1.Sum([]byte(fmt.Sprintf("%s|%d", t.Name, c.Every)))
	return hex.EncodeToString(h[:6])
}

// CursorKey is the internal series holding the cursor of uplink id for series key: its
// newest point's value is the time up to which key was forwarded and acknowledged.
func CursorKey(id, key string) string {
	k := CursorPrefix + id + "/" + key
	if len(k) > 256 {
		h := sha1.Sum([]byte(key))
		k = CursorPrefix + id + "/#" + hex.EncodeToString(h[:])
	}
	return k
}
