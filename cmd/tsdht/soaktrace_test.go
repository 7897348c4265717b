package main

import (
	"bufio"
	"fmt"
	"os/exec"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// The writer's requests in an execution trace of the node (TSDHT_SOAK_PROFILE): where
// the time of the slowest went, read from `go tool trace -d=parsed` (the trace parser
// of the Go toolchain that wrote it).

// traceMove is one state transition of a goroutine.
type traceMove struct {
	t        int64  // ns, trace clock
	by       int64  // the goroutine that made it (a wake-up's waker), or -1
	from, to string // Running, Runnable, Waiting, Syscall, ...
	frames   []string
}

var traceMoveRE = regexp.MustCompile(`^M=-?\d+ P=-?\d+ G=(-?\d+) StateTransition Time=(\d+) GoID=(\d+) (\w+)->(\w+)`)

// readTrace parses the state transitions of every goroutine, and counts GC cycles.
func readTrace(file string) (map[int64][]*traceMove, int, error) {
	cmd := exec.Command("go", "tool", "trace", "-d=parsed", file)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, 0, err
	}
	if err := cmd.Start(); err != nil {
		return nil, 0, err
	}
	gs := map[int64][]*traceMove{}
	gcs := 0
	var cur *traceMove
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "M="):
			cur = nil
			if m := traceMoveRE.FindStringSubmatch(line); m != nil {
				by, _ := strconv.ParseInt(m[1], 10, 64)
				t, _ := strconv.ParseInt(m[2], 10, 64)
				g, _ := strconv.ParseInt(m[3], 10, 64)
				cur = &traceMove{t: t, by: by, from: m[4], to: m[5]}
				gs[g] = append(gs[g], cur)
			} else if strings.Contains(line, `RangeBegin`) && strings.Contains(line, `"GC concurrent mark phase"`) {
				gcs++
			}
		case cur != nil && strings.HasPrefix(line, "\t") && !strings.HasPrefix(line, "\t\t"):
			f, _, _ := strings.Cut(strings.TrimSpace(line), " @")
			cur.frames = append(cur.frames, f)
		}
	}
	if err := cmd.Wait(); err != nil {
		return nil, 0, fmt.Errorf("go tool trace -d=parsed %s: %w", file, err)
	}
	return gs, gcs, sc.Err()
}

// busiest returns the goroutine with the most transitions whose stacks mention fn: the
// writer's connection waits for its next frame (serverConn.awaitFrame) 60 times a
// second through the whole trace, the hostile ones briefly.
func busiest(gs map[int64][]*traceMove, fn string) int64 {
	best, n := int64(-1), 0
	for g, ms := range gs {
		if len(ms) > n && slices.ContainsFunc(ms, func(m *traceMove) bool {
			return slices.ContainsFunc(m.frames, func(f string) bool { return strings.Contains(f, fn) })
		}) {
			best, n = g, len(ms)
		}
	}
	return best
}

// traceClass names what a goroutine was doing from the stack where it stopped running
// (for one that ended, the stack that started it).
func traceClass(frames []string) string {
	s := strings.Join(frames, " ")
	switch {
	case strings.Contains(s, "gcBgMarkWorker"), strings.Contains(s, "gcMarkDone"), strings.Contains(s, "gcAssist"), strings.Contains(s, "bgsweep"), strings.Contains(s, "gcParkAssist"):
		return "the collector"
	case strings.Contains(s, "planRead"), strings.Contains(s, "aggShards"), strings.Contains(s, "tsdb.fanOut"), strings.Contains(s, "aggRound"), strings.Contains(s, "runFetches"),
		strings.Contains(s, "localReplica"), strings.Contains(s, "pebble"), strings.Contains(s, "quanta."):
		return "long reads"
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

// writerTrace summarises the writer's requests in the node's trace: each runs from
// its connection's goroutine waking with the request to its worker's return to the
// idle wait. For the slowest 5 % (a 2 s trace holds about 120) it splits the time into waiting for a P (runnable),
// in system calls, blocked, and running, and names what ran on the Ps while the
// writer's goroutines waited for one.
func writerTrace(file string) ([]string, error) {
	gs, gcs, err := readTrace(file)
	if err != nil {
		return nil, err
	}
	conn := busiest(gs, "rpc.(*serverConn).awaitFrame")
	if conn < 0 {
		return nil, fmt.Errorf("the writer's connection is not in the trace")
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
	type req struct {
		start, end int64
		state      map[string]int64 // ns per state of the goroutine that had the request
		waits      [][2]int64       // runnable spans
		blocked    map[string]int64 // ns blocked, by where (blockedAt)
	}
	var reqs []*req
	var cur *req
	holder := int64(-1) // the goroutine that has the request: conn, then its worker
	state := map[int64]string{}
	where := map[int64]string{} // where each goroutine last blocked
	var last int64
	for _, e := range evs {
		if e.g == conn && e.m.from == "Waiting" && e.m.to == "Runnable" && (cur == nil || holder == conn) {
			cur, holder, last = &req{start: e.m.t, state: map[string]int64{}, blocked: map[string]int64{}}, conn, e.m.t
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
		if e.g == holder && holder != conn && e.m.from == "Running" && (e.m.to == "NotExist" ||
			e.m.to == "Waiting" && slices.ContainsFunc(e.m.frames[:min(2, len(e.m.frames))], func(f string) bool { return strings.Contains(f, "worker") })) {
			cur.end = e.m.t
			reqs = append(reqs, cur)
			cur, holder = nil, -1
		}
	}
	if len(reqs) < 10 {
		return nil, fmt.Errorf("%d of the writer's requests found in the trace", len(reqs))
	}
	sort.Slice(reqs, func(i, j int) bool { return reqs[i].end-reqs[i].start < reqs[j].end-reqs[j].start })
	took := func(r *req) time.Duration { return time.Duration(r.end - r.start) }
	out := []string{fmt.Sprintf("the node's trace: %d of the writer's requests, p50 %v, p90 %v, p99 %v (time in the node); %d GC cycles in %v",
		len(reqs), took(reqs[len(reqs)/2]).Round(time.Microsecond), took(reqs[len(reqs)*9/10]).Round(time.Microsecond),
		took(reqs[len(reqs)*99/100]).Round(time.Microsecond), gcs, time.Duration(evs[len(evs)-1].m.t-evs[0].m.t).Round(100*time.Millisecond))}
	slow := reqs[len(reqs)*95/100:]
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
			for g, ms := range gs {
				if g == conn {
					continue
				}
				for i, m := range ms {
					if m.from != "Running" || i == 0 || ms[i-1].to != "Running" {
						continue
					}
					if lo, hi := max(ms[i-1].t, w[0]), min(m.t, w[1]); hi > lo {
						frames := m.frames
						if m.to == "NotExist" {
							frames = ms[0].frames // an ending goroutine: what started it
						}
						ran[traceClass(frames)] += hi - lo
					}
				}
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
	for _, c := range []string{"the collector", "long reads", "connections", "other"} {
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
