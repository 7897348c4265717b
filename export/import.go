package export

import (
	"context"
	"io"
)

// Sink stores what an import reads: the CLI's is the cluster client, the HTTP
// surface's the node's Engine.
type Sink interface {
	// Write stores the writes' points (and their series' tags) and returns how many
	// points were stored.
	Write(ctx context.Context, ws []Write) (int64, error)
}

// InputError is an import's input that cannot be read: it names the line.
type InputError struct{ Err error }

func (e *InputError) Error() string { return e.Err.Error() }
func (e *InputError) Unwrap() error { return e.Err }

// ImportStats is what an import did so far.
type ImportStats struct {
	Points int64 // points stored
	Lines  int   // input lines read
}

// Import reads rd batch by batch and stores each batch through sink before reading the
// next, so memory holds one batch whatever the input's size. It stops at the first
// line it cannot read (an *InputError naming it) or the first batch not stored;
// what was stored before stays. progress, if not nil, is told after each batch.
func Import(ctx context.Context, rd *Reader, sink Sink, progress func(ImportStats)) (ImportStats, error) {
	var st ImportStats
	for {
		ws, err := rd.Next()
		st.Lines = rd.Line()
		if err == io.EOF {
			return st, nil
		}
		if err != nil {
			return st, &InputError{err}
		}
		n, err := sink.Write(ctx, ws)
		st.Points += n
		if err != nil {
			return st, err
		}
		if progress != nil {
			progress(st)
		}
	}
}
