//go:build !race

package dht

// The size of the simulation (see race_test.go).
const (
	simNodes   = 1000 // size of the simulated network
	simLookups = 1000 // lookups whose accuracy is measured
)
