package main

import (
	"bufio"
	"cmp"
	"fmt"
	"os/exec"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// The writer's requests in an execution trace of the node (TSDHT_SOAK_PROFILE): where
// the time of the slowest went, read from `go tool trace -d=parsed` (the trace parser
// of the Go toolchain that wrote it).

// soakFIFO says this process runs at SCHED_FIFO (TSDHT_SOAK_WRITER_FIFO): what it
// starts must ask for SCHED_OTHER.
var soakFIFO atomic.Bool

// traceMove is one state transition of a goroutine.
type traceMove struct {
	t        int64  // ns, trace clock
	by       int64  // the goroutine that made it (a wake-up's waker), or -1
	p        int64  // the P it happened on, or -1 (sysmon, a thread without one)
	from, to string // Running, Runnable, Waiting, Syscall, ...
	frames   []string
}

// procMove is one state transition of a P: Idle->Running, Running->Idle.
type procMove struct {
	t        int64
	p        int64
	from, to string
}

// nodeTrace is what readTrace takes from a trace.
type nodeTrace struct {
	gs    map[int64][]*traceMove // by goroutine, in time order
	procs []procMove             // in time order
	gcs   int                    // GC cycles begun
	// Clock snapshots, one per generation of the trace (about a second), in order:
	// trace time syncs[i].trace was wall time syncs[i].wall.
	syncs []clockSync
}

type clockSync struct {
	trace int64
	wall  time.Time
}

// near returns the clock snapshot closest to trace time t: the trace clock's rate is
// estimated, so the wall clock is read from the nearest.
func (nt *nodeTrace) near(t int64) clockSync {
	return nt.nearest(t, func(s clockSync) int64 { return s.trace })
}

// nearest returns the clock snapshot whose key (its trace or its wall time, in ns) is
// closest to k.
func (nt *nodeTrace) nearest(k int64, key func(clockSync) int64) clockSync {
	i, _ := slices.BinarySearchFunc(nt.syncs, k, func(s clockSync, k int64) int { return cmp.Compare(key(s), k) })
	switch {
	case i == len(nt.syncs):
		return nt.syncs[i-1]
	case i > 0 && k-key(nt.syncs[i-1]) < key(nt.syncs[i])-k:
		return nt.syncs[i-1]
	}
	return nt.syncs[i]
}

// wallTime returns trace time t on the wall clock.
func (nt *nodeTrace) wallTime(t int64) time.Time {
	s := nt.near(t)
	return s.wall.Add(time.Duration(t - s.trace))
}

// span returns the time from the trace's first P transition to its last.
func (nt *nodeTrace) span() time.Duration {
	if len(nt.procs) == 0 {
		return 0
	}
	return time.Duration(nt.procs[len(nt.procs)-1].t - nt.procs[0].t)
}

// traceTime returns wall time w in the trace's clock.
func (nt *nodeTrace) traceTime(w time.Time) int64 {
	s := nt.nearest(w.UnixNano(), func(s clockSync) int64 { return s.wall.UnixNano() })
	return s.trace + w.Sub(s.wall).Nanoseconds()
}

var (
	traceMoveRE = regexp.MustCompile(`^M=-?\d+ P=(-?\d+) G=(-?\d+) StateTransition Time=(\d+) GoID=(\d+) (\w+)->(\w+)`)
	procMoveRE  = regexp.MustCompile(`^M=-?\d+ P=-?\d+ G=-?\d+ StateTransition Time=(\d+) ProcID=(\d+) (\w+)->(\w+)`)
	syncRE      = regexp.MustCompile(`^M=-?\d+ P=-?\d+ G=-?\d+ Sync Time=\d+ N=\d+ Trace=(\d+) Mono=\d+ Wall=(\S+)`)
)

// readTrace parses the state transitions of every goroutine and P and the clock
// snapshots, and counts GC cycles.
func readTrace(file string) (*nodeTrace, error) {
	cmd := exec.Command("go", "tool", "trace", "-d=parsed", file)
	if soakFIFO.Load() {
		// Not at the writer's SCHED_FIFO: a parse of seconds would keep a CPU from
		// everything else.
		cmd = exec.Command("chrt", append([]string{"-o", "0"}, cmd.Args...)...)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	nt := &nodeTrace{gs: map[int64][]*traceMove{}}
	var cur *traceMove
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "M="):
			cur = nil
			if m := traceMoveRE.FindStringSubmatch(line); m != nil {
				p, _ := strconv.ParseInt(m[1], 10, 64)
				by, _ := strconv.ParseInt(m[2], 10, 64)
				t, _ := strconv.ParseInt(m[3], 10, 64)
				g, _ := strconv.ParseInt(m[4], 10, 64)
				cur = &traceMove{t: t, by: by, p: p, from: m[5], to: m[6]}
				nt.gs[g] = append(nt.gs[g], cur)
			} else if m := procMoveRE.FindStringSubmatch(line); m != nil {
				t, _ := strconv.ParseInt(m[1], 10, 64)
				p, _ := strconv.ParseInt(m[2], 10, 64)
				nt.procs = append(nt.procs, procMove{t: t, p: p, from: m[3], to: m[4]})
			} else if m := syncRE.FindStringSubmatch(line); m != nil {
				var cs clockSync
				cs.trace, _ = strconv.ParseInt(m[1], 10, 64)
				cs.wall, _ = time.Parse(time.RFC3339Nano, m[2])
				nt.syncs = append(nt.syncs, cs)
			} else if strings.Contains(line, `RangeBegin`) && strings.Contains(line, `"GC concurrent mark phase"`) {
				nt.gcs++
			}
		case cur != nil && strings.HasPrefix(line, "\t") && !strings.HasPrefix(line, "\t\t"):
			f, _, _ := strings.Cut(strings.TrimSpace(line), " @")
			cur.frames = append(cur.frames, f)
		}
	}
	if err := cmd.Wait(); err != nil {
		return nil, fmt.Errorf("go tool trace -d=parsed %s: %w", file, err)
	}
	return nt, sc.Err()
}

