package main

import (
	"bytes"
	"math"
	"strconv"
	"time"
)

// A workload is the line protocol lpsend sends: lines numbered 0..lines()-1, each a
// function of its number alone, so that any sender can build any batch and two runs
// with the same flags (and -end) send the same bytes to every target.
type workload interface {
	lines() int
	// fields is the values each line carries (points = lines × fields).
	fields() int
	appendLine(b *bytes.Buffer, i int)
}

// synthetic is the default workload: S series (bench,host=hS v=…) at 60 Hz from 24 h
// before the start of the hour, interleaved.
type synthetic struct {
	n, series int
	start     int64
}

func (w synthetic) lines() int  { return w.n }
func (w synthetic) fields() int { return 1 }
func (w synthetic) appendLine(b *bytes.Buffer, i int) {
	s, k := i%w.series, i/w.series
	b.WriteString("bench,host=h")
	b.WriteString(strconv.Itoa(s))
	b.WriteString(" v=")
	b.WriteString(strconv.FormatFloat(float64(k%1000)*0.37+float64(s), 'g', -1, 64))
	writeTime(b, w.start+int64(k)*1e9/60)
}

// everyMinute is the clock of a series that reports once a minute: minutes lines, the
// last stamped end.
type everyMinute struct {
	minutes int
	end     int64
}

// at returns the time of the k-th minute.
func (m everyMinute) at(k int) int64 { return m.end - int64(m.minutes-1-k)*int64(time.Minute) }

// dashboard is what Grafana's example dashboards show: hosts × two fields, a line a
// minute each.
type dashboard struct {
	hosts int
	everyMinute
}

func (w dashboard) lines() int  { return w.hosts * w.minutes }
func (w dashboard) fields() int { return 2 }
func (w dashboard) appendLine(b *bytes.Buffer, i int) {
	h, k := i%w.hosts, i/w.hosts
	// Two decimals, as a collector reports a percentage; every host its own curve.
	usage := math.Round((50+40*math.Sin(float64(k)/97+float64(h)))*100) / 100
	b.WriteString("cpu,dc=dc1,host=h")
	b.WriteString(strconv.Itoa(h))
	b.WriteString(" usage=")
	b.WriteString(strconv.FormatFloat(usage, 'f', 2, 64))
	b.WriteString(",idle=")
	b.WriteString(strconv.FormatFloat(100-usage, 'f', 2, 64))
	writeTime(b, w.at(k))
}

// meter is one series with a line a minute: the year of a meter read by a dashboard.
type meter struct{ everyMinute }

func (w meter) lines() int  { return w.minutes }
func (w meter) fields() int { return 1 }
func (w meter) appendLine(b *bytes.Buffer, k int) {
	b.WriteString("power,meter=m0 v=")
	b.WriteString(strconv.FormatFloat(math.Round((1000+300*math.Sin(float64(k)/1440*2*math.Pi))*1000)/1000, 'f', 3, 64))
	writeTime(b, w.at(k))
}

// dense is a PMU's channels at 60 Hz, float32 readings as C37.118 sends them, frame by
// frame (every channel of a frame, then the next frame), for the hours ending at end.
type dense struct {
	channels, frames int
	end              int64
}

func (w dense) lines() int  { return w.channels * w.frames }
func (w dense) fields() int { return 1 }
func (w dense) appendLine(b *bytes.Buffer, i int) {
	c, k := i%w.channels, i/w.channels
	v := float32(230 + 5*math.Sin(float64(k)/600+float64(c)) + float64(k%7)*0.01)
	b.WriteString("pmu,ch=c")
	if c < 10 {
		b.WriteByte('0')
	}
	b.WriteString(strconv.Itoa(c))
	b.WriteString(" v=")
	b.WriteString(strconv.FormatFloat(float64(v), 'g', -1, 32))
	writeTime(b, w.end-int64(w.frames-1-k)*int64(time.Second)/60)
}

func writeTime(b *bytes.Buffer, ns int64) {
	b.WriteByte(' ')
	b.WriteString(strconv.FormatInt(ns, 10))
	b.WriteByte('\n')
}
