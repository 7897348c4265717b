package c37118

import (
	"bytes"
	"errors"
	"io"
	"math"
	"testing"
)

func TestCRCCheckValue(t *testing.T) {
	// CRC-16/CCITT-FALSE's published check value.
	if got := CRC([]byte("123456789")); got != 0x29B1 {
		t.Fatalf("CRC(123456789) = %#04x, want 0x29b1", got)
	}
}

// testConfig returns a two-PMU configuration (a PDC stream) with every channel kind.
func testConfig(typ FrameType, f1, f2 Format) *Config {
	dg := Digital{NormalMask: 0x0000, ValidMask: 0xFFFF}
	for i := range dg.Names {
		dg.Names[i] = "BRK" + string(rune('A'+i))
	}
	return &Config{
		Header:   Header{Type: typ, Version: Version2011, IDCode: 7, SOC: 1_700_000_000, FracSec: 0},
		TimeBase: 1_000_000,
		DataRate: 60,
		PMUs: []PMU{{
			Station: "STATION A", IDCode: 11, Format: f1, NominalHz: 60, CfgCnt: 3,
			Phasors: []Phasor{{Name: "VA", Scale: 915527, Mag3: 9.15527}, {Name: "IA", Kind: PhasorCurrent, Scale: 45776, Mag3: 0.45776}},
			Analogs: []Analog{{Name: "MW", Kind: 1, Scale: 10, Mag3: 10}},
			Digital: []Digital{dg},
		}, {
			Station: "STATION B", IDCode: 12, Format: f2, NominalHz: 50, CfgCnt: 1,
			Phasors: []Phasor{{Name: "VB", Scale: 1000, Mag3: 0.01}},
		}},
	}
}

func TestConfigRoundTrip(t *testing.T) {
	for _, typ := range []FrameType{TypeCfg1, TypeCfg2, TypeCfg3} {
		cfg := testConfig(typ, FormatPolar|FormatPhasorFloat|FormatFreqFloat|FormatAnalogFloat, 0)
		b, err := cfg.Append(nil)
		if err != nil {
			t.Fatal(err)
		}
		got, err := ParseConfig(b)
		if err != nil {
			t.Fatalf("%v: %v", typ, err)
		}
		if got.Type != typ || len(got.PMUs) != 2 || got.TimeBase != 1_000_000 || got.DataRate != 60 {
			t.Fatalf("%v: header fields differ: %+v", typ, got)
		}
		for i := range cfg.PMUs {
			w, g := cfg.PMUs[i], got.PMUs[i]
			if w.Station != g.Station || w.IDCode != g.IDCode || w.Format != g.Format || w.NominalHz != g.NominalHz || w.CfgCnt != g.CfgCnt {
				t.Fatalf("%v PMU %d: %+v, want %+v", typ, i, g, w)
			}
			for j := range w.Phasors {
				if w.Phasors[j].Name != g.Phasors[j].Name || w.Phasors[j].Kind != g.Phasors[j].Kind {
					t.Fatalf("%v PMU %d phasor %d: %+v want %+v", typ, i, j, g.Phasors[j], w.Phasors[j])
				}
				if typ != TypeCfg3 && w.Phasors[j].Scale != g.Phasors[j].Scale {
					t.Fatalf("%v PHUNIT differs", typ)
				}
			}
			if len(w.Digital) > 0 && w.Digital[0] != g.Digital[0] {
				t.Fatalf("%v digital differs: %+v", typ, g.Digital[0])
			}
		}
	}
}

