// Command lpsend loads an InfluxDB 1.x /write endpoint with line protocol and prints
// one JSON object: points stored per second. scripts/bench-http runs it, the same
// sender against tsdht and InfluxDB. It reports the CPU it used itself
// (sender_cores_busy), to show whether the sender was the bottleneck.
//
//	lpsend -url http://127.0.0.1:8086 -db bench -series 100 -points 200000 -batch 5000 -senders 4 -label tsdht
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
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

func main() {
	url := flag.String("url", "http://127.0.0.1:8086", "base URL of the /write endpoint")
	db := flag.String("db", "bench", "database")
	nseries := flag.Int("series", 100, "series (one tag value each, one float field)")
	points := flag.Int("points", 200000, "points in all")
	batch := flag.Int("batch", 5000, "lines per request")
	senders := flag.Int("senders", 4, "concurrent requests")
	label := flag.String("label", "", "target name printed in the result")
	flag.Parse()

	// Build every request body first, so that the sender's own work is not timed.
	start := time.Now().Add(-24 * time.Hour).Truncate(time.Hour).UnixNano()
	var bodies [][]byte
	var b bytes.Buffer
	n := 0
	for i := 0; i < *points; i++ {
		s, k := i%*nseries, i / *nseries
		b.WriteString("bench,host=h")
		b.WriteString(strconv.Itoa(s))
		b.WriteString(" v=")
		b.WriteString(strconv.FormatFloat(float64(k%1000)*0.37+float64(s), 'g', -1, 64))
		b.WriteByte(' ')
		b.WriteString(strconv.FormatInt(start+int64(k)*1e9/60, 10))
		b.WriteByte('\n')
		if n++; n == *batch {
			bodies = append(bodies, append([]byte(nil), b.Bytes()...))
			b.Reset()
			n = 0
		}
	}
	if n > 0 {
		bodies = append(bodies, append([]byte(nil), b.Bytes()...))
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
			for {
				i := int(next.Add(1)) - 1
				if i >= len(bodies) {
					return
				}
				for {
					resp, err := http.Post(*url+"/write?db="+*db, "text/plain", bytes.NewReader(bodies[i]))
					if err != nil {
						log.Fatal(err)
					}
					msg, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					if resp.StatusCode == http.StatusNoContent {
						break
					}
					if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable {
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
	_ = json.NewEncoder(os.Stdout).Encode(map[string]any{
		"bench": "http-write", "target": *label, "points": *points, "series": *nseries, "batch": *batch,
		"senders": *senders, "seconds": secs, "points_per_s": float64(*points) / secs, "retries": retries.Load(),
		"sender_cpu_s": senderCPU, "sender_cores_busy": senderCPU / secs,
	})
	fmt.Fprintf(os.Stderr, "%s: %d points in %.2f s = %.0f points/s (sender: %.2f cores busy)\n", *label, *points, secs, float64(*points)/secs, senderCPU/secs)
}

// cpuSeconds returns the CPU time (user and system) this process has used.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}
