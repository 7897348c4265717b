package backup

import (
	"bufio"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/agg"
	"github.com/tsdht/tsdht/tsdb/catalog"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// Cluster is what Backup and Restore need of a cluster: the thin client's calls
// (*client.Client implements it).
type Cluster interface {
	Series(ctx context.Context, match []catalog.Tag, prefix string) ([]catalog.Entry, error)
	Describe(ctx context.Context, key string) (series.Type, quanta.Quantum, error)
	AggWindows(ctx context.Context, key string, from, to, every int64, opt wire.GetOptions,
		fn func(wire.AggResult) error, progress func(done, total int64)) error
	Get(ctx context.Context, key string, from, to int64, opt wire.GetOptions) (wire.Result, error)
	Put(ctx context.Context, key string, pts series.Points, opt wire.PutOptions) (int, error)
	Meta(ctx context.Context, req wire.MetaReq) (catalog.Entry, error)
}

// Options configure a backup run.
type Options struct {
	Dir    string
	Prefix string
	Match  []catalog.Tag
	// From and To bound the points backed up, [From, To) in ns; To is lowered to the
	// cut. A zero Options range (both 0) means everything up to the cut.
	From, To int64
	// Cut is the time of the cut (ns); 0 means now, when the run starts.
	Cut int64
	// Rate bounds the points read per second, summed over the series read at once
	// (0: unpaced). Reads are asked for in pieces of at most Rate points, each after
	// the limiter lets it through.
	Rate float64
	// Concurrency is how many series are read at once (0: DefaultConcurrency).
	Concurrency int
	// Read tunes the reads (quorum); AllowPartial is refused: a backup is never short.
	Read wire.GetOptions
	// MaxBlocks lowers MaxBlocks for this run (0: MaxBlocks).
	MaxBlocks int
	// Full reads every quantum of the range again, whatever its statistics say, and
	// compares its contents with the block recorded: it writes only what differs, and
	// sees what the statistics cannot (a float value rewritten in a quantum's middle).
	Full bool
}

// DefaultConcurrency is how many series a backup reads at once by default.
const DefaultConcurrency = 2

// MaxBlocks bounds the quanta one backup directory's manifest lists, all series
// together: the manifest is held in memory by every run and restore.
const MaxBlocks = 1 << 20

// maxReadPoints bounds the points one read asks for (a read of several quanta).
const maxReadPoints = 100_000

// Backup copies the selected series of c into o.Dir as of a cut, and returns the run it
// recorded. Into a directory that holds a backup of the same selection it reads and
// writes only the quanta whose statistics changed since (new quanta, the quantum the
// previous cut fell in, quanta written late or deleted from), and keeps the rest.
func Backup(ctx context.Context, c Cluster, o Options) (Run, error) {
	began := time.Now()
	if o.Read.AllowPartial {
		return Run{}, errors.New("backup: a partial read would leave the backup short; read at a quorum (AllowPartial off)")
	}
	if o.Cut == 0 {
		o.Cut = began.UnixNano()
	}
	if o.From == 0 && o.To == 0 {
		o.From, o.To = math.MinInt64, math.MaxInt64
	}
	if o.To > o.Cut {
		o.To = o.Cut
	}
	if o.From > o.To {
		return Run{}, fmt.Errorf("backup: range [%d, %d) is empty or reversed (the cut is %d): from must be before to and before the cut", o.From, o.To, o.Cut)
	}
	if o.Concurrency <= 0 {
		o.Concurrency = DefaultConcurrency
	}
	sel := Selection{Prefix: o.Prefix}
	for _, t := range o.Match {
		sel.Match = append(sel.Match, t.String())
	}
	old, err := readManifest(o.Dir)
	switch {
	case errors.Is(err, ErrNoBackup):
		old = &Manifest{Format: formatName, Version: FormatVersion, Selection: sel}
	case err != nil:
		return Run{}, fmt.Errorf("backup into %s: %w; use a new directory, or move the damaged backup away", o.Dir, err)
	case !slices.Equal(old.Selection.Match, sel.Match) || old.Selection.Prefix != sel.Prefix:
		return Run{}, fmt.Errorf("backup into %s: it holds a backup of prefix %q, match %q, not of prefix %q, match %q: back up another selection into another directory",
			o.Dir, old.Selection.Prefix, old.Selection.Match, sel.Prefix, sel.Match)
	}
	if err := os.MkdirAll(filepath.Join(o.Dir, DataDir), 0o755); err != nil {
		return Run{}, fmt.Errorf("backup: %w", err)
	}
	removeLeftovers(o.Dir, old)
	es, err := c.Series(ctx, o.Match, o.Prefix)
	if err != nil {
		return Run{}, fmt.Errorf("backup: listing the series: %w", err)
	}
	run := Run{Number: len(old.Runs) + 1, Cut: o.Cut, CutTime: time.Unix(0, o.Cut).UTC().Format(time.RFC3339Nano),
		From: o.From, To: o.To, Series: len(es)}
	b := &backer{c: c, o: o, run: &run, w: &fileWriter{dir: o.Dir, run: run.Number}}
	if o.Rate > 0 {
		// A tenth of a second's worth at once: the pace holds from the first read.
		b.lim = rate.NewLimiter(rate.Limit(o.Rate), max(1, int(o.Rate/10)))
	}
	prev := map[string]*SeriesInfo{}
	for i := range old.Series {
		prev[old.Series[i].Key] = &old.Series[i]
	}
	out := make([]SeriesInfo, len(es))
	errs := forEach(ctx, len(es), o.Concurrency, func(i int) (err error) {
		out[i], err = b.series(ctx, es[i], prev[es[i].Key])
		if err != nil {
			err = fmt.Errorf("series %q: %w", es[i].Key, err)
		}
		return err
	})
	files, ferr := b.w.close()
	if ferr == nil && len(files) > 0 {
		ferr = syncDir(filepath.Join(o.Dir, DataDir)) // the files' names, before the manifest names them
	}
	if err := errors.Join(append(errs, ferr)...); err != nil {
		b.w.remove()
		return Run{}, fmt.Errorf("backup: %w (the backup in %s is as it was before this run)", err, o.Dir)
	}
	m := &Manifest{Format: formatName, Version: FormatVersion, Selection: sel, Runs: append(old.Runs, run)}
	for _, s := range out {
		if s.Key != "" {
			m.Series = append(m.Series, s)
		}
	}
	sort.Slice(m.Series, func(i, j int) bool { return m.Series[i].Key < m.Series[j].Key })
	used := map[string]bool{}
	for _, s := range m.Series {
		for _, bl := range s.Blocks {
			used[bl.File] = true
			m.Runs[len(m.Runs)-1].PointsHeld += bl.Points
		}
	}
	var stale []string
	for _, f := range append(old.Files, files...) {
		if used[f.Name] {
			m.Files = append(m.Files, f)
		} else {
			stale = append(stale, f.Name)
		}
	}
	r := &m.Runs[len(m.Runs)-1]
	for _, f := range files {
		r.Files = append(r.Files, f.Name)
	}
	r.Seconds = time.Since(began).Seconds()
	if err := writeManifest(o.Dir, m); err != nil {
		return Run{}, fmt.Errorf("backup: writing the manifest: %w", err)
	}
	for _, name := range stale {
		os.Remove(filepath.Join(o.Dir, name)) // superseded: no block of the manifest points into it
	}
	return *r, nil
}

// removeLeftovers deletes the data files the manifest does not list: what a run that
// was interrupted (killed, out of disk) wrote before its manifest. The manifest is the
// backup; nothing else points into them.
func removeLeftovers(dir string, m *Manifest) {
	listed := map[string]bool{}
	for _, f := range m.Files {
		listed[f.Name] = true
	}
	ents, _ := os.ReadDir(filepath.Join(dir, DataDir))
	for _, e := range ents {
		if name := DataDir + "/" + e.Name(); !listed[name] && !e.IsDir() && filepath.Ext(name) == ".tsb" {
			os.Remove(filepath.Join(dir, name))
		}
	}
}

// forEach calls fn(0..n-1), conc at a time, and returns each call's error (a call
// not started because ctx ended has ctx's).
func forEach(ctx context.Context, n, conc int, fn func(i int) error) []error {
	errs := make([]error, n)
	slots := make(chan struct{}, conc)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				errs[i] = ctx.Err()
				return
			}
			defer func() { <-slots }()
			errs[i] = fn(i)
		}()
	}
	wg.Wait()
	return errs
}

