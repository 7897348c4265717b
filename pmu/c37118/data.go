package c37118

import (
	"encoding/binary"
	"fmt"
	"math"
)

// StatConfigChange is the STAT bit a PMU sets (for a minute) before its configuration
// changes: a client asks for the configuration again.
const StatConfigChange uint16 = 1 << 10

// PMUData is one PMU's block of a data frame, in engineering units.
type PMUData struct {
	Stat uint16
	// Phasors holds (magnitude, angle in radians) when the format is polar, else
	// (real, imaginary); int16 values are scaled by PHUNIT (CFG-1/2) or PHSCALE (CFG-3).
	Phasors [][2]float64
	// Freq is the frequency in Hz: nominal + deviation/1000 for int16; for float32 the
	// value as sent, which the standard defines as the actual frequency in Hz.
	Freq float64
	// DFreq is the rate of change of frequency in Hz/s: int16/100, or float32 as sent.
	DFreq float64
	// Analogs holds analog values: int16 × ANUNIT's factor (a factor of 0 reads as 1),
	// or int16 × ANSCALE magnitude + offset (CFG-3), or float32 as sent.
	Analogs []float64
	// Digital holds the digital status words.
	Digital []uint16
}

// Data is a decoded data frame: one block per PMU of the configuration.
type Data struct {
	Header
	PMUs []PMUData
}

// DecodeData decodes a validated data frame against cfg into d, reusing d's slices.
// A frame whose size does not match the configuration is refused with ErrFormat: the
// configuration changed (ask for it again) or the frame belongs to another stream.
func (cfg *Config) DecodeData(frame []byte, d *Data) error {
	h, err := ParseHeader(frame)
	if err != nil {
		return err
	}
	if h.Type != TypeData {
		return fmt.Errorf("%w: a %v frame, not data", ErrFormat, h.Type)
	}
	if want := cfg.DataSize(); len(frame) != want {
		return fmt.Errorf("%w: data frame of %d bytes, the configuration (CFGCNT %d) says %d", ErrFormat, len(frame), cfg.cfgCnt(), want)
	}
	d.Header = h
	if cap(d.PMUs) < len(cfg.PMUs) {
		d.PMUs = make([]PMUData, len(cfg.PMUs))
	}
	d.PMUs = d.PMUs[:len(cfg.PMUs)]
	b := frame[HeaderLen : len(frame)-2]
	be := binary.BigEndian
	f32 := func() float64 { v := math.Float32frombits(be.Uint32(b)); b = b[4:]; return float64(v) }
	i16 := func() int16 { v := int16(be.Uint16(b)); b = b[2:]; return v }
	for i := range cfg.PMUs {
		p, out := &cfg.PMUs[i], &d.PMUs[i]
		cfg3 := cfg.Type == TypeCfg3
		out.Stat = uint16(i16())
		out.Phasors = resize(out.Phasors, len(p.Phasors))
		polar := p.Format&FormatPolar != 0
		for j := range p.Phasors {
			ph := &p.Phasors[j]
			var a, c float64
			if p.Format&FormatPhasorFloat != 0 {
				a, c = f32(), f32()
			} else {
				if polar {
					a = float64(uint16(i16()))
					c = float64(i16()) / 1e4
				} else {
					a, c = float64(i16()), float64(i16())
				}
				if cfg3 {
					if polar {
						a *= float64(ph.Mag3)
					} else {
						a, c = a*float64(ph.Mag3), c*float64(ph.Mag3)
					}
				} else {
					// raw × PHUNIT × 10⁻⁵, in that order (as Wireshark's dissector computes it).
					a = a * float64(ph.Scale) * 1e-5
					if !polar {
						c = c * float64(ph.Scale) * 1e-5
					}
				}
			}
			if cfg3 && polar && ph.Angle3 != 0 {
				c += float64(ph.Angle3)
			}
			out.Phasors[j] = [2]float64{a, c}
		}
		if p.Format&FormatFreqFloat != 0 {
			out.Freq, out.DFreq = f32(), f32()
		} else {
			out.Freq = float64(p.NominalHz) + float64(i16())/1000
			out.DFreq = float64(i16()) / 100
		}
		out.Analogs = resize(out.Analogs, len(p.Analogs))
		for j := range p.Analogs {
			an := &p.Analogs[j]
			if p.Format&FormatAnalogFloat != 0 {
				out.Analogs[j] = f32()
			} else if cfg3 {
				out.Analogs[j] = float64(i16())*float64(an.Mag3) + float64(an.Offset3)
			} else {
				out.Analogs[j] = float64(i16()) * float64(analogFactor(an.Scale))
			}
		}
		out.Digital = resize(out.Digital, len(p.Digital))
		for j := range p.Digital {
			out.Digital[j] = uint16(i16())
		}
	}
	return nil
}