// busiest returns the goroutine that blocked in fn the most times: the writer's
// connection waits for its next frame (serverConn.awaitFrame) 60 times a second
// through the whole trace, the hostile ones a few times each.
func busiest(gs map[int64][]*traceMove, fn string) int64 {
	best, n := int64(-1), 0
	for g, ms := range gs {
		k := 0
		for _, m := range ms {
			if m.to == "Waiting" && slices.ContainsFunc(m.frames, func(f string) bool { return strings.Contains(f, fn) }) {
				k++
			}
		}
		if k > n {
			best, n = g, k
		}
	}
	return best
}

// traceClasses are the names traceClass gives, in the order the logs list them.
var traceClasses = []string{"the collector", "long reads", "HTTP requests", "connections", "other"}

// traceClass names what a goroutine was doing from the stack where it stopped running
// (for one that ended, the stack that started it).
func traceClass(frames []string) string {
	s := strings.Join(frames, " ")
	switch {
	case strings.Contains(s, "gcBgMarkWorker"), strings.Contains(s, "gcMarkDone"), strings.Contains(s, "gcAssist"), strings.Contains(s, "bgsweep"), strings.Contains(s, "gcParkAssist"):
		return "the collector"
	case strings.Contains(s, "planRead"), strings.Contains(s, "AggRefs"), strings.Contains(s, "cluster.FanOut"), strings.Contains(s, "aggRound"), strings.Contains(s, "runFetches"),
		strings.Contains(s, "replica.(*Local)"), strings.Contains(s, "pebble"), strings.Contains(s, "quanta."):
		return "long reads"
	case strings.Contains(s, "httpapi."), strings.Contains(s, "promapi."), strings.Contains(s, "net/http."):
		return "HTTP requests"
	case strings.Contains(s, "rpc."), strings.Contains(s, "internal/poll"), strings.Contains(s, "syscall."), strings.Contains(s, "net."):
		return "connections"
	}
	return "other" // goroutines ending, timers
}