// backer is one backup run's state shared by the series read at once.
type backer struct {
	c   Cluster
	o   Options
	lim *rate.Limiter
	w   *fileWriter

	mu     sync.Mutex
	run    *Run
	blocks int // quanta the new manifest will list so far (MaxBlocks)
}

// count adds n quanta to what the new manifest will list, and fails past MaxBlocks.
func (b *backer) count(n int) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.blocks += n
	if limit := cmp.Or(b.o.MaxBlocks, MaxBlocks); b.blocks > limit {
		return fmt.Errorf("the backup would list more than %d quanta, which its manifest holds in memory: back up by range (--from/--until) or by prefix, into separate directories", limit)
	}
	return nil
}

// window is one quantum of a series as this run sees it.
type window struct {
	start    int64 // UNIX seconds
	from, to int64 // ns covered
	count    int64
	fp       string
	prev     []BlockEntry // what the manifest held for the quantum (Full compares it)
}

// series backs up one series: its catalog entry, and the quanta whose fingerprint
// differs from what prev recorded.
func (b *backer) series(ctx context.Context, e catalog.Entry, prev *SeriesInfo) (SeriesInfo, error) {
	typ, q, err := b.c.Describe(ctx, e.Key)
	var re *rpc.RemoteError
	if errors.As(err, &re) && re.Code == wire.CodeUnknownSeries {
		// Deleted whole since it was listed, or a catalog entry with no point ever
		// written: nothing to restore a type or points from.
		b.mu.Lock()
		b.run.Skipped++
		b.mu.Unlock()
		return SeriesInfo{}, nil
	}
	if err != nil {
		return SeriesInfo{}, err
	}
	info := SeriesInfo{Key: e.Key, Type: typ.String(), Quantum: int64(q), Unit: e.Unit, Description: e.Description,
		Tags: e.Tags, NominalRate: e.NominalRate}
	qn := int64(q) * 1e9
	var ws []window
	err = b.c.AggWindows(ctx, e.Key, b.o.From, b.o.To, qn, b.o.Read, func(res wire.AggResult) error {
		for i := range res.Windows {
			w := &res.Windows[i]
			start := q.Start(w.Start)
			if err := b.count(1); err != nil {
				return err
			}
			ws = append(ws, window{start: start, from: max(b.o.From, q.BeginNanos(start)), to: min(b.o.To, q.EndNanos(start)),
				count: w.Count, fp: fingerprint(&w.Partial)})
		}
		return nil
	}, nil)
	if err != nil {
		return SeriesInfo{}, fmt.Errorf("statistics of its quanta: %w", err)
	}
	// What the previous runs hold, by quantum; quanta this run's range does not touch
	// are kept whatever they hold.
	had := map[int64][]BlockEntry{}
	if prev != nil && prev.Quantum == int64(q) && prev.Type == info.Type {
		for _, bl := range prev.Blocks {
			if q.EndNanos(bl.Start) <= b.o.From || q.BeginNanos(bl.Start) >= b.o.To {
				if err := b.count(1); err != nil {
					return SeriesInfo{}, err
				}
				info.Blocks = append(info.Blocks, bl)
				continue
			}
			had[bl.Start] = append(had[bl.Start], bl)
		}
	}
	var todo []window
	kept := 0
	for _, w := range ws {
		h := had[w.start]
		delete(had, w.start)
		if !b.o.Full && unchanged(h, w) {
			info.Blocks = append(info.Blocks, h...)
			kept += len(h)
			continue
		}
		w.prev = h
		todo = append(todo, w)
	}
	dropped := 0
	for _, h := range had {
		dropped += len(h) // quanta emptied since (deleted)
	}
	// Read what changed, several adjacent quanta per request.
	for len(todo) > 0 {
		n, pts := 1, todo[0].count
		for n < len(todo) && todo[n].start == todo[n-1].start+int64(q) && pts+todo[n].count <= b.readPoints() {
			pts += todo[n].count
			n++
		}
		group := todo[:n]
		todo = todo[n:]
		if err := b.pace(ctx, pts); err != nil {
			return SeriesInfo{}, err
		}
		res, err := b.c.Get(ctx, e.Key, group[0].from, group[n-1].to, b.o.Read)
		if err != nil {
			return SeriesInfo{}, fmt.Errorf("read of [%d, %d): %w", group[0].from, group[n-1].to, err)
		}
		if res.Partial {
			return SeriesInfo{}, fmt.Errorf("read of [%d, %d): %d shards could not be read from any replica", group[0].from, group[n-1].to, res.Missing)
		}
		pts2 := res.Points
		i := 0
		for _, w := range group {
			j := i
			for j < pts2.Len() && pts2.T[j] < w.to {
				j++
			}
			for part := i; part < j || part == i; part += MaxBlockPoints {
				hi := min(j, part+MaxBlockPoints)
				blk := Block{Key: e.Key, Start: w.start, Quantum: int64(q), From: w.from, To: w.to, Points: pts2.Slice(part, hi)}
				blk.Points.Type = typ
				enc := appendBlock(nil, &blk)
				content := contentHash(enc)
				if whole := part == i && hi == j; whole && len(w.prev) == 1 && w.prev[0].Content == content {
					// Read again (Full) and found as recorded: keep the block.
					be := w.prev[0]
					be.Fingerprint = w.fp
					info.Blocks = append(info.Blocks, be)
					kept++
					break
				}
				be, err := b.w.write(&blk, enc)
				if err != nil {
					return SeriesInfo{}, err
				}
				be.Fingerprint, be.Content = w.fp, content
				info.Blocks = append(info.Blocks, be)
				b.mu.Lock()
				b.run.Written++
				b.run.Points += int64(hi - part)
				b.run.Bytes += be.Length
				b.mu.Unlock()
				if hi == j {
					break
				}
			}
			i = j
		}
	}
	sort.SliceStable(info.Blocks, func(i, j int) bool { return info.Blocks[i].Start < info.Blocks[j].Start })
	b.mu.Lock()
	b.run.Kept += kept
	b.run.Dropped += dropped
	b.mu.Unlock()
	return info, nil
}

