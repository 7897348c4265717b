// Package ingest is a PDC client: it reads an IEEE C37.118.2 stream from a PMU or PDC
// over TCP (or TCP commands and UDP data, Config.DataUDP; or UDP only, Config.UDPOnly),
// maps every channel to a tsdht series (DESIGN.md's PMU series naming) and writes the
// samples to a cluster through a Writer, with store-and-forward: flushed
// batches go through a bounded queue — on disk with Config.Spool (package spool) — and
// are written in order, retried while the cluster is unreachable.
//
// The package depends only on the tiny Writer interface (and the optional Describer),
// not on a tsdb client, so that any client can be plugged in.
package ingest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tsdht/tsdht/pmu/c37118"
	"github.com/tsdht/tsdht/pmu/spool"
	"github.com/tsdht/tsdht/tsdb/series"
)

// Writer stores points of one series and returns how many were stored. Writing a
// timestamp twice must keep one point (tsdht's rule): batches can be replayed.
type Writer interface {
	Put(ctx context.Context, key string, pts series.Points) (int, error)
}

// Describer is implemented by a Writer that keeps series metadata (a catalog). The
// ingester calls it when a stream's configuration or header frame arrives or changes.
type Describer interface {
	Describe(ctx context.Context, s Stream) error
}

// ErrRejected marks a write error that retrying cannot fix (a bad key, a type
// mismatch, a timestamp the cluster refuses): the Writer wraps such errors with
// Rejected, and the ingester drops those points, counts them and logs why.
var ErrRejected = errors.New("rejected by the cluster")

type rejected struct{ err error }

func (r rejected) Error() string        { return r.err.Error() }
func (r rejected) Unwrap() []error      { return []error{r.err, ErrRejected} }
func (r rejected) Is(target error) bool { return target == ErrRejected }

// Rejected wraps err so that errors.Is(err, ErrRejected).
func Rejected(err error) error { return rejected{err} }

// FloatFreq says how a float32 FREQ field is read.
type FloatFreq string

const (
	// FloatFreqActual reads float FREQ as the actual frequency in Hz (the standard's reading).
	FloatFreqActual FloatFreq = "actual"
	// FloatFreqDeviation reads float FREQ as a deviation from nominal in Hz (some devices).
	FloatFreqDeviation FloatFreq = "deviation"
)

