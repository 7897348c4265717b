package wire

// UplinkStats is one uplink as one node sees it (package uplink): what it forwards
// and how far behind it is. Every node runs every uplink; each forwards the series
// whose first live registry replica it is.
type UplinkStats struct {
	ID    string `msgpack:"id" json:"id"`          // names the uplink's cursors (uplink.Config.ID)
	URL   string `msgpack:"url" json:"url"`        // the target, without credentials
	Every int64  `msgpack:"every" json:"every_ns"` // window width in ns; 0 = raw points
	// Series counts the series this node forwards; Forwarding names the first of them.
	Series     int      `msgpack:"series" json:"series"`
	Forwarding []string `msgpack:"fwd,omitempty" json:"forwarding,omitempty"`
	// LagSeconds is how far behind the newest forwardable time the furthest-behind
	// series is; LagPoints the points (or windows) not yet forwarded, as last counted.
	LagSeconds float64 `msgpack:"lag_s" json:"lag_seconds"`
	LagPoints  int64   `msgpack:"lag_pts" json:"lag_points"`
	// Counters since the node started.
	SentPoints     int64  `msgpack:"sent_pts" json:"sent_points"`         // points (or windows) acknowledged by the target
	SentBytes      int64  `msgpack:"sent_bytes" json:"sent_bytes"`        // request bodies as sent (compressed)
	Batches        int64  `msgpack:"batches" json:"batches"`              // requests acknowledged
	Retries        int64  `msgpack:"retries" json:"retries"`              // requests that failed and were retried
	Rejected       int64  `msgpack:"rejected" json:"rejected_points"`     // points the target refused for good (a 4xx)
	Late           int64  `msgpack:"late" json:"late_windows"`            // windows forwarded again for late points
	NeverForwarded int64  `msgpack:"never" json:"never_forwarded_points"` // points dropped by retention before they were forwarded
	LastError      string `msgpack:"err,omitempty" json:"last_error,omitempty"`
}
