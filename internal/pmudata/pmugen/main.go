// Command pmugen writes the reference PMU data set (package pmudata) as files other
// stores can load, for scripts/bench-density:
//
//	OUT/csv/<station>_<channel>.csv   "timestamp,value" lines (ns), one file a series,
//	                                  for tsdht put --series <station>/<channel>
//	OUT/lp/part-NNN.lp                InfluxDB line protocol, ns precision: one line a
//	                                  frame, "pmu,station=<s> freq=…,va_ang=…,va_mag=…,ia_ang=…"
//
// Values are printed in the shortest form that parses back to the same float64, so
// every store receives the float32-widened values bit for bit.
//
// Usage: go run ./internal/pmudata/pmugen -out DIR [-end UNIX_SECONDS] [-duration 1h] [-noise 1]
package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/tsdht/tsdht/internal/pmudata"
)

func main() {
	out := flag.String("out", "", "output directory (created)")
	end := flag.Int64("end", 0, "UNIX second the data ends at (default: now)")
	dur := flag.Duration("duration", time.Hour, "time the data covers")
	noise := flag.Float64("noise", 1, "measurement noise scale")
	linesPerFile := flag.Int("lines", 100_000, "line protocol lines per file")
	flag.Parse()
	if *out == "" {
		fmt.Fprintln(os.Stderr, "pmugen: -out DIR is required")
		os.Exit(2)
	}
	if err := run(*out, *end, *dur, *noise, *linesPerFile); err != nil {
		fmt.Fprintln(os.Stderr, "pmugen:", err)
		os.Exit(1)
	}
}

func run(out string, end int64, dur time.Duration, noise float64, linesPerFile int) error {
	if end == 0 {
		end = time.Now().Unix()
	}
	c := pmudata.Default()
	c.Duration = dur
	c.Start = time.Unix(end-int64(dur/time.Second), 0)
	c.NoiseScale = noise
	chans := pmudata.Generate(c)
	for _, d := range []string{"csv", "lp"} {
		if err := os.MkdirAll(filepath.Join(out, d), 0o755); err != nil {
			return err
		}
	}
	f64 := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	points := 0
	for _, ch := range chans {
		name := strings.ReplaceAll(ch.Key(), "/", "_") + ".csv"
		if err := writeFile(filepath.Join(out, "csv", name), func(w *bufio.Writer) {
			for i, t := range ch.Points.T {
				w.WriteString(strconv.FormatInt(t, 10))
				w.WriteByte(',')
				w.WriteString(f64(ch.Points.F[i]))
				w.WriteByte('\n')
			}
		}); err != nil {
			return err
		}
		points += ch.Points.Len()
	}
	// Line protocol: the four channels of a PMU share their timestamps (a lost frame
	// loses all four).
	var lines []string
	for p := 0; p < len(chans); p += pmudata.ChannelsPerPMU {
		f, va, vm, ia := chans[p].Points, chans[p+1].Points, chans[p+2].Points, chans[p+3].Points
		for i, t := range f.T {
			lines = append(lines, fmt.Sprintf("pmu,station=%s freq=%s,va_ang=%s,va_mag=%s,ia_ang=%s %d",
				chans[p].Station, f64(f.F[i]), f64(va.F[i]), f64(vm.F[i]), f64(ia.F[i]), t))
		}
	}
	for part := 0; part*linesPerFile < len(lines); part++ {
		chunk := lines[part*linesPerFile : min((part+1)*linesPerFile, len(lines))]
		if err := writeFile(filepath.Join(out, "lp", fmt.Sprintf("part-%03d.lp", part)), func(w *bufio.Writer) {
			for _, l := range chunk {
				w.WriteString(l)
				w.WriteByte('\n')
			}
		}); err != nil {
			return err
		}
	}
	fmt.Printf("%d points, %d series, %d line-protocol lines, %s to %s\n", points, len(chans), len(lines),
		c.Start.UTC().Format(time.RFC3339), time.Unix(end, 0).UTC().Format(time.RFC3339))
	return nil
}

func writeFile(path string, fill func(*bufio.Writer)) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	fill(w)
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