// Config configures an Ingester. The zero value of every field except Connect is the default.
type Config struct {
	// Connect is the PMU's or PDC's TCP address (commands, and data unless DataUDP is
	// set), e.g. "10.0.0.7:4712".
	Connect string
	// DataUDP is the local UDP address data frames arrive on, one frame per datagram
	// (C37.118.2's TCP commands + UDP data; 4713 by convention, e.g. ":4713"); the PMU
	// must be set up to send there. "" means data comes over the TCP connection.
	DataUDP string
	// UDPOnly sends the commands as datagrams too (C37.118.2's UDP-only mode): Connect is
	// then the PMU's UDP address (4713 by convention) and every frame comes back as a
	// datagram to DataUDP (an ephemeral port when ""). Nothing goes over TCP.
	UDPOnly bool
	// Cfg3Limits bound the reassembly of a CFG-3 sent in fragments; zero fields take
	// c37118's defaults (1 MiB, 64 fragments, 30s).
	Cfg3Limits c37118.Cfg3Limits
	// IDCode is the data stream's IDCODE that command frames are addressed to; 0 means 1.
	IDCode uint16
	// Prefix is prepended to every series key.
	Prefix string
	// FloatFreq: how float32 FREQ values are read; "" means FloatFreqActual.
	FloatFreq FloatFreq
	// Flush is how long samples collect before they are queued as one batch; 0 means 1s.
	Flush time.Duration
	// MaxBatchPoints flushes a batch early when it holds this many samples; 0 means 100,000.
	MaxBatchPoints int
	// Spool is the store-and-forward directory; "" keeps the queue in memory only.
	Spool string
	// SpoolBytes bounds the spool on disk; 0 means 256 MiB.
	SpoolBytes int64
	// SpoolNoSync skips the fsync after each batch (see package spool).
	SpoolNoSync bool
	// MemoryBytes bounds the in-memory queue used without a spool; 0 means 32 MiB.
	MemoryBytes int64
	// PutConcurrency is how many series of a batch are written at once; 0 means 4.
	PutConcurrency int
	// DialTimeout bounds a connection attempt; 0 means 5s.
	DialTimeout time.Duration
	// ReadTimeout: a stream silent this long is dropped and redialled; 0 means 10s.
	ReadTimeout time.Duration
	// BackoffMin and BackoffMax bound the wait between reconnections to the PMU and
	// between write retries; 0 means 500ms and 30s (writes: at most 5s).
	BackoffMin, BackoffMax time.Duration
	// Logger receives progress and problems; nil means slog.Default().
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.IDCode == 0 {
		c.IDCode = 1
	}
	if c.FloatFreq == "" {
		c.FloatFreq = FloatFreqActual
	}
	if c.Flush == 0 {
		c.Flush = time.Second
	}
	if c.MaxBatchPoints == 0 {
		c.MaxBatchPoints = 100_000
	}
	if c.SpoolBytes == 0 {
		c.SpoolBytes = 256 << 20
	}
	if c.MemoryBytes == 0 {
		c.MemoryBytes = 32 << 20
	}
	if c.PutConcurrency == 0 {
		c.PutConcurrency = 4
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = 5 * time.Second
	}
	if c.ReadTimeout == 0 {
		c.ReadTimeout = 10 * time.Second
	}
	if c.BackoffMin == 0 {
		c.BackoffMin = 500 * time.Millisecond
	}
	if c.BackoffMax == 0 {
		c.BackoffMax = 30 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Validate reports a configuration the ingester cannot run with, naming the field.
func (c Config) Validate() error {
	c = c.withDefaults()
	if _, _, err := net.SplitHostPort(c.Connect); err != nil {
		return fmt.Errorf("PMU address %q: want HOST:PORT (%v)", c.Connect, err)
	}
	if c.DataUDP != "" {
		if _, _, err := net.SplitHostPort(c.DataUDP); err != nil {
			return fmt.Errorf("UDP data address %q: want HOST:PORT or :PORT (%v)", c.DataUDP, err)
		}
	}
	if l := c.Cfg3Limits; l.MaxBytes < 0 || l.MaxFragments < 0 || l.Timeout < 0 {
		return fmt.Errorf("CFG-3 reassembly limits %+v: none may be negative", l)
	}
	if c.FloatFreq != FloatFreqActual && c.FloatFreq != FloatFreqDeviation {
		return fmt.Errorf("float frequency reading %q: want %q or %q", c.FloatFreq, FloatFreqActual, FloatFreqDeviation)
	}
	if c.Flush < 10*time.Millisecond || c.Flush > time.Minute {
		return fmt.Errorf("flush interval %v: between 10ms and 1m", c.Flush)
	}
	if c.MaxBatchPoints < 1 {
		return fmt.Errorf("max batch points %d: at least 1", c.MaxBatchPoints)
	}
	if c.Spool != "" {
		if err := (spool.Config{MaxBytes: c.SpoolBytes}).Validate(); err != nil {
			return err
		}
	}
	if c.MemoryBytes < 64<<10 {
		return fmt.Errorf("memory queue limit %d bytes: at least 64 KiB", c.MemoryBytes)
	}
	if c.PutConcurrency < 1 || c.PutConcurrency > 64 {
		return fmt.Errorf("put concurrency %d: 1..64", c.PutConcurrency)
	}
	if c.BackoffMin <= 0 || c.BackoffMax < c.BackoffMin {
		return fmt.Errorf("backoff %v..%v: want 0 < min <= max", c.BackoffMin, c.BackoffMax)
	}
	return nil
}

// Stats are the ingester's counters since it started.
type Stats struct {
	Connects        int64 // sessions opened to the PMU (TCP connections; UDP-only: rounds of commands)
	DataFrames      int64 // data frames decoded
	BadCRC          int64 // frames dropped for a CRC mismatch
	BadFrames       int64 // frames dropped as malformed or not matching the configuration
	SkippedBytes    int64 // bytes skipped to find a SYNC word
	ConfigChanges   int64 // configurations applied (the first one included)
	Samples         int64 // samples decoded
	Queued          int64 // samples handed to the queue/spool (Samples − Queued are being collected or were dropped)
	Stored          int64 // samples the cluster acknowledged
	Dropped         int64 // samples dropped because the queue/spool was full
	Rejected        int64 // samples the cluster refused for good (see ErrRejected)
	WriteRetries    int64 // writes retried after a transient error
	QueuedBytes     int64 // bytes waiting in the queue/spool
	QueuedBatches   int64 // batches waiting in the queue/spool
	SpoolTornBytes  int64 // bytes cut from torn spool tails at start
	LastFrameTimeNs int64 // timestamp of the newest data frame
	MissedFrames    int64 // frames a jump in time skipped, less those that came late within 64 frames
	LateFrames      int64 // frames older than the newest one (out of order; their samples are stored)
	DuplicateFrames int64 // frames that came twice (stored again: the same values overwrite)
	Cfg3Errors      int64 // CFG-3 frames or fragments refused, and unfinished CFG-3s abandoned
}

// Ingester reads one PMU/PDC stream into a cluster.
type Ingester struct {
	cfg Config
	w   Writer
	log *slog.Logger
	q   queue

	mu      sync.Mutex // guards cur and stream
	cur     Batch
	stream  Stream
	flushMu sync.Mutex // serialises flushes, so batches are queued in the order they were cut

	describeReq chan struct{}

	st struct {
		connects, dataFrames, badCRC, badFrames, skipped, cfgChanges         atomic.Int64
		samples, queued, stored, dropped, rejected, retries, lastFrame, torn atomic.Int64
		missed, late, dups, cfg3Errors                                       atomic.Int64
	}

	udp    *net.UDPConn // the data socket with Config.DataUDP or UDPOnly
	pmuUDP *net.UDPAddr // UDPOnly: where commands go
	udpBuf []byte       // its one read buffer, MaxFrameLen bytes
}

// New opens the queue (the spool, when configured: what an earlier run left is replayed
// first) and returns an ingester; Run starts it.
func New(cfg Config, w Writer) (*Ingester, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	in := &Ingester{cfg: cfg, w: w, log: cfg.Logger.With("pmu", cfg.Connect), describeReq: make(chan struct{}, 1)}
	in.stream = Stream{Addr: cfg.Connect, IDCode: cfg.IDCode}
	if cfg.DataUDP != "" || cfg.UDPOnly {
		local := cfg.DataUDP
		if local == "" {
			local = ":0"
		}
		if cfg.UDPOnly {
			ra, err := net.ResolveUDPAddr("udp", cfg.Connect)
			if err != nil {
				return nil, fmt.Errorf("PMU UDP address %s: %w", cfg.Connect, err)
			}
			in.pmuUDP = ra
		}
		la, err := net.ResolveUDPAddr("udp", local)
		if err != nil {
			return nil, fmt.Errorf("UDP data address %s: %w", cfg.DataUDP, err)
		}
		u, err := net.ListenUDP("udp", la)
		if err != nil {
			return nil, fmt.Errorf("UDP data address %s: %w", cfg.DataUDP, err)
		}
		in.udp, in.udpBuf = u, make([]byte, c37118.MaxFrameLen)
	}
	if cfg.Spool != "" {
		s, err := spool.Open(cfg.Spool, spool.Config{MaxBytes: cfg.SpoolBytes, NoSync: cfg.SpoolNoSync}, func(msg string) {
			in.log.Warn(msg)
		})
		if err != nil {
			if in.udp != nil {
				in.udp.Close()
			}
			return nil, fmt.Errorf("spool %s: %w", cfg.Spool, err)
		}
		in.st.torn.Store(s.Stats().TornBytes)
		if st := s.Stats(); st.Records > 0 {
			in.log.Info("replaying spool", "batches", st.Records, "bytes", st.Bytes)
		}
		in.q = s
	} else {
		in.q = newMemQueue(cfg.MemoryBytes)
	}
	return in, nil
}

// Stats returns the counters.
func (in *Ingester) Stats() Stats {
	qs := in.q.Stats()
	return Stats{
		Connects: in.st.connects.Load(), DataFrames: in.st.dataFrames.Load(), BadCRC: in.st.badCRC.Load(),
		BadFrames: in.st.badFrames.Load(), SkippedBytes: in.st.skipped.Load(), ConfigChanges: in.st.cfgChanges.Load(),
		Samples: in.st.samples.Load(), Queued: in.st.queued.Load(), Stored: in.st.stored.Load(), Dropped: in.st.dropped.Load(),
		Rejected: in.st.rejected.Load(), WriteRetries: in.st.retries.Load(), QueuedBytes: qs.Bytes,
		QueuedBatches: qs.Records, SpoolTornBytes: in.st.torn.Load(), LastFrameTimeNs: in.st.lastFrame.Load(),
		MissedFrames: in.st.missed.Load(), LateFrames: in.st.late.Load(), DuplicateFrames: in.st.dups.Load(),
		Cfg3Errors: in.st.cfg3Errors.Load(),
	}
}

// Stream returns the stream's metadata as known now.
func (in *Ingester) Stream() Stream {
	in.mu.Lock()
	defer in.mu.Unlock()
	s := in.stream
	s.Series = append([]SeriesMeta(nil), s.Series...)
	return s
}

// Run reads the stream and writes it until ctx ends, reconnecting with back-off. On
// return the batch being collected has been queued, and the writer has had up to
// drain to empty the queue (what it could not write stays in the spool).
func (in *Ingester) Run(ctx context.Context, drain time.Duration) error {
	stopSend := make(chan struct{})
	sendDone := make(chan struct{})
	sendCtx, cancelSend := context.WithCancel(context.Background())
	defer cancelSend()
	go func() {
		defer close(sendDone)
		in.sendLoop(sendCtx, stopSend)
	}()
	go in.describeLoop(ctx)
	flushDone := make(chan struct{})
	go func() {
		defer close(flushDone)
		t := time.NewTicker(in.cfg.Flush)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				in.flush()
			}
		}
	}()

	in.readLoop(ctx)
	if in.udp != nil {
		in.udp.Close()
	}
	<-flushDone
	in.flush()

	// Let the writer drain what is queued, then stop it.
	deadline := time.NewTimer(drain)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
wait:
	for in.q.Stats().Records > 0 {
		select {
		case <-deadline.C:
			break wait
		case <-tick.C:
		}
	}
	close(stopSend)
	cancelSend()
	<-sendDone
	st := in.Stats()
	in.log.Info("stopped", "samples", st.Samples, "stored", st.Stored, "dropped", st.Dropped,
		"rejected", st.Rejected, "left_in_queue", st.QueuedBatches)
	return in.q.Close()
}

