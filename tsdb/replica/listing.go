package replica

import (
	"context"

	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/catalog"
	"github.com/tsdht/tsdht/tsdb/cluster"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// listingEntryChunk is how many candidates' entries a listing looks up at a time, so
// that it stops near wire.ListingEntryBytes rather than after reading every entry.
const listingEntryChunk = 256

func registerListing(srv *rpc.Server, r cluster.Replica, count func()) {
	cluster.Handle(srv, wire.MethodListing, func(ctx context.Context, req *wire.ListingReq) (*wire.ListingResp, error) {
		count()
		qs, err := req.Decode()
		if err != nil {
			return nil, rpc.Errorf(wire.CodeBadInput, "%v", err)
		}
		l, err := r.Listing(ctx, qs)
		if err != nil {
			return nil, err
		}
		return wire.EncodeListing(l, req.ElideFull), nil
	})
}

// Listing runs catalog.Candidates of qs over this replica's posting lists and answers
// the pages it read (up to wire.ListingPageBytes) and the entries it holds of the
// candidates (up to wire.ListingEntryBytes, Covered naming the candidates looked up).
// A run that stops short — its pages past the bound, or a query the coordinator's own
// run will refuse with its reason — answers the pages read so far and no entries: the
// coordinator reads what it lacks one method at a time.
func (l *Local) Listing(ctx context.Context, qs []catalog.Query) (wire.Listing, error) {
	if _, err := l.catalog(); err != nil {
		return wire.Listing{}, err
	}
	log := catalog.NewPageLog(l.Postings, wire.ListingPageBytes)
	keys, err := catalog.CandidatesAny(ctx, log.Source, qs)
	out := wire.Listing{Pages: log.Pages()}
	for i, p := range out.Pages {
		// Candidates only counts a full first page; the coordinator need not be sent
		// its members (wire.ListingReq.ElideFull).
		out.Pages[i].Full = p.Limit == catalog.CandidatePage && len(p.Members) >= p.Limit
	}
	if err != nil {
		return out, nil
	}
	// Keys are sorted, and so are the entries found of them: a key is covered when
	// every entry up to it fits.
	size := 0
	for len(keys) > 0 {
		chunk := keys[:min(len(keys), listingEntryChunk)]
		keys = keys[len(chunk):]
		es, err := l.Entries(ctx, chunk)
		if err != nil {
			return wire.Listing{}, err
		}
		next := 0 // of es
		for _, k := range chunk {
			n := len(k) + 4
			if next < len(es) && es[next].Key == k {
				n += catalog.EntryBytes(es[next])
			}
			if size+n > wire.ListingEntryBytes || len(out.Covered) == wire.MaxEntriesPerRequest {
				return out, nil
			}
			size += n
			out.Covered = append(out.Covered, k)
			if next < len(es) && es[next].Key == k {
				out.Entries = append(out.Entries, es[next])
				next++
			}
		}
	}
	return out, nil
}