func TestDataRoundTripEveryFormat(t *testing.T) {
	for f := Format(0); f < 16; f++ {
		cfg := testConfig(TypeCfg2, f, f^0xF)
		d := &Data{Header: Header{SOC: 1_700_000_001, FracSec: 16667, TimeQuality: 0x05}, PMUs: []PMUData{
			{Stat: 0x0400, Phasors: [][2]float64{{230e3, 0.5}, {1200, -2.5}}, Freq: 60.012, DFreq: -0.25, Analogs: []float64{1230}, Digital: []uint16{0xA5A5}},
			{Stat: 0, Phasors: [][2]float64{{10, 1}}, Freq: 49.98, DFreq: 0.5},
		}}
		b, err := cfg.AppendData(nil, d)
		if err != nil {
			t.Fatal(err)
		}
		var got Data
		if err := cfg.DecodeData(b, &got); err != nil {
			t.Fatalf("format %#x: %v", f, err)
		}
		if got.SOC != d.SOC || got.FracSec != d.FracSec || got.TimeQuality != 5 {
			t.Fatalf("header %+v", got.Header)
		}
		if ns := got.TimeNs(cfg.TimeBase); ns != 1_700_000_001_016_667_000 {
			t.Fatalf("time %d", ns)
		}
		for i, p := range cfg.PMUs {
			w, g := d.PMUs[i], got.PMUs[i]
			if g.Stat != w.Stat || len(g.Digital) != len(w.Digital) {
				t.Fatalf("format %#x PMU %d stat/digital", f, i)
			}
			for j := range p.Phasors {
				for k := 0; k < 2; k++ {
					want := w.Phasors[j][k]
					switch {
					case p.Format&FormatPhasorFloat != 0:
						want = float64(float32(want))
					case p.Format&FormatPolar != 0 && k == 1:
						want = math.Round(want*1e4) / 1e4
					default:
						raw := cfg.QuantizePhasor(i, j, w.Phasors[j])[k]
						r := float64(raw)
						if p.Format&FormatPolar != 0 {
							r = float64(uint16(raw))
						}
						want = r * float64(p.Phasors[j].Scale) * 1e-5
					}
					if g.Phasors[j][k] != want {
						t.Fatalf("format %#x PMU %d phasor %d[%d] = %v, want %v", f, i, j, k, g.Phasors[j][k], want)
					}
				}
			}
			wf, wd := float64(float32(w.Freq)), float64(float32(w.DFreq))
			if p.Format&FormatFreqFloat == 0 {
				wf = float64(p.NominalHz) + math.Round((w.Freq-float64(p.NominalHz))*1000)/1000
				wd = math.Round(w.DFreq*100) / 100
			}
			if math.Abs(g.Freq-wf) > 1e-9 || math.Abs(g.DFreq-wd) > 1e-12 {
				t.Fatalf("format %#x PMU %d freq %v dfreq %v, want %v %v", f, i, g.Freq, g.DFreq, wf, wd)
			}
		}
	}
}

func TestBadFramesRefused(t *testing.T) {
	cfg := testConfig(TypeCfg2, 0, 0)
	b, _ := cfg.Append(nil)
	bad := bytes.Clone(b)
	bad[20] ^= 1
	if _, err := ParseConfig(bad); !errors.Is(err, ErrCRC) {
		t.Fatalf("flipped bit: %v, want ErrCRC", err)
	}
	if _, err := ParseConfig(b[:len(b)-1]); !errors.Is(err, ErrSize) {
		t.Fatalf("short frame: %v, want ErrSize", err)
	}
	// A data frame of another configuration's size is refused.
	d, _ := testConfig(TypeCfg2, FormatPhasorFloat, 0).AppendData(nil, &Data{PMUs: []PMUData{
		{Phasors: make([][2]float64, 2), Analogs: make([]float64, 1), Digital: make([]uint16, 1)}, {Phasors: make([][2]float64, 1)}}})
	if err := cfg.DecodeData(d, &Data{}); !errors.Is(err, ErrFormat) {
		t.Fatalf("size mismatch: %v, want ErrFormat", err)
	}
}

