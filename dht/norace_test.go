//go:build !race

package dht

// simNodes is the size of the simulated network (see race_test.go).
const simNodes = 1000