// blockedAt names where a goroutine blocked: the first frame outside the runtime and
// sync, internal/poll and context packages.
func blockedAt(frames []string) string {
	for _, f := range frames {
		if !strings.HasPrefix(f, "runtime.") && !strings.HasPrefix(f, "sync.") && !strings.HasPrefix(f, "internal/") && !strings.HasPrefix(f, "context.") {
			return f
		}
	}
	if len(frames) > 0 {
		return frames[0]
	}
	return "?"
}

// writerReq is one of the writer's requests in the node's trace.
type writerReq struct {
	start, end int64            // the connection's goroutine woken with it; its worker done
	wrote      int64            // the worker's last system call began: the answer's write
	wroteFor   int64            // ns that system call took
	state      map[string]int64 // ns per state of the goroutine that had the request
	waits      [][2]int64       // runnable spans
	blocked    map[string]int64 // ns blocked, by where (blockedAt)
}

// writerRequests finds the writer's requests in the node's trace: each runs from
// its connection's goroutine waking with the request to its worker's return to the
// idle wait.
func writerRequests(nt *nodeTrace) (conn int64, reqs []*writerReq, err error) {
	gs := nt.gs
	conn = busiest(gs, "rpc.(*serverConn).awaitFrame")
	if conn < 0 {
		return -1, nil, fmt.Errorf("the writer's connection is not in the trace")
	}
	// Its workers are the goroutines it wakes or starts (a second one when the first
	// is still busy).
	type ev struct {
		g int64
		m *traceMove
	}
	var evs []ev
	for g, ms := range gs {
		if g == conn || slices.ContainsFunc(ms, func(m *traceMove) bool { return m.by == conn && m.to == "Runnable" }) {
			for _, m := range ms {
				evs = append(evs, ev{g, m})
			}
		}
	}
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].m.t < evs[j].m.t })
	var cur *writerReq
	holder := int64(-1) // the goroutine that has the request: conn, then its worker
	state := map[int64]string{}
	where := map[int64]string{} // where each goroutine last blocked
	var last int64
	for _, e := range evs {
		if e.g == conn && e.m.from == "Waiting" && e.m.to == "Runnable" && (cur == nil || holder == conn) {
			cur, holder, last = &writerReq{start: e.m.t, state: map[string]int64{}, blocked: map[string]int64{}}, conn, e.m.t
			state[conn] = e.m.to
			continue
		}
		if cur != nil {
			st := state[holder]
			cur.state[st] += e.m.t - last
			if st == "Runnable" {
				cur.waits = append(cur.waits, [2]int64{last, e.m.t})
			}
			if st == "Waiting" {
				cur.blocked[where[holder]] += e.m.t - last
			}
			last = e.m.t
		}
		state[e.g] = e.m.to
		if e.m.to == "Waiting" {
			where[e.g] = blockedAt(e.m.frames)
		}
		if cur == nil {
			continue
		}
		if holder == conn && e.g != conn && e.m.by == conn && e.m.to == "Runnable" {
			holder = e.g // handed to a worker
		}
		if e.g == holder && e.m.to == "Syscall" {
			cur.wrote, cur.wroteFor = e.m.t, 0 // the last system call of the request's is the answer's write
		}
		if e.g == holder && e.m.from == "Syscall" && cur.wrote > 0 && cur.wroteFor == 0 {
			cur.wroteFor = e.m.t - cur.wrote
		}
		if e.g == holder && holder != conn && e.m.from == "Running" && (e.m.to == "NotExist" ||
			e.m.to == "Waiting" && slices.ContainsFunc(e.m.frames[:min(2, len(e.m.frames))], func(f string) bool { return strings.Contains(f, "worker") })) {
			cur.end = e.m.t
			reqs = append(reqs, cur)
			cur, holder = nil, -1
		}
	}
	return conn, reqs, nil
}

