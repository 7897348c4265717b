package sim

import (
	"bytes"
	"encoding/hex"
	"encoding/xml"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tsdht/tsdht/pmu/c37118"
)

// The simulator's frames are checked by an independent implementation: Wireshark's
// C37.118 dissector (Debian's tshark). Each case writes one TCP conversation on port
// 4712 to a pcap file — commands from the client, configuration, header and data frames
// from the PMU, and one data frame with a broken CRC — has tshark dissect it to PDML and
// compares every decoded field with what the simulator meant to send.

var tsharkOnce sync.Once
var tsharkPath string
var tsharkErr error

// ensureTshark returns tshark's path, installing Debian's package when it is missing.
func ensureTshark(t *testing.T) string {
	t.Helper()
	tsharkOnce.Do(func() {
		if p, err := exec.LookPath("tshark"); err == nil {
			tsharkPath = p
			return
		}
		if testing.Short() {
			return
		}
		if os.Geteuid() != 0 {
			tsharkErr = fmt.Errorf("tshark is not installed and the test is not root: run apt-get install -y tshark")
			return
		}
		install := func(args ...string) ([]byte, error) {
			cmd := exec.Command("apt-get", args...)
			cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
			return cmd.CombinedOutput()
		}
		out, err := install("install", "-y", "--no-install-recommends", "tshark")
		if err != nil {
			if o, err2 := install("update"); err2 != nil {
				tsharkErr = fmt.Errorf("apt-get update: %v\n%s", err2, o)
				return
			}
			out, err = install("install", "-y", "--no-install-recommends", "tshark")
		}
		if err != nil {
			tsharkErr = fmt.Errorf("apt-get install tshark: %v\n%s", err, out)
			return
		}
		tsharkPath, tsharkErr = exec.LookPath("tshark")
	})
	if tsharkPath == "" && tsharkErr == nil {
		t.Skip("tshark is not installed; -short does not install it (run without -short, as root, to validate frames with Wireshark's dissector)")
	}
	if tsharkErr != nil {
		t.Fatal(tsharkErr)
	}
	return tsharkPath
}

type pdmlField struct {
	Name      string      `xml:"name,attr"`
	Show      string      `xml:"show,attr"`
	Showname  string      `xml:"showname,attr"`
	Value     string      `xml:"value,attr"`
	Unmasked  string      `xml:"unmaskedvalue,attr"`
	Fields    []pdmlField `xml:"field"`
	flattened bool
}

type pdmlDoc struct {
	Packets []struct {
		Protos []struct {
			Name     string      `xml:"name,attr"`
			Showname string      `xml:"showname,attr"`
			Fields   []pdmlField `xml:"field"`
		} `xml:"proto"`
	} `xml:"packet"`
}

// synPacket is one dissected C37.118 frame: its fields in document order.
type synPacket struct {
	summary string
	fields  []pdmlField
}

func (p *synPacket) get(name string) []pdmlField {
	var out []pdmlField
	for _, f := range p.fields {
		if f.Name == name {
			out = append(out, f)
		}
	}
	return out
}

func (p *synPacket) one(t *testing.T, name string) pdmlField {
	t.Helper()
	fs := p.get(name)
	if len(fs) != 1 {
		t.Fatalf("%s: %d %s fields, want 1", p.summary, len(fs), name)
	}
	return fs[0]
}

func flatten(fs []pdmlField, out []pdmlField) []pdmlField {
	for _, f := range fs {
		out = append(out, f)
		out = flatten(f.Fields, out)
	}
	return out
}

func dissect(t *testing.T, tshark, pcap string, decodeAs ...string) []synPacket {
	t.Helper()
	if len(decodeAs) == 0 {
		decodeAs = []string{"tcp.port==4712,synphasor"}
	}
	args := []string{"-r", pcap}
	for _, d := range decodeAs {
		args = append(args, "-d", d)
	}
	cmd := exec.Command(tshark, append(args, "-T", "pdml")...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("tshark: %v\n%s", err, stderr.String())
	}
	var doc pdmlDoc
	if err := xml.Unmarshal(out, &doc); err != nil {
		t.Fatalf("tshark PDML: %v", err)
	}
	var pkts []synPacket
	for _, p := range doc.Packets {
		for _, pr := range p.Protos {
			if pr.Name == "synphasor" {
				pkts = append(pkts, synPacket{summary: pr.Showname, fields: flatten(pr.Fields, nil)})
			}
		}
	}
	return pkts
}