// readPoints is how many points one read asks for at most (unless one quantum holds
// more): maxReadPoints, or what the limiter lets through at once.
func (b *backer) readPoints() int64 {
	if b.lim == nil {
		return maxReadPoints
	}
	return min(maxReadPoints, int64(b.lim.Burst()))
}

// pace waits until the limiter lets n points be read.
func (b *backer) pace(ctx context.Context, n int64) error {
	if b.lim == nil {
		return nil
	}
	for n > 0 {
		k := min(n, int64(b.lim.Burst()))
		if err := b.lim.WaitN(ctx, int(k)); err != nil {
			return err
		}
		n -= k
	}
	return nil
}

// unchanged reports whether the blocks recorded for a quantum hold what the cluster's
// statistics now say it holds over the same range.
func unchanged(had []BlockEntry, w window) bool {
	if len(had) == 0 {
		return false
	}
	var n int64
	for _, bl := range had {
		if bl.From != w.from || bl.To != w.to || bl.Fingerprint != w.fp {
			return false
		}
		n += bl.Points
	}
	return n == w.count
}

// fingerprint digests a quantum's statistics by the fields every replica computes the
// same whatever order its points came in: the count, the first and last time and
// value, the extremes, and an int series' exact sum. A float sum depends on the order
// of additions and is left out; so a value rewritten in the middle of a float quantum,
// with count, ends and extremes unchanged, is not seen (docs/backup.md).
func fingerprint(p *agg.Partial) string {
	var b []byte
	u := func(v uint64) { b = binary.LittleEndian.AppendUint64(b, v) }
	u(uint64(p.Count))
	u(uint64(p.FirstT))
	u(uint64(p.LastT))
	b = append(b, byte(p.Type))
	switch p.Type {
	case series.Float:
		for _, f := range []float64{p.First, p.Last, p.Min, p.Max} {
			u(math.Float64bits(f))
		}
	case series.Int:
		for _, v := range []int64{p.IFirst, p.ILast, p.IMin, p.IMax, p.ISum.Hi, int64(p.ISum.Lo)} {
			u(uint64(v))
		}
	case series.String:
		for _, s := range []string{p.SFirst, p.SLast} {
			u(uint64(len(s)))
			b = append(b, s...)
		}
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:8])
}