// writerTrace summarises the writer's requests in the node's trace (writerRequests).
// For the slowest 5 % it splits the time into waiting
// for a P (runnable), in system calls, blocked, and running, and names what ran on the
// Ps while the writer's goroutines waited for one.
func writerTrace(nt *nodeTrace) ([]string, error) {
	gcs := nt.gcs
	conn, reqs, err := writerRequests(nt)
	if err != nil {
		return nil, err
	}
	if len(reqs) < 10 {
		return nil, fmt.Errorf("%d of the writer's requests found in the trace", len(reqs))
	}
	sort.Slice(reqs, func(i, j int) bool { return reqs[i].end-reqs[i].start < reqs[j].end-reqs[j].start })
	took := func(r *writerReq) time.Duration { return time.Duration(r.end - r.start) }
	out := []string{fmt.Sprintf("the node's trace: %d of the writer's requests, p50 %v, p90 %v, p99 %v (time in the node); %d GC cycles in %v",
		len(reqs), took(reqs[len(reqs)/2]).Round(time.Microsecond), took(reqs[len(reqs)*9/10]).Round(time.Microsecond),
		took(reqs[len(reqs)*99/100]).Round(time.Microsecond), gcs, nt.span().Round(100*time.Millisecond))}
	slow := reqs[len(reqs)*95/100:]
	others := nt.ranBy(conn)
	states := map[string]int64{}
	ran := map[string]int64{}
	blocked := map[string]int64{}
	var total int64
	for _, r := range slow {
		total += r.end - r.start
		for s, d := range r.state {
			states[s] += d
		}
		for s, d := range r.blocked {
			blocked[s] += d
		}
		for _, w := range r.waits {
			for c, d := range others.sum(w[0], w[1]) {
				ran[c] += d
			}
		}
	}
	pct := func(d int64, of int64) string { return fmt.Sprintf("%.0f%%", 100*float64(d)/float64(max(of, 1))) }
	out = append(out, fmt.Sprintf("its slowest 5%% (%d): waiting for a P %s, in system calls %s, blocked %s, running %s",
		len(slow), pct(states["Runnable"], total), pct(states["Syscall"], total), pct(states["Waiting"], total), pct(states["Running"], total)))
	var on int64
	for _, d := range ran {
		on += d
	}
	var parts []string
	for _, c := range traceClasses {
		parts = append(parts, c+" "+pct(ran[c], on))
	}
	out = append(out, "while they waited for a P, the Ps ran: "+strings.Join(parts, ", "))
	if len(blocked) > 0 {
		var at []string
		for f, d := range blocked {
			at = append(at, fmt.Sprintf("%s %v", f, time.Duration(d).Round(10*time.Microsecond)))
		}
		sort.Strings(at)
		out = append(out, "they were blocked in: "+strings.Join(at, ", "))
	}
	return out, nil
}

