package tsdb

import "github.com/tsdht/tsdht/tsdb/client"

// The thin client lives in package client, which does not link the node; these names
// keep existing callers working.
type (
	// Client is a thin client of a cluster (client.Client).
	Client = client.Client
	// ClientConfig configures a Client (client.Config).
	ClientConfig = client.Config
)

// MaxPutBatch is how many points one put request carries (client.MaxPutBatch).
const MaxPutBatch = client.MaxPutBatch

// DefaultClientConfig returns the client defaults (client.DefaultConfig).
func DefaultClientConfig() ClientConfig { return client.DefaultConfig() }

// NewClient returns a client of the nodes at the given RPC addresses (client.New).
func NewClient(addrs []string, cfg ClientConfig) (*Client, error) { return client.New(addrs, cfg) }