// contentHash digests a block's encoding: equal blocks, equal hashes.
func contentHash(enc []byte) string {
	s := sha256.Sum256(enc)
	return hex.EncodeToString(s[:16])
}

// fileWriter writes a run's blocks into data files, starting a new one past
// MaxFileBytes. It is safe for concurrent use.
type fileWriter struct {
	dir string
	run int

	mu    sync.Mutex
	f     *os.File
	bw    *bufio.Writer
	sum   hash.Hash
	name  string
	size  int64
	seq   int
	done  []FileEntry
	made  []string
	wrErr error
}

// write appends a block, encoded as enc (appendBlock), to the current file and returns
// where it went.
func (w *fileWriter) write(b *Block, enc []byte) (BlockEntry, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.wrErr != nil {
		return BlockEntry{}, w.wrErr
	}
	if w.f != nil && w.size >= MaxFileBytes {
		w.wrErr = w.finish()
	}
	if w.f == nil && w.wrErr == nil {
		w.wrErr = w.open()
	}
	if w.wrErr != nil {
		return BlockEntry{}, w.wrErr
	}
	be := BlockEntry{Start: b.Start, From: b.From, To: b.To, Points: int64(b.Points.Len()), File: w.name, Offset: w.size, Length: int64(len(enc))}
	if _, err := w.bw.Write(enc); err != nil {
		w.wrErr = fmt.Errorf("writing %s: %w", filepath.Join(w.dir, w.name), err)
		return BlockEntry{}, w.wrErr
	}
	w.sum.Write(enc)
	w.size += int64(len(enc))
	return be, nil
}

