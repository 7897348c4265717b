package store

// CommitNotifier is a BatchAppender that says when a batch is committed, before the
// batch waits for the disk. A writer that keeps the order of its batches (a series'
// points arriving in time order append without reading what the pair holds) may start
// its next batch from there: the next batch's appends then run while this one waits for
// its sync, and the two share it. The Pebble store implements it.
type CommitNotifier interface {
	// AppendBatchThen is AppendBatch that calls committed, once, when the batch is
	// committed: its points are readable and every later append of its pairs is ordered
	// after it. committed is not called when the batch fails before its commit; with
	// SyncAlways the batch is durable only when AppendBatchThen returns nil, as with
	// AppendBatch. committed must not call the store's append methods.
	AppendBatchThen(batch []PairAppend, committed func()) error
}

// AppendBatchThen implements CommitNotifier.
func (p *Pebble) AppendBatchThen(batch []PairAppend, committed func()) error {
	prepared, err := prepareBatch(batch)
	if err != nil || len(prepared) == 0 {
		return err
	}
	return p.appendThen(prepared, nil, committed)
}

// prepareBatch checks and sorts every entry of batch (prepareAppend), leaving out the
// empty ones, as AppendBatch does.
func prepareBatch(batch []PairAppend) ([]PairAppend, error) {
	prepared := make([]PairAppend, 0, len(batch))
	for _, a := range batch {
		if empty, err := prepareAppend(a.Key, &a.Points); err != nil {
			return nil, err
		} else if !empty {
			prepared = append(prepared, a)
		}
	}
	return prepared, nil
}
