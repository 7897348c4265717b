//go:build race

package dht

// simNodes is the size of the simulated network. The race detector makes
// every RPC about ten times slower and bigger, so race builds simulate fewer
// nodes; the normal build simulates 1,000 (norace_test.go).
const simNodes = 250
