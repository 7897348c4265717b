package ingest

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/tsdht/tsdht/pmu/c37118"
	"github.com/tsdht/tsdht/tsdb/series"
)

// CleanName trims a station or channel name and replaces every character outside
// A-Za-z0-9._- with '_' (DESIGN.md's PMU series naming). An empty result is "_".
func CleanName(s string) string {
	s = strings.TrimSpace(s)
	var b strings.Builder
	for _, r := range s {
		switch {
		case r >= 'A' && r <= 'Z', r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '.', r == '_', r == '-':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	if b.Len() == 0 {
		return "_"
	}
	return b.String()
}

// SeriesMeta is what the ingester knows about one series it writes: the tags a catalog
// should attach to it.
type SeriesMeta struct {
	Key  string
	Type series.Type
	// Station is the cleaned station name; IDCode the PMU's ID; StreamIDCode the data
	// stream's (the PDC's, equal to IDCode for a single PMU).
	Station      string
	IDCode       uint16
	StreamIDCode uint16
	// Channel is the channel's name as the PMU sent it (trimmed), or the quantity
	// ("freq", "dfreq", "stat", "timequality", "digital0").
	Channel string
	// Quantity says what the series holds: "mag", "ang", "re", "im", "freq", "dfreq",
	// "analog", "digital", "stat" or "timequality".
	Quantity string
	// Unit is "V", "A", "rad", "Hz", "Hz/s" or "" (analog, digital and status words).
	Unit string
	// NominalHz is the PMU's nominal frequency, 50 or 60.
	NominalHz int
}

// Tags returns the metadata as catalog tags.
func (m SeriesMeta) Tags() map[string]string {
	t := map[string]string{
		"station":    m.Station,
		"idcode":     strconv.Itoa(int(m.IDCode)),
		"stream":     strconv.Itoa(int(m.StreamIDCode)),
		"channel":    m.Channel,
		"quantity":   m.Quantity,
		"nominal_hz": strconv.Itoa(m.NominalHz),
	}
	if m.Unit != "" {
		t["unit"] = m.Unit
	}
	return t
}

// Stream is the metadata of one PMU/PDC data stream: every series it maps to, the
// header frame's text and the CFG-3 extras when the device sent them.
type Stream struct {
	Addr   string
	IDCode uint16
	// Header is the text of the last header frame ("" until one arrives).
	Header string
	// Config is the CFG-2 in force; Config3 the last CFG-3 (nil if none came).
	Config, Config3 *c37118.Config
	Series          []SeriesMeta
}

// channelMap maps every value of a data frame under one configuration to a series.
type channelMap struct {
	cfg  *c37118.Config
	pmus []pmuKeys
	meta []SeriesMeta
}

type pmuKeys struct {
	ph          [][2]string // mag/ang or re/im keys per phasor
	freq, dfreq string
	an          []string
	dg          []string
	stat, tq    string
}

// mapChannels names the series of every channel of cfg under prefix. Stations (or
// channels of a station) with the same cleaned name get "_2", "_3"… suffixes, in order,
// so that no two channels share a series.
func mapChannels(cfg *c37118.Config, prefix string) (*channelMap, error) {
	m := &channelMap{cfg: cfg}
	stations := map[string]int{}
	for i := range cfg.PMUs {
		p := &cfg.PMUs[i]
		st := uniq(stations, CleanName(p.Station))
		base := prefix + st + "/"
		var k pmuKeys
		add := func(key string, typ series.Type, channel, qty, unit string) (string, error) {
			if err := series.ValidateKey(key); err != nil {
				return "", fmt.Errorf("station %q channel %q: series key %q: %w (shorten --prefix)", p.Station, channel, key, err)
			}
			m.meta = append(m.meta, SeriesMeta{Key: key, Type: typ, Station: st, IDCode: p.IDCode, StreamIDCode: cfg.IDCode,
				Channel: channel, Quantity: qty, Unit: unit, NominalHz: p.NominalHz})
			return key, nil
		}
		var err error
		must := func(key string, e error) string {
			if err == nil {
				err = e
			}
			return key
		}
		names := map[string]int{"freq": 1, "dfreq": 1, "stat": 1, "timequality": 1}
		for j := range p.Phasors {
			ph := &p.Phasors[j]
			raw := strings.TrimSpace(ph.Name)
			if raw == "" {
				raw = "phasor" + strconv.Itoa(j)
			}
			n := uniq(names, CleanName(raw))
			a, b, ua, ub := "re", "im", ph.Unit(), ph.Unit()
			if p.Format&c37118.FormatPolar != 0 {
				a, b, ub = "mag", "ang", "rad"
			}
			k.ph = append(k.ph, [2]string{
				must(add(base+n+"/"+a, series.Float, raw, a, ua)),
				must(add(base+n+"/"+b, series.Float, raw, b, ub)),
			})
		}
		k.freq = must(add(base+"freq", series.Float, "freq", "freq", "Hz"))
		k.dfreq = must(add(base+"dfreq", series.Float, "dfreq", "dfreq", "Hz/s"))
		for j := range p.Analogs {
			raw := strings.TrimSpace(p.Analogs[j].Name)
			if raw == "" {
				raw = "analog" + strconv.Itoa(j)
			}
			k.an = append(k.an, must(add(base+uniq(names, CleanName(raw)), series.Float, raw, "analog", "")))
		}
		for j := range p.Digital {
			n := "digital" + strconv.Itoa(j)
			k.dg = append(k.dg, must(add(base+n, series.Int, n, "digital", "")))
		}
		k.stat = must(add(base+"stat", series.Int, "stat", "stat", ""))
		k.tq = must(add(base+"timequality", series.Int, "timequality", "timequality", ""))
		if err != nil {
			return nil, err
		}
		m.pmus = append(m.pmus, k)
	}
	return m, nil
}

// uniq returns name, or name_N for its N-th use (N ≥ 2).
func uniq(seen map[string]int, name string) string {
	seen[name]++
	if n := seen[name]; n > 1 {
		return name + "_" + strconv.Itoa(n)
	}
	return name
}