var (
	rePhasor  = regexp.MustCompile(`^Phasor #(\d+): "(.*)",\s*(-?[\d.]+)([VA]) ∠\s*(-?[\d.]+)° alt\s*(-?[\d.]+)\+j\s*(-?[\d.]+)[VA](?:; unscaled:\s*(-?\d+),\s*(-?\d+))?$`)
	reAnalog  = regexp.MustCompile(`^Analog value #(\d+): "(.*)", (-?[\d.]+)`)
	reStation = regexp.MustCompile(`^Station(?: #\d+)?: "(.*)"$`)
	reFactor  = regexp.MustCompile(`^#(\d+) factor: (\d+) \* 10\^-5, unit: (Volt|Ampere)$`)
	reChName  = regexp.MustCompile(`^(?:Phasor name|Analog value|Digital status label) #\d+: "(.*)"$`)
)

func near(got, want, tol float64) bool { return math.Abs(got-want) <= tol }

func atof(t *testing.T, s string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil {
		t.Fatalf("number %q: %v", s, err)
	}
	return v
}

func TestWiresharkDecodesTheSimulatorsFrames(t *testing.T) {
	tshark := ensureTshark(t)
	floatPolar := c37118.FormatPolar | c37118.FormatPhasorFloat | c37118.FormatFreqFloat | c37118.FormatAnalogFloat
	cases := []struct {
		name string
		cfg  Config
		typ  []c37118.FrameType // configuration frames sent; data frames are decoded against the last
	}{
		{"float polar PMU, CFG-2", Config{IDCode: 7, Stations: []Station{{Name: "PMU A", Format: floatPolar, Phasors: 4, Analogs: 1, Digitals: 1}}}, []c37118.FrameType{c37118.TypeCfg2}},
		{"int16 rectangular PDC of 2 at 50 Hz, CFG-2", Config{IDCode: 200, Rate: 50, Stations: []Station{
			{Name: "NORTH", Format: 0, Phasors: 4, Analogs: 1, Digitals: 1, NominalHz: 50},
			{Name: "SOUTH", Format: c37118.FormatFreqFloat, Phasors: 2, Analogs: 1, NominalHz: 50}}}, []c37118.FrameType{c37118.TypeCfg2}},
		{"int16 polar and float rectangular, CFG-1 then CFG-2", Config{IDCode: 9, Stations: []Station{
			{Name: "P", Format: c37118.FormatPolar, Phasors: 2, Analogs: 2, Digitals: 2},
			{Name: "R", Format: c37118.FormatPhasorFloat | c37118.FormatAnalogFloat, Phasors: 2, Analogs: 1}}}, []c37118.FrameType{c37118.TypeCfg1, c37118.TypeCfg2}},
		{"2005 version, int16 polar", Config{IDCode: 11, Version: c37118.Version2005, Stations: []Station{
			{Name: "OLD", Format: c37118.FormatPolar, Phasors: 3, Analogs: 1, Digitals: 1}}}, []c37118.FrameType{c37118.TypeCfg2}},
		{"float polar PMU, CFG-3", Config{IDCode: 12, Stations: []Station{{Name: "PMU with CFG-3", Format: floatPolar, Phasors: 2, Analogs: 1, Digitals: 1}}}, []c37118.FrameType{c37118.TypeCfg3}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Start = time.Unix(1_700_000_000, 0)
			s, err := Start(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			set := s.Settings()
			path := filepath.Join(t.TempDir(), "c37118.pcap")
			w, err := newPcap(path)
			if err != nil {
				t.Fatal(err)
			}
			cmds := []uint16{c37118.CmdDataOff}
			for _, typ := range tc.typ {
				cmds = append(cmds, map[c37118.FrameType]uint16{c37118.TypeCfg1: c37118.CmdSendCFG1, c37118.TypeCfg2: c37118.CmdSendCFG2, c37118.TypeCfg3: c37118.CmdSendCFG3}[typ])
			}
			cmds = append(cmds, c37118.CmdSendHDR, c37118.CmdDataOn)
			for _, cmd := range cmds {
				b, err := c37118.AppendCommand(nil, c37118.Header{IDCode: set.IDCode, SOC: 1_700_000_000, Version: set.Version}, cmd, nil)
				if err != nil {
					t.Fatal(err)
				}
				w.client(b)
			}
			var cfgs []*c37118.Config
			for _, typ := range tc.typ {
				cfg := s.Config(typ)
				cb, err := cfg.Append(nil)
				if err != nil {
					t.Fatal(err)
				}
				w.server(cb)
				cfgs = append(cfgs, cfg)
			}
			cfg := cfgs[len(cfgs)-1]
			hb, _ := s.HeaderFrame()
			w.server(hb)
			frames := []int64{0, 1, int64(set.Rate) - 1, int64(set.Rate), 123}
			for _, k := range frames {
				d := s.Sample(k)
				b, err := cfg.AppendData(nil, d)
				if err != nil {
					t.Fatal(err)
				}
				w.server(b)
			}
			bad, _ := cfg.AppendData(nil, s.Sample(200))
			bad[len(bad)-2] ^= 0x01
			w.server(bad)
			w.Close()

			pkts := dissect(t, tshark, path)
			if want := len(cmds) + len(cfgs) + 1 + len(frames) + 1; len(pkts) != want {
				t.Fatalf("tshark dissected %d C37.118 frames, want %d", len(pkts), want)
			}
			for i, cmd := range cmds {
				p := &pkts[i]
				if got := p.one(t, "synphasor.command").Show; got != fmt.Sprintf("0x%04x", cmd) {
					t.Fatalf("command %d: tshark says %s, sent %#04x", i, got, cmd)
				}
				checkCommon(t, p, set, 1_700_000_000, 0, true)
			}
			for i, c := range cfgs {
				checkConfig(t, &pkts[len(cmds)+i], c, c.Type)
				checkCommon(t, &pkts[len(cmds)+i], set, c.SOC, 0, true)
			}
			hp := &pkts[len(cmds)+len(cfgs)]
			text, _ := hex.DecodeString(hp.one(t, "synphasor.data").Value)
			if !strings.Contains(hp.summary, "Header Frame") || string(text) != set.Header {
				t.Fatalf("header frame: %q (%s), sent %q", text, hp.summary, set.Header)
			}
			for i, k := range frames {
				checkData(t, &pkts[len(cmds)+len(cfgs)+1+i], s, cfg, k)
			}
			last := &pkts[len(pkts)-1]
			if st := last.one(t, "synphasor.checksum.status"); !strings.Contains(st.Showname, "Bad") {
				t.Fatalf("the frame with a broken CRC: checksum status %q", st.Showname)
			}
		})
	}
}

