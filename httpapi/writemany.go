package httpapi

import (
	"context"
	"fmt"

	"github.com/tsdht/tsdht/tsdb"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// ManyWriter is an Engine that stores the points of many series in one call. A write
// request (5,000 lines of line protocol name a hundred series, a remote write as many)
// then costs each replica one request, not one per series. An Engine without it gets
// one Write per series, combined across requests (combine.go).
type ManyWriter interface {
	// WriteMany stores the points of each series as Write would and returns, per
	// series and in order, how many points reached the write quorum and why the rest
	// did not.
	WriteMany(ctx context.Context, ws []SeriesWrite) []WriteResult
}

// SeriesWrite is the points of one series in a WriteMany, with its tags (as Write).
type SeriesWrite struct {
	Key  string
	Tags map[string]string
	Pts  series.Points
}

// WriteResult is what WriteMany did with one series.
type WriteResult struct {
	Stored int
	Err    error
}

// WriteMany implements ManyWriter with one coordinated PutMany for all the series — a
// new series is created with its tags, in the same catalog round — then, once per
// series and process, as Write, the tags of each other series it stored into the
// series' catalog entry, all of them in one Coordinator.MetaMany.
func (e *NodeEngine) WriteMany(ctx context.Context, ws []SeriesWrite) []WriteResult {
	puts := make([]tsdb.SeriesPut, len(ws))
	for i := range ws {
		puts[i] = tsdb.SeriesPut{Key: ws[i].Key, Points: ws[i].Pts}
		if !e.tagged(ws[i].Key) {
			puts[i].Tags = ws[i].Tags // a new series is created with them
		}
	}
	rs := e.node.Coordinator().PutMany(ctx, puts, writeOptions)
	out := make([]WriteResult, len(ws))
	var reqs []*wire.MetaReq
	var of []int // of ws
	for i := range ws {
		out[i] = WriteResult{Stored: rs[i].Stored, Err: rs[i].Err}
		if rs[i].Err != nil || len(ws[i].Tags) == 0 || e.tagged(ws[i].Key) {
			continue
		}
		if rs[i].Tagged {
			e.remember(ws[i].Key)
			continue
		}
		reqs, of = append(reqs, wire.TagsMeta(ws[i].Key, ws[i].Tags)), append(of, i)
	}
	if len(reqs) == 0 {
		return out
	}
	// Every new series' tags at once: one catalog call per replica and posting list,
	// not one series' calls after another.
	_, errs := e.node.Coordinator().MetaMany(ctx, reqs)
	for j, err := range errs {
		i := of[j]
		if err != nil {
			out[i].Err = fmt.Errorf("stored %d points of %q, but recording its tags failed: %w", out[i].Stored, ws[i].Key, err)
			continue
		}
		e.remember(ws[i].Key)
	}
	return out
}

// recordTags sets a series' tags in its catalog entry and remembers it did.
func (e *NodeEngine) recordTags(ctx context.Context, key string, tags map[string]string) error {
	if _, err := e.node.Coordinator().Meta(ctx, wire.TagsMeta(key, tags)); err != nil {
		return err
	}
	e.remember(key)
	return nil
}