func TestReaderResyncsAndDropsBadCRC(t *testing.T) {
	cfg := testConfig(TypeCfg2, 0, 0)
	good, _ := cfg.Append(nil)
	hdr, _ := AppendHeaderFrame(nil, Header{IDCode: 7}, "hello")
	bad := bytes.Clone(hdr)
	bad[len(bad)-3] ^= 0xFF
	var stream []byte
	stream = append(stream, 1, 2, 3) // garbage
	stream = append(stream, good...)
	stream = append(stream, bad...)
	stream = append(stream, hdr...)
	r := NewReader(bytes.NewReader(stream))
	if _, h, err := r.Next(); err != nil || h.Type != TypeCfg2 {
		t.Fatalf("first: %v %v", h.Type, err)
	}
	if r.Skipped != 3 {
		t.Fatalf("skipped %d, want 3", r.Skipped)
	}
	if _, _, err := r.Next(); !errors.Is(err, ErrCRC) {
		t.Fatalf("second: %v, want ErrCRC", err)
	}
	f, h, err := r.Next()
	if err != nil || h.Type != TypeHeader {
		t.Fatalf("third: %v %v", h, err)
	}
	if _, text, _ := ParseHeaderFrame(f); text != "hello" {
		t.Fatalf("header text %q", text)
	}
	if _, _, err := r.Next(); err != io.EOF {
		t.Fatalf("end: %v", err)
	}
}

func TestCommandAndVersion2005(t *testing.T) {
	b, err := AppendCommand(nil, Header{IDCode: 9, Version: Version2005, SOC: 5}, CmdSendCFG2, nil)
	if err != nil {
		t.Fatal(err)
	}
	h, cmd, err := ParseCommand(b)
	if err != nil || cmd != CmdSendCFG2 || h.Version != Version2005 || h.IDCode != 9 {
		t.Fatalf("%+v %d %v", h, cmd, err)
	}
	cfg := testConfig(TypeCfg2, 0, 0)
	cfg.Version = Version2005
	cb, _ := cfg.Append(nil)
	got, err := ParseConfig(cb)
	if err != nil || got.Version != Version2005 {
		t.Fatalf("2005 config: %v", err)
	}
}

func FuzzParseConfig(f *testing.F) {
	for _, typ := range []FrameType{TypeCfg1, TypeCfg2, TypeCfg3} {
		b, _ := testConfig(typ, 0, FormatPolar).Append(nil)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		// Make the CRC and size right so the fuzzer reaches the body decoders.
		if len(b) >= MinFrameLen && len(b) <= MaxFrameLen {
			b[0], b[1] = syncByte, b[1]&0x7F
			b[2], b[3] = byte(len(b)>>8), byte(len(b))
			c := CRC(b[:len(b)-2])
			b[len(b)-2], b[len(b)-1] = byte(c>>8), byte(c)
		}
		cfg, err := ParseConfig(b)
		if err != nil {
			return
		}
		n := 0
		for _, p := range cfg.PMUs {
			n += len(p.Phasors) + len(p.Analogs) + len(p.Digital)*16
		}
		if n > len(b) {
			t.Fatalf("%d channels from %d bytes", n, len(b))
		}
		var d Data
		cfg.DecodeData(b, &d)
	})
}

func FuzzDecodeData(f *testing.F) {
	cfg := testConfig(TypeCfg2, FormatPhasorFloat, FormatPolar)
	d, _ := cfg.AppendData(nil, &Data{PMUs: []PMUData{
		{Phasors: make([][2]float64, 2), Analogs: make([]float64, 1), Digital: make([]uint16, 1)}, {Phasors: make([][2]float64, 1)}}})
	f.Add(d)
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) >= MinFrameLen && len(b) <= MaxFrameLen {
			b[0], b[1] = syncByte, b[1]&0x8F
			b[2], b[3] = byte(len(b)>>8), byte(len(b))
			c := CRC(b[:len(b)-2])
			b[len(b)-2], b[len(b)-1] = byte(c>>8), byte(c)
		}
		var out Data
		cfg.DecodeData(b, &out)
		NewReader(bytes.NewReader(b)).Next()
	})
}