// checkCommon checks the common header fields and the CRC status.
func checkCommon(t *testing.T, p *synPacket, set Config, soc, fracsec uint32, good bool) {
	t.Helper()
	if got := p.one(t, "synphasor.idcode_stream_source").Show; got != strconv.Itoa(int(set.IDCode)) {
		t.Fatalf("%s: IDCODE %s, sent %d", p.summary, got, set.IDCode)
	}
	if got := p.one(t, "synphasor.version").Show; got != strconv.Itoa(int(set.Version)) {
		t.Fatalf("%s: version %s, sent %d", p.summary, got, set.Version)
	}
	if got := p.one(t, "synphasor.soc").Value; got != fmt.Sprintf("%08x", soc) {
		t.Fatalf("%s: SOC %s, sent %08x", p.summary, got, soc)
	}
	ts, err := time.Parse("Jan _2, 2006 15:04:05.000000000 MST", p.one(t, "synphasor.soc").Show)
	if err != nil || ts.Unix() != int64(soc) {
		t.Fatalf("%s: SOC shown as %q (%v), sent %d", p.summary, p.one(t, "synphasor.soc").Show, err, soc)
	}
	if got := p.one(t, "synphasor.fracsec_raw").Show; got != strconv.Itoa(int(fracsec)) {
		t.Fatalf("%s: FRACSEC %s, sent %d", p.summary, got, fracsec)
	}
	if st := p.one(t, "synphasor.checksum.status"); good != strings.Contains(st.Showname, "Good") {
		t.Fatalf("%s: checksum status %q", p.summary, st.Showname)
	}
}

