package uplink

import (
	"context"

	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/agg"
	"github.com/tsdht/tsdht/tsdb/catalog"
	"github.com/tsdht/tsdht/tsdb/client"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// tsdhtSink writes to another tsdht cluster through its thin client: a raw series
// under its own key and type; a windowed one as the float series <key>_mean, _min and
// _max (integer for an integer series' min and max) and the integer series
// <key>_count, each point at its window's start. Tags and metadata are not copied.
type tsdhtSink struct {
	cli   *client.Client
	batch []tsdhtPut
	bytes int
}

type tsdhtPut struct {
	key string
	pts series.Points
}

func newTsdhtSink(t Target, cfg Config) (*tsdhtSink, error) {
	c := client.DefaultConfig()
	c.Timeout = cfg.Timeout
	c.RPC = rpc.DefaultConfig()
	c.RPC.ClusterKey = cfg.ClusterKey
	cli, err := client.New(t.Addrs, c)
	if err != nil {
		return nil, err
	}
	return &tsdhtSink{cli: cli}, nil
}

func (s *tsdhtSink) points(e *catalog.Entry, pts *series.Points) {
	s.batch = append(s.batch, tsdhtPut{e.Key, *pts})
	s.bytes += pts.WireSize()
}

func (s *tsdhtSink) windows(e *catalog.Entry, ws []agg.Window) {
	for _, fn := range aggFns {
		var p series.Points
		for i := range ws {
			switch v := ws[i].Eval(fn); v.Kind {
			case series.Float:
				p.AppendFloat(ws[i].Start, v.F)
			case series.Int:
				p.AppendInt(ws[i].Start, v.I)
			}
		}
		if p.Len() > 0 {
			s.points(&catalog.Entry{Key: e.Key + "_" + fn.String()}, &p)
		}
	}
}

func (s *tsdhtSink) size() int { return s.bytes }
func (s *tsdhtSink) reset()    { s.batch, s.bytes = s.batch[:0], 0 }
func (s *tsdhtSink) close() error {
	return s.cli.Close()
}

func (s *tsdhtSink) send(ctx context.Context) (int, error) {
	sent := 0
	for _, p := range s.batch {
		if _, err := s.cli.Put(ctx, p.key, p.pts, wire.PutOptions{}); err != nil {
			if re, ok := err.(*rpc.RemoteError); ok && (re.Code == wire.CodeTypeMismatch || re.Code == wire.CodeBadInput) {
				return sent, &rejectedError{"tsdht target: " + err.Error()}
			}
			return sent, err
		}
		sent += p.pts.WireSize()
	}
	return sent, nil
}