// flush queues the batch collected so far.
func (in *Ingester) flush() {
	in.flushMu.Lock()
	defer in.flushMu.Unlock()
	in.mu.Lock()
	b := in.cur
	in.cur = Batch{}
	in.mu.Unlock()
	n := b.Len()
	if n == 0 {
		return
	}
	rec := AppendBatch(nil, &b)
	if err := in.q.Append(rec); err != nil {
		total := in.st.dropped.Add(int64(n))
		in.log.Error("samples dropped: queue full", "samples", n, "dropped_total", total, "err", err)
		return
	}
	in.st.queued.Add(int64(n))
}

func (in *Ingester) backoff(d time.Duration, max time.Duration) time.Duration {
	d *= 2
	if d > max {
		d = max
	}
	return d
}

// readLoop connects to the PMU and reads sessions until ctx ends.
func (in *Ingester) readLoop(ctx context.Context) {
	wait := in.cfg.BackoffMin
	for ctx.Err() == nil {
		var conn net.Conn
		var err error
		if in.cfg.UDPOnly {
			conn = udpOnlyConn{}
		} else {
			d := net.Dialer{Timeout: in.cfg.DialTimeout}
			conn, err = d.DialContext(ctx, "tcp", in.cfg.Connect)
		}
		if err == nil {
			in.st.connects.Add(1)
			var gotData bool
			gotData, err = in.session(ctx, conn)
			conn.Close()
			if gotData {
				wait = in.cfg.BackoffMin
			}
		}
		if ctx.Err() != nil {
			return
		}
		in.log.Warn("PMU connection lost; reconnecting", "err", err, "in", wait)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = in.backoff(wait, in.cfg.BackoffMax)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// logEvery logs the 1st, 10th, 100th… occurrence, so a storm of bad frames cannot
// flood the log while the counters stay exact.
func (in *Ingester) logEvery(n int64, msg string, args ...any) {
	for p := int64(1); p <= n; p *= 10 {
		if p == n {
			in.log.Warn(msg, args...)
			return
		}
	}
}

// sameConfig reports whether two configurations map to the same channels.
func sameConfig(a, b *c37118.Config) bool {
	if a.IDCode != b.IDCode || a.TimeBase != b.TimeBase || len(a.PMUs) != len(b.PMUs) {
		return false
	}
	for i := range a.PMUs {
		p, q := &a.PMUs[i], &b.PMUs[i]
		if p.CfgCnt != q.CfgCnt || p.Station != q.Station || p.IDCode != q.IDCode || p.Format != q.Format ||
			p.NominalHz != q.NominalHz || len(p.Phasors) != len(q.Phasors) || len(p.Analogs) != len(q.Analogs) ||
			len(p.Digital) != len(q.Digital) {
			return false
		}
		for j := range p.Phasors {
			if p.Phasors[j] != q.Phasors[j] {
				return false
			}
		}
		for j := range p.Analogs {
			if p.Analogs[j] != q.Analogs[j] {
				return false
			}
		}
	}
	return true
}

func (in *Ingester) applyConfig(ctx context.Context, m *channelMap) {
	n := in.st.cfgChanges.Add(1)
	in.mu.Lock()
	in.stream.Config = m.cfg
	in.stream.IDCode = m.cfg.IDCode
	in.stream.Series = m.meta
	in.mu.Unlock()
	stations := make([]string, len(m.cfg.PMUs))
	for i := range m.cfg.PMUs {
		stations[i] = m.cfg.PMUs[i].Station
	}
	in.log.Info("configuration", "n", n, "idcode", m.cfg.IDCode, "stations", stations, "series", len(m.meta),
		"rate", m.cfg.DataRate, "time_base", m.cfg.TimeBase, "version", m.cfg.Version)
	in.describe(ctx)
}

// describe asks the describer goroutine to hand the stream's metadata to a Describer;
// requests coalesce, and the Describer always gets the newest metadata last.
func (in *Ingester) describe(ctx context.Context) {
	select {
	case in.describeReq <- struct{}{}:
	default: // one is pending: it will take the newest metadata
	}
}

func (in *Ingester) describeLoop(ctx context.Context) {
	d, ok := in.w.(Describer)
	for {
		select {
		case <-ctx.Done():
			return
		case <-in.describeReq:
		}
		if !ok {
			continue
		}
		dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		if err := d.Describe(dctx, in.Stream()); err != nil {
			in.log.Warn("series metadata not recorded", "err", err)
		}
		cancel()
	}
}

// addSamples appends one decoded data frame to the current batch.
func (in *Ingester) addSamples(m *channelMap, d *c37118.Data) {
	t := d.TimeNs(m.cfg.TimeBase)
	in.st.lastFrame.Store(t)
	in.mu.Lock()
	b := &in.cur
	n := 0
	for i := range d.PMUs {
		p, k, cp := &d.PMUs[i], &m.pmus[i], &m.cfg.PMUs[i]
		for j, ph := range p.Phasors {
			b.addFloat(k.ph[j][0], t, ph[0])
			b.addFloat(k.ph[j][1], t, ph[1])
		}
		f := p.Freq
		if cp.Format&c37118.FormatFreqFloat != 0 && in.cfg.FloatFreq == FloatFreqDeviation {
			f += float64(cp.NominalHz)
		}
		if !math.IsNaN(f) {
			b.addFloat(k.freq, t, f)
			n++
		}
		if !math.IsNaN(p.DFreq) {
			b.addFloat(k.dfreq, t, p.DFreq)
			n++
		}
		for j, v := range p.Analogs {
			b.addFloat(k.an[j], t, v)
		}
		for j, v := range p.Digital {
			b.addInt(k.dg[j], t, int64(v))
		}
		b.addInt(k.stat, t, int64(p.Stat))
		b.addInt(k.tq, t, int64(d.TimeQuality))
		n += 2*len(p.Phasors) + len(p.Analogs) + len(p.Digital) + 2
	}
	full := b.Len() >= in.cfg.MaxBatchPoints
	in.mu.Unlock()
	in.st.samples.Add(int64(n))
	if full {
		in.flush()
	}
}

// sendLoop writes queued batches in order, retrying transient failures with back-off.
func (in *Ingester) sendLoop(ctx context.Context, stop <-chan struct{}) {
	for {
		rec, pos, err := in.q.Next(stop)
		if err != nil {
			return
		}
		b, err := DecodeBatch(rec)
		if err != nil {
			in.log.Error("queued batch unreadable; skipped", "err", err)
		} else if !in.writeBatch(ctx, b) {
			return // stopping: the batch stays queued (in the spool) for the next run
		}
		if err := in.q.Ack(pos); err != nil {
			in.log.Error("queue acknowledgement failed", "err", err)
			return
		}
	}
}

// writeBatch writes every series of b; false means ctx ended first.
func (in *Ingester) writeBatch(ctx context.Context, b *Batch) bool {
	sem := make(chan struct{}, in.cfg.PutConcurrency)
	var wg sync.WaitGroup
	var stopped atomic.Bool
	for i := range b.Keys {
		sem <- struct{}{}
		wg.Add(1)
		go func(key string, pts series.Points) {
			defer func() { <-sem; wg.Done() }()
			if !in.writeSeries(ctx, key, pts) {
				stopped.Store(true)
			}
		}(b.Keys[i], b.Points[i])
	}
	wg.Wait()
	return !stopped.Load()
}

func (in *Ingester) writeSeries(ctx context.Context, key string, pts series.Points) bool {
	wait := in.cfg.BackoffMin
	maxWait := min(in.cfg.BackoffMax, 5*time.Second)
	var firstErr time.Time
	for attempt := 0; ; attempt++ {
		if ctx.Err() != nil {
			return false
		}
		_, err := in.w.Put(ctx, key, pts)
		if err == nil {
			in.st.stored.Add(int64(pts.Len()))
			if attempt > 0 {
				in.log.Info("write succeeded after retries", "series", key, "attempts", attempt+1, "after", time.Since(firstErr).Round(time.Millisecond))
			}
			return true
		}
		if errors.Is(err, ErrRejected) {
			n := in.st.rejected.Add(int64(pts.Len()))
			in.log.Error("samples rejected by the cluster; dropped", "series", key, "samples", pts.Len(), "rejected_total", n, "err", err)
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		in.st.retries.Add(1)
		if attempt == 0 {
			firstErr = time.Now()
			in.log.Warn("write failed; retrying (batches wait in the queue)", "series", key, "err", err)
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(wait):
		}
		wait = in.backoff(wait, maxWait)
	}
}