func checkConfig(t *testing.T, p *synPacket, cfg *c37118.Config, typ c37118.FrameType) {
	t.Helper()
	if want := fmt.Sprintf("Configuration Frame %d", map[c37118.FrameType]int{c37118.TypeCfg1: 1, c37118.TypeCfg2: 2, c37118.TypeCfg3: 3}[typ]); !strings.Contains(p.summary, want) {
		t.Fatalf("config frame dissected as %q, want %s", p.summary, want)
	}
	if got := p.one(t, "synphasor.conf.timebase").Show; got != strconv.Itoa(int(cfg.TimeBase)) {
		t.Fatalf("TIME_BASE %s, sent %d", got, cfg.TimeBase)
	}
	if got := p.one(t, "synphasor.conf.numpmu").Show; got != strconv.Itoa(len(cfg.PMUs)) {
		t.Fatalf("NUM_PMU %s, sent %d", got, len(cfg.PMUs))
	}
	if got := p.one(t, "synphasor.rate_of_transmission").Show; got != strconv.Itoa(int(cfg.DataRate)) {
		t.Fatalf("DATA_RATE %s, sent %d", got, cfg.DataRate)
	}
	ids := p.get("synphasor.idcode_data_source")
	cnts := p.get("synphasor.conf.cfgcnt")
	fnoms := p.get("synphasor.conf.fnom")
	if len(ids) != len(cfg.PMUs) || len(cnts) != len(cfg.PMUs) || len(fnoms) != len(cfg.PMUs) {
		t.Fatalf("per-PMU fields: %d IDCODEs, %d CFGCNTs, %d FNOMs for %d PMUs", len(ids), len(cnts), len(fnoms), len(cfg.PMUs))
	}
	// Station names, channel names and scale factors in order.
	var stations, chnames []string
	var factors []string
	for _, f := range p.fields {
		switch {
		case typ == c37118.TypeCfg3 && f.Name == "synphasor.station_name":
			stations = append(stations, f.Show)
		case typ != c37118.TypeCfg3 && f.Name == "" && reStation.MatchString(f.Show):
			stations = append(stations, strings.TrimRight(reStation.FindStringSubmatch(f.Show)[1], " "))
		case typ == c37118.TypeCfg3 && f.Name == "synphasor.conf.chnam":
			chnames = append(chnames, f.Show)
		case typ != c37118.TypeCfg3 && f.Name == "synphasor.channel_name":
			if m := reChName.FindStringSubmatch(f.Showname); m != nil {
				chnames = append(chnames, strings.TrimRight(m[1], " "))
			}
		case f.Name == "synphasor.conversion_factor" || f.Name == "synphasor.conf.phasor_scale_factor":
			factors = append(factors, f.Showname)
		}
	}
	var wantSt, wantCh []string
	fi := 0
	for i, pm := range cfg.PMUs {
		wantSt = append(wantSt, pm.Station)
		if ids[i].Show != strconv.Itoa(int(pm.IDCode)) || cnts[i].Show != strconv.Itoa(int(pm.CfgCnt)) ||
			!strings.Contains(fnoms[i].Showname, strconv.Itoa(pm.NominalHz)+"Hz") {
			t.Fatalf("PMU %d: IDCODE %s CFGCNT %s FNOM %q; sent %d %d %d Hz", i, ids[i].Show, cnts[i].Show, fnoms[i].Showname, pm.IDCode, pm.CfgCnt, pm.NominalHz)
		}
		for _, ph := range pm.Phasors {
			wantCh = append(wantCh, ph.Name)
			if fi >= len(factors) {
				t.Fatalf("tshark shows %d phasor factors", len(factors))
			}
			if typ == c37118.TypeCfg3 {
				if got := atof(t, strings.TrimPrefix(factors[fi], "Phasor scale factor: ")); !near(got, float64(ph.Mag3), 1e-5*math.Abs(float64(ph.Mag3))) {
					t.Fatalf("PHSCALE %q, sent %v", factors[fi], ph.Mag3)
				}
			} else {
				m := reFactor.FindStringSubmatch(factors[fi])
				unit := map[uint8]string{0: "Volt", 1: "Ampere"}[ph.Kind]
				if m == nil || m[2] != strconv.Itoa(int(ph.Scale)) || m[3] != unit {
					t.Fatalf("PHUNIT %q, sent %d %s", factors[fi], ph.Scale, unit)
				}
			}
			fi++
		}
		for _, an := range pm.Analogs {
			wantCh = append(wantCh, an.Name)
		}
		for _, dg := range pm.Digital {
			wantCh = append(wantCh, dg.Names[:]...)
		}
	}
	if strings.Join(stations, "|") != strings.Join(wantSt, "|") {
		t.Fatalf("stations %q, sent %q", stations, wantSt)
	}
	if strings.Join(chnames, "|") != strings.Join(wantCh, "|") {
		t.Fatalf("channel names %q, sent %q", chnames, wantCh)
	}
	if st := p.one(t, "synphasor.checksum.status"); !strings.Contains(st.Showname, "Good") {
		t.Fatalf("config frame checksum status %q", st.Showname)
	}
}

