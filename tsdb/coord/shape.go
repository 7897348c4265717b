package coord

import (
	"context"
	"errors"
	"fmt"

	"github.com/tsdht/tsdht/dht"
	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/catalog"
	"github.com/tsdht/tsdht/tsdb/cluster"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// ErrNoShape is wrapped by Shape when it cannot answer for the whole cluster: the
// caller lists the measurement's series instead (Series).
var ErrNoShape = errors.New("no measurement shape")

// Shape returns the shape of the measurements q selects (catalog.Shape): one request
// to every live node, each answering from the entries it holds as a registry replica,
// merged. Entries live on registry replica sets spread over the whole cluster, so every
// node must answer; when one does not, or the membership is not known in full (routing
// mode kademlia), Shape fails wrapping ErrNoShape.
func (c *Coordinator) Shape(ctx context.Context, q catalog.ShapeQuery) (catalog.Shape, error) {
	if err := q.Validate(); err != nil {
		return catalog.Shape{}, rpc.Errorf(wire.CodeBadInput, "%v", err)
	}
	if !c.cfg.FullMembership {
		return catalog.Shape{}, errors.Join(ErrNoShape, errors.New("this node does not know every member (routing mode kademlia)"))
	}
	live := c.place.Live()
	batches := make([]*cluster.PeerBatch[struct{}], len(live))
	for i, p := range live {
		batches[i] = &cluster.PeerBatch[struct{}]{Peer: p, Items: []struct{}{{}}}
	}
	answers := cluster.FanOut(ctx, batches, 0, c.cfg.CallTimeout, func(ctx context.Context, b *cluster.PeerBatch[struct{}]) (catalog.Shape, error) {
		return c.replicas.For(b.Peer).Shape(ctx, q)
	})
	var (
		out    catalog.Shape
		failed []error
	)
	for range batches {
		a := <-answers
		if a.Err == nil && q.ValuesOf != "" && !a.Resp.HasValues {
			a.Err = errors.New("answered without the tag values asked for (a node of an older version)")
		}
		if a.Err == nil {
			a.Err = out.Merge(a.Resp)
		}
		if a.Err != nil {
			failed = append(failed, peerErr(a.Batch.Peer, a.Err))
		}
	}
	if len(failed) > 0 {
		return catalog.Shape{}, errors.Join(append([]error{ErrNoShape}, failed...)...)
	}
	out.HasValues = q.ValuesOf != ""
	return out, nil
}

func peerErr(p dht.Peer, err error) error { return fmt.Errorf("node %s: %w", p.RPCAddr, err) }
