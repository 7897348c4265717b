// Command lpsend loads an InfluxDB 1.x /write endpoint with line protocol and prints
// one JSON object: points stored per second. scripts/bench-http and
// scripts/bench-dashboard run it, the same sender against tsdht, InfluxDB and
// VictoriaMetrics. It reports the CPU it used itself (sender_cores_busy), to show
// whether the sender was the bottleneck.
//
//	lpsend -url http://127.0.0.1:8086 -db bench -series 100 -points 200000 -batch 5000 -senders 4 -label tsdht
//	lpsend -url http://127.0.0.1:8086 -db dash -workload dashboard -days 7 -end 1700000000000000000
//
// -workload picks the lines (workload.go): synthetic (the default: -series at 60 Hz,
// -points in all), dashboard (8 hosts × usage, idle, one line a minute for -days),
// meter (one series, a line a minute for -days) or dense (-channels float32 channels at
// 60 Hz for -hours). The timed workloads end at -end (ns; default now), truncated to
// the minute, so that runs given the same -end send every target the same lines.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// prebuildLines is the most lines whose bodies are built before the clock starts; a
// larger workload (hours of dense channels) would not fit in memory, so each sender
// builds its batch when it takes it, and the result says so (prebuilt: false).
const prebuildLines = 4_000_000

func main() {
	url := flag.String("url", "http://127.0.0.1:8086", "base URL of the /write endpoint")
	db := flag.String("db", "bench", "database")
	nseries := flag.Int("series", 100, "series (one tag value each, one float field)")
	points := flag.Int("points", 200000, "points in all")
	batch := flag.Int("batch", 5000, "lines per request")
	senders := flag.Int("senders", 4, "concurrent requests")
	label := flag.String("label", "", "target name printed in the result")
	kind := flag.String("workload", "synthetic", "lines to send: synthetic, dashboard, meter or dense")
	days := flag.Int("days", 7, "dashboard, meter: days of lines ending at -end")
	hours := flag.Float64("hours", 24, "dense: hours of 60 Hz frames ending at -end")
	channels := flag.Int("channels", 24, "dense: channels")
	endNs := flag.Int64("end", 0, "dashboard, meter, dense: the last line's time in ns since the epoch, truncated to the minute (default now)")
	flag.Parse()

	end := time.Now().UnixNano()
	if *endNs != 0 {
		end = *endNs
	}
	end -= end % int64(time.Minute)
	var load workload
	switch *kind {
	case "synthetic":
		load = synthetic{n: *points, series: *nseries, start: time.Now().Add(-24 * time.Hour).Truncate(time.Hour).UnixNano()}
	case "dashboard":
		load = dashboard{hosts: 8, everyMinute: everyMinute{minutes: *days * 1440, end: end}}
	case "meter":
		load = meter{everyMinute{minutes: *days * 1440, end: end}}
	case "dense":
		load = dense{channels: *channels, frames: int(*hours * 3600 * 60), end: end}
	default:
		log.Fatalf("-workload %q: want synthetic, dashboard, meter or dense", *kind)
	}
	nlines := load.lines()
	if nlines <= 0 || *batch <= 0 {
		log.Fatalf("nothing to send: %d lines in batches of %d (check -points, -days, -hours, -batch)", nlines, *batch)
	}
	nbatches := (nlines + *batch - 1) / *batch
	build := func(i int, b *bytes.Buffer) {
		b.Reset()
		for k := i * *batch; k < min((i+1)**batch, nlines); k++ {
			load.appendLine(b, k)
		}
	}
	// Build every request body first when they fit, so that the sender's own work is
	// not timed.
	var bodies [][]byte
	if nlines <= prebuildLines {
		var b bytes.Buffer
		for i := 0; i < nbatches; i++ {
			build(i, &b)
			bodies = append(bodies, append([]byte(nil), b.Bytes()...))
		}
	}
	// InfluxDB answers /ping before its meta store takes CREATE DATABASE: ask until the
	// database is known, before the clock starts.
	for deadline := time.Now().Add(30 * time.Second); ; {
		if resp, err := http.Post(*url+"/query?q=CREATE+DATABASE+"+*db, "", nil); err == nil {
			resp.Body.Close()
		}
		resp, err := http.Get(*url + "/query?db=" + *db + "&q=SHOW+MEASUREMENTS")
		if err != nil {
			log.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !bytes.Contains(b, []byte("database not found")) {
			break
		}
		if time.Now().After(deadline) {
			log.Fatalf("database %s still not found after 30 s: %s", *db, b)
		}
		time.Sleep(100 * time.Millisecond)
	}
	cpu0 := cpuSeconds()
	var next atomic.Int64
	var retries atomic.Int64
	var wg sync.WaitGroup
	t0 := time.Now()
	for w := 0; w < *senders; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var own bytes.Buffer
			for {
				i := int(next.Add(1)) - 1
				if i >= nbatches {
					return
				}
				var body []byte
				if bodies != nil {
					body = bodies[i]
				} else {
					build(i, &own)
					body = own.Bytes()
				}
				for {
					resp, err := http.Post(*url+"/write?db="+*db, "text/plain", bytes.NewReader(body))
					if err != nil {
						log.Fatal(err)
					}
					msg, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					if resp.StatusCode == http.StatusNoContent {
						break
					}
					// Busy, as each system says it: InfluxDB 1.x answers 500 "cache-max-memory-size
					// exceeded" while its cache is snapshotted, and takes the lines again later.
					if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable ||
						bytes.Contains(msg, []byte("cache-max-memory-size exceeded")) {
						retries.Add(1)
						time.Sleep(100 * time.Millisecond)
						continue
					}
					log.Fatalf("write: %d %s", resp.StatusCode, msg)
				}
			}
		}()
	}
	wg.Wait()
	secs := time.Since(t0).Seconds()
	senderCPU := cpuSeconds() - cpu0
	npoints := nlines * load.fields()
	out := map[string]any{
		"bench": "http-write", "workload": *kind, "target": *label, "lines": nlines, "points": npoints, "batch": *batch,
		"senders": *senders, "seconds": secs, "points_per_s": float64(npoints) / secs, "retries": retries.Load(),
		"sender_cpu_s": senderCPU, "sender_cores_busy": senderCPU / secs, "prebuilt": bodies != nil,
	}
	if *kind == "synthetic" {
		out["series"] = *nseries
	}
	_ = json.NewEncoder(os.Stdout).Encode(out)
	fmt.Fprintf(os.Stderr, "%s: %d points in %.2f s = %.0f points/s (sender: %.2f cores busy)\n", *label, npoints, secs, float64(npoints)/secs, senderCPU/secs)
}

// cpuSeconds returns the CPU time (user and system) this process has used.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}
