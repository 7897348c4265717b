package uplink

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/tsdht/tsdht/tsdb/coord"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// Set is a node's uplinks, each forwarding in its own goroutine.
type Set struct {
	ups []*Uplink
}

// Start starts the uplinks cfgs over the cluster (own as New takes it); none when any
// configuration is invalid.
func Start(cfgs []Config, cl Cluster, own Own, mem Membership, log *slog.Logger) (*Set, error) {
	if len(cfgs) > MaxUplinks {
		return nil, fmt.Errorf("%d uplinks: at most %d per node", len(cfgs), MaxUplinks)
	}
	s := &Set{}
	ids := map[string]string{}
	for _, c := range cfgs {
		u, err := New(c, cl, own, mem, log)
		if err == nil && ids[u.id] != "" {
			u.sink.close()
			err = fmt.Errorf("uplink %s given twice (as %s): one uplink per target and window", c.URL, ids[u.id])
		}
		if err != nil {
			for _, u := range s.ups {
				u.sink.close() // none runs yet
			}
			return nil, err
		}
		ids[u.id] = c.URL
		s.ups = append(s.ups, u)
	}
	for _, u := range s.ups {
		go u.Run()
	}
	return s, nil
}

// Stored is the node's write hook (tsdb.Node.SetStoredTap): every raw uplink keeps a
// copy of what it stored for the series it has tapped (Uplink.Stored).
func (s *Set) Stored(puts []coord.SeriesPut, res []coord.SeriesResult) {
	for _, u := range s.ups {
		u.Stored(puts, res)
	}
}

// Stats returns every uplink's stats, in the order they were configured.
func (s *Set) Stats() []wire.UplinkStats {
	if s == nil {
		return nil
	}
	out := make([]wire.UplinkStats, 0, len(s.ups))
	for _, u := range s.ups {
		out = append(out, u.Stats())
	}
	return out
}

// Close stops every uplink, saving the cursors they advanced.
func (s *Set) Close() error {
	if s == nil {
		return nil
	}
	var errs []error
	for _, u := range s.ups {
		errs = append(errs, u.Close())
	}
	return errors.Join(errs...)
}
