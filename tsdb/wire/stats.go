package wire

// PeerInfo describes a node to clients.
type PeerInfo struct {
	PeerID  string `msgpack:"pid"`   // libp2p peer ID, base58
	NodeID  string `msgpack:"id"`    // 160-bit ID, 40 hex digits: the node's place in the ID space
	RPCAddr string `msgpack:"rpc"`   // host:port of the node's RPC server
	State   string `msgpack:"state"` // a dht.MemberState: alive, leaving, stopped, left, dead
}

// Alive reports whether the node is a live member (dht.StateAlive; wire does not
// import dht, so that a thin client links none of the node).
func (p PeerInfo) Alive() bool { return p.State == "alive" }

// NodeStats is what one node reports about itself.
type NodeStats struct {
	PeerInfo
	Shards    int         `msgpack:"shards"` // (shard, series) pairs held
	Series    int         `msgpack:"series"`
	Points    int64       `msgpack:"points"`
	Format    string      `msgpack:"fmt"`     // shard ID layout: qfi or kfi
	Quantum   int64       `msgpack:"quantum"` // seconds
	RF        int         `msgpack:"rf"`
	Error     string      `msgpack:"err"` // why the stats could not be fetched
	Reachable bool        `msgpack:"reach"`
	Repair    RepairStats `msgpack:"repair"`
	DiskBytes int64       `msgpack:"disk"`
	Retention string      `msgpack:"retention"` // a Go duration; "0s": keep everything
	MaxDisk   int64       `msgpack:"maxdisk"`   // disk budget in bytes; 0: none
	Oldest    int64       `msgpack:"oldest"`    // start of the oldest quantum held, UNIX s
	Dropped   int64       `msgpack:"dropped"`   // quanta dropped by retention or budget
	// Damage found since the node started: reads that met a block failing its checksum
	// (or not decoding), and bytes of WAL records lost after a damaged one at start-up.
	Corruptions     int64 `msgpack:"corrupt,omitempty"`
	WALBytesDropped int64 `msgpack:"wal_lost,omitempty"`
	// Refilling: the node lost acknowledged writes at start-up and its peers' repair
	// passes (MethodRefill) have not all ended yet: its copies are not complete.
	Refilling bool `msgpack:"refilling,omitempty"`
	// Flash wear since the store opened: bytes the engine wrote to the device (WAL,
	// flushed and compacted tables) and the new points stored meanwhile. Their ratio is
	// what a point costs the flash. Zero for a store in memory.
	FlashBytesWritten int64 `msgpack:"flash,omitempty"`
	AppendedPoints    int64 `msgpack:"appended,omitempty"`
	// ReadRequests counts the read and aggregate requests the node answered as a
	// replica for other nodes' coordinators since it started.
	ReadRequests int64 `msgpack:"read_reqs,omitempty"`
	// CatalogReads counts the catalog reads (entries, posting pages, listings) the node
	// answered as a replica for other nodes' coordinators since it started.
	CatalogReads int64 `msgpack:"catalog_reads,omitempty"`
	// Uplinks are this node's uplinks (package uplink), when it runs any.
	Uplinks []UplinkStats `msgpack:"uplinks,omitempty"`
}

// RepairStats is a node's self-healing progress.
type RepairStats struct {
	Passes          int64 `msgpack:"passes"`
	LastPass        int64 `msgpack:"last"`  // UNIX ms when the last pass ended
	UnderReplicated int64 `msgpack:"under"` // pairs held here with fewer than rf confirmed copies, at the last pass
	PushedPairs     int64 `msgpack:"pushed"`
	PushedPoints    int64 `msgpack:"pushed_pts"`
	PushedBytes     int64 `msgpack:"pushed_bytes,omitempty"` // the pushed points' wire size (timestamps and values)
	DroppedPairs    int64 `msgpack:"dropped"`                // pairs handed off to their owners and deleted here
	HintedPoints    int64 `msgpack:"hinted"`                 // points held for unreachable replicas
	ReadRepairs     int64 `msgpack:"read_repairs"`
	Refetched       int64 `msgpack:"refetched"` // damaged pairs replaced by another owner's copy
}
