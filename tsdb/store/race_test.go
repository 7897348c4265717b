//go:build race

package store

// raceBuild: the race detector drops sync.Pool items at random, so pooled objects
// (pebble pools its iterators) are sometimes allocated afresh.
const raceBuild = true
