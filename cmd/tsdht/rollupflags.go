package main

import (
	"strings"
	"time"

	"github.com/tsdht/tsdht/tsdb/store"
)

// parseRollupRetention parses --rollup-retention: one duration per rollup level, in
// the order of the levels (1 minute, 1 hour, 1 day), comma-separated; 0 keeps a level
// forever; levels left out take their default.
func parseRollupRetention(s string) ([]time.Duration, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []time.Duration
	for i, f := range strings.Split(s, ",") {
		d, err := store.ParseDuration(f)
		if err != nil {
			return nil, badFlag("--rollup-retention: level %d: %w (one duration per level, e.g. 90d,0,0)", i+1, err)
		}
		out = append(out, d)
	}
	return out, nil
}