func checkData(t *testing.T, p *synPacket, s *Sim, cfg *c37118.Config, k int64) {
	t.Helper()
	set := s.Settings()
	soc, fs := s.FrameTime(k)
	if !strings.Contains(p.summary, "Data Frame") {
		t.Fatalf("frame %d dissected as %q", k, p.summary)
	}
	checkCommon(t, p, set, soc, fs, true)
	d := s.Sample(k)
	// Walk the fields station by station.
	st := -1
	type got struct {
		stat    string
		ph      [][]string
		freq    []pdmlField
		dfreq   []pdmlField
		analogs []string
		digital []string
	}
	per := make([]got, len(cfg.PMUs))
	for _, f := range p.fields {
		if f.Name == "" && reStation.MatchString(f.Show) {
			st++
			continue
		}
		if st < 0 || st >= len(per) {
			continue
		}
		g := &per[st]
		switch f.Name {
		case "synphasor.data.status":
			g.stat = f.Unmasked
		case "synphasor.phasor":
			m := rePhasor.FindStringSubmatch(f.Showname)
			if m == nil {
				t.Fatalf("frame %d: phasor field %q not understood", k, f.Showname)
			}
			g.ph = append(g.ph, m)
		case "synphasor.actual_frequency_value", "synphasor.frequency_deviation_from_nominal":
			g.freq = append(g.freq, f)
		case "synphasor.rate_change_frequency":
			g.dfreq = append(g.dfreq, f)
		case "synphasor.analog_value":
			m := reAnalog.FindStringSubmatch(f.Showname)
			if m == nil {
				t.Fatalf("frame %d: analog field %q not understood", k, f.Showname)
			}
			g.analogs = append(g.analogs, m[3])
		case "synphasor.digital_status_word":
			g.digital = append(g.digital, f.Show)
		}
	}
	if st != len(cfg.PMUs)-1 {
		t.Fatalf("frame %d: tshark shows %d station blocks, sent %d", k, st+1, len(cfg.PMUs))
	}
	for i, pm := range cfg.PMUs {
		g, in := per[i], d.PMUs[i]
		what := fmt.Sprintf("frame %d station %q", k, pm.Station)
		if g.stat != fmt.Sprintf("%04x", in.Stat) {
			t.Fatalf("%s: STAT %s, sent %04x", what, g.stat, in.Stat)
		}
		if len(g.ph) != len(pm.Phasors) || len(g.analogs) != len(pm.Analogs) || len(g.digital) != len(pm.Digital) || len(g.freq) != 1 || len(g.dfreq) != 1 {
			t.Fatalf("%s: %d phasors %d analogs %d digitals %d FREQ %d DFREQ", what, len(g.ph), len(g.analogs), len(g.digital), len(g.freq), len(g.dfreq))
		}
		for j, ph := range pm.Phasors {
			m := g.ph[j]
			if strings.TrimRight(m[2], " ") != ph.Name || m[4] != ph.Unit() {
				t.Fatalf("%s phasor %d: %q %s, sent %q %s", what, j, m[2], m[4], ph.Name, ph.Unit())
			}
			mag, deg, re, im := atof(t, m[3]), atof(t, m[5]), atof(t, m[6]), atof(t, m[7])
			v := in.Phasors[j]
			var wm, wa float64 // expected magnitude and angle as tshark computes them
			switch {
			case pm.Format&c37118.FormatPhasorFloat != 0 && pm.Format&c37118.FormatPolar != 0:
				wm, wa = float64(float32(v[0])), float64(float32(v[1]))
			case pm.Format&c37118.FormatPhasorFloat != 0:
				r, i := float64(float32(v[0])), float64(float32(v[1]))
				wm, wa = math.Hypot(r, i), math.Atan2(i, r)
			default:
				// Quantised here from the sample, independently of the encoder.
				sc := float64(ph.Scale) * 1e-5
				if pm.Format&c37118.FormatPolar != 0 {
					wm, wa = math.Round(v[0]/sc)*sc, math.Round(v[1]*1e4)/1e4
				} else {
					r, im := math.Round(v[0]/sc), math.Round(v[1]/sc)
					wm, wa = math.Hypot(r*sc, im*sc), math.Atan2(im, r)
					if m[8] != strconv.Itoa(int(r)) || m[9] != strconv.Itoa(int(im)) {
						t.Fatalf("%s phasor %d: unscaled %s,%s, sent %v,%v", what, j, m[8], m[9], r, im)
					}
				}
			}
			// tshark prints 3 decimals; float32 rounding adds a little.
			tol := 0.0006 + 2e-7*wm
			if !near(mag, wm, tol) || !near(deg, wa*180/math.Pi, 0.0006+1e-5) ||
				!near(re, wm*math.Cos(wa), tol+1e-5*wm) || !near(im, wm*math.Sin(wa), tol+1e-5*wm) {
				t.Fatalf("%s phasor %d: tshark %v∠%v° (%v+j%v), sent %v∠%v°", what, j, mag, deg, re, im, wm, wa*180/math.Pi)
			}
		}
		bits := func(f pdmlField, v float64) {
			if f.Value != fmt.Sprintf("%08x", math.Float32bits(float32(v))) {
				t.Fatalf("%s %s: raw %s, sent %08x", what, f.Name, f.Value, math.Float32bits(float32(v)))
			}
		}
		if pm.Format&c37118.FormatFreqFloat != 0 {
			if g.freq[0].Name != "synphasor.actual_frequency_value" || !near(atof(t, g.freq[0].Show), in.Freq, 1e-5*in.Freq) {
				t.Fatalf("%s: FREQ %s %s, sent %v Hz", what, g.freq[0].Name, g.freq[0].Show, in.Freq)
			}
			bits(g.freq[0], in.Freq)
			bits(g.dfreq[0], in.DFreq)
		} else {
			raw := int(math.Round((in.Freq - float64(pm.NominalHz)) * 1000))
			if g.freq[0].Name != "synphasor.frequency_deviation_from_nominal" || g.freq[0].Show != strconv.Itoa(raw) {
				t.Fatalf("%s: FREQ %s %s, sent %d mHz", what, g.freq[0].Name, g.freq[0].Show, raw)
			}
			if want := math.Round(in.DFreq*100) / 100; !near(atof(t, g.dfreq[0].Show), want, 1e-9) {
				t.Fatalf("%s: DFREQ %s, sent %v", what, g.dfreq[0].Show, want)
			}
		}
		for j, an := range pm.Analogs {
			want := float64(float32(in.Analogs[j]))
			if pm.Format&c37118.FormatAnalogFloat == 0 {
				// Wireshark shows an int16 analog raw: ANUNIT's scaling is user-defined
				// (we read it as raw × factor; see docs/pmu.md).
				want = math.Round(in.Analogs[j] / float64(an.Scale))
			}
			if got := atof(t, g.analogs[j]); !near(got, want, 0.0006) {
				t.Fatalf("%s analog %d: %v, sent %v", what, j, got, want)
			}
		}
		for j := range pm.Digital {
			if want := fmt.Sprintf("0x%04x", in.Digital[j]); g.digital[j] != want {
				t.Fatalf("%s digital %d: %s, sent %s", what, j, g.digital[j], want)
			}
		}
	}
}