// writerArrivals splits each write the writer timed during the traces (its start on
// the wall clock, and its latency) at four moments: the writer's write system call
// (from its own trace, ct), the node's poller handing the request to the writer's
// connection (its goroutine waking), the node's worker writing the answer (its
// system call beginning), and the writer's poller handing the answer to its connection's reader.
// So each write's time is in five parts: the writer sending, the request on its way
// into the node (the kernel, and the node not yet polling), the node serving it, the
// answer on its way into the writer (the kernel, and the writer's thread waiting for
// its CPU), and the writer taking it. For the median half and the slowest 5 % it says
// how long each part took, and for the way into the node how busy its Ps were and
// with what.
func writerArrivals(nt, ct *nodeTrace, starts []time.Time, lats []time.Duration) ([]string, error) {
	if len(nt.syncs) == 0 || len(ct.syncs) == 0 {
		return nil, fmt.Errorf("a trace has no clock snapshot")
	}
	conn, reqs, err := writerRequests(nt)
	if err != nil {
		return nil, err
	}
	served := map[int64]int64{} // a request's start (its connection's wake) -> its answer's write
	writeFor := map[int64]int64{}
	for _, r := range reqs {
		if r.wrote > r.start {
			served[r.start], writeFor[r.start] = r.wrote, r.wroteFor
		}
	}
	var wakes []*traceMove
	for _, m := range nt.gs[conn] {
		if _, ok := served[m.t]; ok && m.from == "Waiting" && m.to == "Runnable" {
			wakes = append(wakes, m)
		}
	}
	if len(wakes) == 0 {
		return nil, fmt.Errorf("the writer's connection never woke in the node's trace")
	}
	// The writer's side: its sends (system calls under the rpc sender) and its
	// connection reader's wakes. The reader is the goroutine that wakes the writer's
	// with the answer (from readLoop): the most frequent such waker.
	wakers := map[int64]int{}
	for _, ms := range ct.gs {
		for _, m := range ms {
			if m.by >= 0 && m.from == "Waiting" && m.to == "Runnable" && slices.ContainsFunc(m.frames, func(f string) bool { return strings.Contains(f, "rpc.(*clientConn).readLoop") }) {
				wakers[m.by]++
			}
		}
	}
	reader, most := int64(-1), 0
	for g, n := range wakers {
		if n > most {
			reader, most = g, n
		}
	}
	if reader < 0 {
		return nil, fmt.Errorf("the writer's connection reader is not in its trace")
	}
	var sends, answers []int64
	for _, m := range ct.gs[reader] {
		if m.from == "Waiting" && m.to == "Runnable" {
			answers = append(answers, m.t)
		}
	}
	for _, ms := range ct.gs {
		for _, m := range ms {
			if m.from == "Running" && m.to == "Syscall" && slices.ContainsFunc(m.frames, func(f string) bool { return strings.Contains(f, "rpc.(*sender)") }) {
				sends = append(sends, m.t)
			}
		}
	}
	slices.Sort(sends)
	after := func(ts []int64, t int64) (int64, bool) { // the first of ts at t or later
		i, _ := slices.BinarySearch(ts, t)
		if i == len(ts) {
			return 0, false
		}
		return ts[i], true
	}
	nodeWall := nt.wallTime
	// When the node's Ps ran, and its goroutines but the writer's connection (by
	// class), for summing over each write's way in.
	var procs, ran timeline
	since := map[int64]int64{}
	for _, pm := range nt.procs {
		switch {
		case pm.to == "Running":
			since[pm.p] = pm.t
		case pm.from == "Running":
			if t, ok := since[pm.p]; ok {
				procs.add(t, pm.t, "busy")
				delete(since, pm.p)
			}
		}
	}
	ran = nt.ranBy(conn)
	lo, hi := wakes[0].t, wakes[len(wakes)-1].t
	type arrival struct {
		lat, write                 time.Duration    // in all; the node's write system call, part of back
		send, in, node, back, take time.Duration    // the five parts
		busy                       float64          // share of the way in some P of the node was running
		ran                        map[string]int64 // what ran on the node's Ps then, ns by class
	}
	var as []arrival
	for i, s := range starts {
		ts := nt.traceTime(s)
		if ts < lo || ts > hi {
			continue
		}
		j, _ := slices.BinarySearchFunc(wakes, ts, func(m *traceMove, t int64) int { return int(m.t - t) })
		if j == len(wakes) {
			continue
		}
		w := wakes[j]
		end := s.Add(lats[i])
		sent, ok1 := after(sends, ct.traceTime(s))
		answered, ok2 := after(answers, ct.traceTime(nodeWall(served[w.t])))
		if !ok1 || !ok2 || nodeWall(served[w.t]).After(end) {
			continue // outside the writer's trace, or not this write's
		}
		sentAt, answeredAt := ct.wallTime(sent), ct.wallTime(answered)
		a := arrival{
			lat:   lats[i],
			send:  sentAt.Sub(s),
			in:    nodeWall(w.t).Sub(sentAt),
			node:  time.Duration(served[w.t] - w.t),
			write: time.Duration(writeFor[w.t]),
			back:  answeredAt.Sub(nodeWall(served[w.t])),
			take:  end.Sub(answeredAt),
			ran:   map[string]int64{},
		}
		// The node's Ps' busy time on the way in, and what ran on them.
		t0 := nt.traceTime(sentAt)
		if w.t > t0 {
			a.busy = float64(procs.sum(t0, w.t)["busy"]) / float64(w.t-t0)
		}
		a.ran = ran.sum(t0, w.t)
		as = append(as, a)
	}
	if len(as) < 20 {
		return nil, fmt.Errorf("%d of the writer's requests found in both traces", len(as))
	}
	slices.SortFunc(as, func(a, b arrival) int { return int(a.lat - b.lat) })
	describe := func(name string, part []arrival) string {
		var sum arrival
		sum.ran = map[string]int64{}
		var on int64
		for _, a := range part {
			sum.lat, sum.send, sum.in, sum.node, sum.back, sum.take = sum.lat+a.lat, sum.send+a.send, sum.in+a.in, sum.node+a.node, sum.back+a.back, sum.take+a.take
			sum.busy += a.busy
			sum.write += a.write
			for c, d := range a.ran {
				sum.ran[c] += d
				on += d
			}
		}
		n := time.Duration(len(part))
		avg := func(d time.Duration) time.Duration { return (d / n).Round(time.Microsecond) }
		var classes []string
		for _, c := range traceClasses {
			classes = append(classes, fmt.Sprintf("%s %.0f%%", c, 100*float64(sum.ran[c])/float64(max(on, 1))))
		}
		return fmt.Sprintf("%s (%d): latency %v = the writer sending %v + on the way in %v (the node's P busy %.0f%% of it: %s) + in the node %v + on the way back %v (the node's write system call %v) + the writer taking it %v",
			name, len(part), avg(sum.lat), avg(sum.send), avg(sum.in), 100*sum.busy/float64(len(part)), strings.Join(classes, ", "),
			avg(sum.node), avg(sum.back), avg(sum.write), avg(sum.take))
	}
	return []string{
		fmt.Sprintf("the writer's %d requests in both traces (the node's and the writer's, matched by their wall clocks):", len(as)),
		describe("median half", as[len(as)/4:len(as)*3/4]),
		describe("slowest 5%", as[len(as)*95/100:]),
	}, nil
}

