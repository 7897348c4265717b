//go:build race

package dht

// The race detector makes every RPC about ten times slower, so race builds
// simulate a smaller network and fewer lookups; the normal build simulates
// 1,000 nodes and 1,000 lookups (norace_test.go).
const (
	simNodes   = 250 // size of the simulated network
	simLookups = 500 // lookups whose accuracy is measured
)
