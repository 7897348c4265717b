package ingest

import (
	"encoding/hex"
	"fmt"
	"math"
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
	// PMU is the station's index in the configuration; Index the channel's among its
	// kind (phasor, analog, digital word), -1 for freq, dfreq, stat and timequality.
	PMU, Index int
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

// TagsOf returns m's catalog tags (SeriesMeta.Tags) and, when the PMU sent a CFG-3
// describing m's station (matched by IDCODE), its extras: the global PMU ID (g_pmu_id,
// hex), position (lat, lon, elev in degrees and metres; only when given: CFG-3 sends
// NaN… or 0 for none), service class, and the channel's CFG-3 name (cfg3_name) when it
// differs from the CFG-2 one (CFG-3 names may be 255 bytes long; a tag value keeps
// the first 256).
func (s Stream) TagsOf(m SeriesMeta) map[string]string {
	t := m.Tags()
	if s.Config3 == nil {
		return t
	}
	var p *c37118.PMU
	for i := range s.Config3.PMUs {
		if s.Config3.PMUs[i].IDCode == m.IDCode {
			p = &s.Config3.PMUs[i]
			break
		}
	}
	if p == nil {
		return t
	}
	if p.GlobalID != ([16]byte{}) {
		t["g_pmu_id"] = hex.EncodeToString(p.GlobalID[:])
	}
	for k, v := range map[string]float32{"lat": p.Lat, "lon": p.Lon, "elev": p.Elev} {
		if f := float64(v); !math.IsNaN(f) && !math.IsInf(f, 0) && v != 0 {
			t[k] = strconv.FormatFloat(f, 'g', -1, 32)
		}
	}
	if c := p.SvcClass; c > ' ' && c < 0x7F {
		t["svc_class"] = string(rune(c))
	} else if c != 0 {
		t["svc_class"] = strconv.Itoa(int(c))
	}
	name := ""
	switch m.Quantity {
	case "mag", "ang", "re", "im":
		if m.Index >= 0 && m.Index < len(p.Phasors) {
			name = p.Phasors[m.Index].Name
		}
	case "analog":
		if m.Index >= 0 && m.Index < len(p.Analogs) {
			name = p.Analogs[m.Index].Name
		}
	}
	if name = strings.TrimSpace(name); name != "" && name != m.Channel {
		if len(name) > 256 {
			name = strings.ToValidUTF8(name[:256], "")
		}
		t["cfg3_name"] = name
	}
	return t
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
		idx := -1
		add := func(key string, typ series.Type, channel, qty, unit string) (string, error) {
			if err := series.ValidateKey(key); err != nil {
				return "", fmt.Errorf("station %q channel %q: series key %q: %w (shorten --prefix)", p.Station, channel, key, err)
			}
			m.meta = append(m.meta, SeriesMeta{Key: key, Type: typ, Station: st, IDCode: p.IDCode, StreamIDCode: cfg.IDCode,
				Channel: channel, Quantity: qty, Unit: unit, NominalHz: p.NominalHz, PMU: i, Index: idx})
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
			idx = j
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
		idx = -1
		k.freq = must(add(base+"freq", series.Float, "freq", "freq", "Hz"))
		k.dfreq = must(add(base+"dfreq", series.Float, "dfreq", "dfreq", "Hz/s"))
		for j := range p.Analogs {
			idx = j
			raw := strings.TrimSpace(p.Analogs[j].Name)
			if raw == "" {
				raw = "analog" + strconv.Itoa(j)
			}
			k.an = append(k.an, must(add(base+uniq(names, CleanName(raw)), series.Float, raw, "analog", "")))
		}
		for j := range p.Digital {
			idx = j
			n := "digital" + strconv.Itoa(j)
			k.dg = append(k.dg, must(add(base+n, series.Int, n, "digital", "")))
		}
		idx = -1
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