// ranBy returns when every goroutine but except ran, by class (traceClass; an ending
// goroutine by what started it).
func (nt *nodeTrace) ranBy(except int64) timeline {
	var tl timeline
	for g, ms := range nt.gs {
		if g == except {
			continue
		}
		for k, m := range ms {
			if m.from == "Running" && k > 0 && ms[k-1].to == "Running" {
				frames := m.frames
				if m.to == "NotExist" {
					frames = ms[0].frames
				}
				tl.add(ms[k-1].t, m.t, traceClass(frames))
			}
		}
	}
	return tl
}

// timeline holds spans of time by class, cut at every millisecond so that what
// overlaps a short window is found without looking at every span.
type timeline struct {
	ms map[int64][]timeSpan // by millisecond of the trace clock
}

type timeSpan struct {
	from, to int64
	class    string
}

// add records that class held [from, to).
func (tl *timeline) add(from, to int64, class string) {
	if tl.ms == nil {
		tl.ms = map[int64][]timeSpan{}
	}
	for from < to {
		k := from / 1e6
		end := min(to, (k+1)*1e6)
		tl.ms[k] = append(tl.ms[k], timeSpan{from, end, class})
		from = end
	}
}

// sum returns how long each class held within [lo, hi).
func (tl *timeline) sum(lo, hi int64) map[string]int64 {
	out := map[string]int64{}
	for k := lo / 1e6; k <= hi/1e6; k++ {
		for _, s := range tl.ms[k] {
			if l, h := max(s.from, lo), min(s.to, hi); h > l {
				out[s.class] += h - l
			}
		}
	}
	return out
}