func (w *fileWriter) open() error {
	w.seq++
	w.name = fmt.Sprintf("%s/r%06d-%04d.tsb", DataDir, w.run, w.seq)
	path := filepath.Join(w.dir, w.name)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("creating %s: %w", path, err)
	}
	w.f, w.bw, w.sum = f, bufio.NewWriterSize(f, 1<<20), sha256.New()
	w.made = append(w.made, path)
	hdr := appendFileHeader(nil)
	w.bw.Write(hdr)
	w.sum.Write(hdr)
	w.size = int64(len(hdr))
	return nil
}

// finish flushes, syncs and closes the current file and records it.
func (w *fileWriter) finish() error {
	path := filepath.Join(w.dir, w.name)
	err := w.bw.Flush()
	if err == nil {
		err = w.f.Sync()
	}
	if cerr := w.f.Close(); err == nil {
		err = cerr
	}
	w.f = nil
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	w.done = append(w.done, FileEntry{Name: w.name, Size: w.size, SHA256: hex.EncodeToString(w.sum.Sum(nil))})
	return nil
}

// close finishes the current file and returns every file written.
func (w *fileWriter) close() ([]FileEntry, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f != nil {
		if err := w.finish(); err != nil && w.wrErr == nil {
			w.wrErr = err
		}
	}
	return w.done, w.wrErr
}

// remove deletes the files of a run that failed: the manifest never named them.
func (w *fileWriter) remove() {
	for _, p := range w.made {
		os.Remove(p)
	}
}