func analogFactor(s int32) int32 {
	if s == 0 {
		return 1
	}
	return s
}

func (cfg *Config) cfgCnt() uint16 {
	if len(cfg.PMUs) == 0 {
		return 0
	}
	return cfg.PMUs[0].CfgCnt
}

func resize[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// AppendData encodes d as a data frame under cfg. Values are quantised as the format
// says (see Quantize); d must have one block per PMU with the configured channel counts.
func (cfg *Config) AppendData(dst []byte, d *Data) ([]byte, error) {
	if len(d.PMUs) != len(cfg.PMUs) {
		return dst, fmt.Errorf("%w: %d PMU blocks for a configuration of %d", ErrFormat, len(d.PMUs), len(cfg.PMUs))
	}
	start := len(dst)
	h := d.Header
	h.Type, h.IDCode = TypeData, cfg.IDCode
	if h.Version == 0 {
		h.Version = cfg.Version
	}
	dst = appendHeader(dst, h)
	be := binary.BigEndian
	f32 := func(v float64) { dst = be.AppendUint32(dst, math.Float32bits(float32(v))) }
	i16 := func(v int16) { dst = be.AppendUint16(dst, uint16(v)) }
	for i := range cfg.PMUs {
		p, in := &cfg.PMUs[i], &d.PMUs[i]
		if len(in.Phasors) != len(p.Phasors) || len(in.Analogs) != len(p.Analogs) || len(in.Digital) != len(p.Digital) {
			return dst[:start], fmt.Errorf("%w: PMU %d: channel counts differ from the configuration", ErrFormat, i)
		}
		i16(int16(in.Stat))
		for j := range p.Phasors {
			if p.Format&FormatPhasorFloat != 0 {
				f32(in.Phasors[j][0])
				f32(in.Phasors[j][1])
				continue
			}
			raw := cfg.QuantizePhasor(i, j, in.Phasors[j])
			i16(raw[0])
			i16(raw[1])
		}
		if p.Format&FormatFreqFloat != 0 {
			f32(in.Freq)
			f32(in.DFreq)
		} else {
			i16(sat16(math.Round((in.Freq - float64(p.NominalHz)) * 1000)))
			i16(sat16(math.Round(in.DFreq * 100)))
		}
		for j := range p.Analogs {
			if p.Format&FormatAnalogFloat != 0 {
				f32(in.Analogs[j])
			} else {
				i16(sat16(math.Round(in.Analogs[j] / float64(analogFactor(p.Analogs[j].Scale)))))
			}
		}
		for _, w := range in.Digital {
			dst = be.AppendUint16(dst, w)
		}
	}
	return finish(dst, start)
}

// QuantizePhasor returns the int16 pair that encodes phasor j of PMU i under a CFG-1/2
// int16 format (the magnitude of a polar phasor is an unsigned 16-bit word, carried
// here in an int16's bits).
func (cfg *Config) QuantizePhasor(i, j int, v [2]float64) [2]int16 {
	p := &cfg.PMUs[i]
	s := float64(p.Phasors[j].Scale) * 1e-5
	if s == 0 {
		s = 1
	}
	if p.Format&FormatPolar != 0 {
		m := math.Round(v[0] / s)
		m = math.Max(0, math.Min(65535, m))
		return [2]int16{int16(uint16(m)), sat16(math.Round(v[1] * 1e4))}
	}
	return [2]int16{sat16(math.Round(v[0] / s)), sat16(math.Round(v[1] / s))}
}

func sat16(v float64) int16 {
	return int16(math.Max(math.MinInt16, math.Min(math.MaxInt16, v)))
}
