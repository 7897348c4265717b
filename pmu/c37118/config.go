package c37118

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"
)

// Format is a PMU's FORMAT word: how its data frames encode each kind of channel.
type Format uint16

// Bits of the FORMAT word.
const (
	FormatPolar       Format = 1 << 0 // phasors as magnitude and angle (else real and imaginary)
	FormatPhasorFloat Format = 1 << 1 // phasors as float32 (else int16)
	FormatAnalogFloat Format = 1 << 2 // analogs as float32 (else int16)
	FormatFreqFloat   Format = 1 << 3 // FREQ/DFREQ as float32 (else int16)
)

// Phasor kinds of PHUNIT's top byte.
const (
	PhasorVoltage = 0
	PhasorCurrent = 1
)

// Phasor describes one phasor channel.
type Phasor struct {
	Name string
	// Kind is PhasorVoltage or PhasorCurrent.
	Kind uint8
	// Scale is PHUNIT's 24-bit factor in 10⁻⁵ V or A per bit (int16 formats).
	Scale uint32
	// CFG-3 only: PHSCALE's magnitude factor and angle offset (radians), and its flags word.
	Mag3, Angle3 float32
	Flags3       uint32
}

// Unit returns "V" or "A".
func (p Phasor) Unit() string {
	if p.Kind == PhasorCurrent {
		return "A"
	}
	return "V"
}

// Analog describes one analog channel.
type Analog struct {
	Name string
	// Kind is ANUNIT's top byte: 0 single point-on-wave, 1 RMS, 2 peak (others user-defined).
	Kind uint8
	// Scale is ANUNIT's signed 24-bit user-defined factor (int16 format).
	Scale int32
	// CFG-3 only: ANSCALE's magnitude factor and offset.
	Mag3, Offset3 float32
}

// Digital describes one digital status word: its 16 bit names and DIGUNIT's masks.
type Digital struct {
	Names      [16]string
	NormalMask uint16
	ValidMask  uint16
}

// PMU is one PMU's block of a configuration frame.
type PMU struct {
	Station string
	IDCode  uint16
	Format  Format
	Phasors []Phasor
	Analogs []Analog
	Digital []Digital
	// NominalHz is 50 or 60 (FNOM).
	NominalHz int
	// CfgCnt counts configuration changes; a new value means the channels changed.
	CfgCnt uint16
	// CFG-3 only.
	GlobalID           [16]byte
	Lat, Lon, Elev     float32
	SvcClass           byte
	Window, GroupDelay int32
}

// Config is a configuration frame: CFG-1, CFG-2 or CFG-3.
type Config struct {
	Header
	// TimeBase divides FRACSEC into seconds (24 bits); TimeFlags is its reserved top byte.
	TimeBase  uint32
	TimeFlags uint8
	PMUs      []PMU
	// DataRate > 0: frames per second; < 0: seconds per frame.
	DataRate int16
}

// cursor reads big-endian fields and remembers the first shortfall.
type cursor struct {
	b   []byte
	err error
}

func (c *cursor) need(n int, what string) bool {
	if c.err != nil {
		return false
	}
	if n < 0 || len(c.b) < n {
		c.err = fmt.Errorf("%w: %s needs %d bytes, %d remain", ErrFormat, what, n, len(c.b))
		return false
	}
	return true
}

func (c *cursor) bytes(n int, what string) []byte {
	if !c.need(n, what) {
		return nil
	}
	b := c.b[:n]
	c.b = c.b[n:]
	return b
}

func (c *cursor) u8(what string) uint8 {
	if b := c.bytes(1, what); b != nil {
		return b[0]
	}
	return 0
}

func (c *cursor) u16(what string) uint16 {
	if b := c.bytes(2, what); b != nil {
		return binary.BigEndian.Uint16(b)
	}
	return 0
}

func (c *cursor) u32(what string) uint32 {
	if b := c.bytes(4, what); b != nil {
		return binary.BigEndian.Uint32(b)
	}
	return 0
}

func (c *cursor) f32(what string) float32 { return math.Float32frombits(c.u32(what)) }

// name16 reads a CFG-1/2 name: 16 bytes, trailing spaces and NULs trimmed.
func (c *cursor) name16(what string) string {
	return trimName(c.bytes(16, what))
}

// name1 reads a CFG-3 name: a length byte then that many bytes.
func (c *cursor) name1(what string) string {
	n := int(c.u8(what))
	return trimName(c.bytes(n, what))
}

func trimName(b []byte) string {
	return strings.TrimRight(string(b), " \x00")
}

// ParseConfig decodes a validated CFG-1, CFG-2 or CFG-3 frame. A fragment of a CFG-3
// (CONT_IDX ≠ 0) is refused with ErrFormat: hand fragments to a Cfg3Assembler.
func ParseConfig(frame []byte) (*Config, error) {
	h, err := ParseHeader(frame)
	if err != nil {
		return nil, err
	}
	if h.Type != TypeCfg1 && h.Type != TypeCfg2 && h.Type != TypeCfg3 {
		return nil, fmt.Errorf("%w: a %v frame, not a configuration", ErrFormat, h.Type)
	}
	body := frame[HeaderLen : len(frame)-2]
	if h.Type == TypeCfg3 {
		if len(body) < 2 {
			return nil, fmt.Errorf("%w: CFG-3 without CONT_IDX", ErrFormat)
		}
		if idx := binary.BigEndian.Uint16(body); idx != 0 {
			return nil, fmt.Errorf("%w: a fragment of a CFG-3 (CONT_IDX %#04x); reassemble it with a Cfg3Assembler", ErrFormat, idx)
		}
		body = body[2:]
	}
	return parseConfigBody(h, body)
}

// parseConfigBody decodes a configuration's fields from TIME_BASE to DATA_RATE (for a
// CFG-3, after CONT_IDX: the concatenated bodies of its fragments).
func parseConfigBody(h Header, body []byte) (*Config, error) {
	cfg := &Config{Header: h}
	c := &cursor{b: body}
	cfg3 := h.Type == TypeCfg3
	tb := c.u32("TIME_BASE")
	cfg.TimeBase, cfg.TimeFlags = tb&0xFFFFFF, uint8(tb>>24)
	num := int(c.u16("NUM_PMU"))
	// Each PMU block takes at least 30 bytes (CFG-1/2) or 40 (CFG-3): bound before allocating.
	minBlock := 30
	if cfg3 {
		minBlock = 40
	}
	if !c.need(num*minBlock, "NUM_PMU blocks") {
		return nil, c.err
	}
	cfg.PMUs = make([]PMU, num)
	for i := range cfg.PMUs {
		if cfg3 {
			parsePMU3(c, &cfg.PMUs[i])
		} else {
			parsePMU12(c, &cfg.PMUs[i])
		}
		if c.err != nil {
			return nil, fmt.Errorf("PMU block %d: %w", i, c.err)
		}
	}
	cfg.DataRate = int16(c.u16("DATA_RATE"))
	if c.err != nil {
		return nil, c.err
	}
	if len(c.b) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after DATA_RATE", ErrFormat, len(c.b))
	}
	return cfg, nil
}

func parseCounts(c *cursor, p *PMU, nameLen int) (ph, an, dg int) {
	p.Format = Format(c.u16("FORMAT"))
	ph, an, dg = int(c.u16("PHNMR")), int(c.u16("ANNMR")), int(c.u16("DGNMR"))
	// Bound the channel tables by the bytes that remain: every phasor, analog and digital
	// word takes at least nameLen+4 bytes (a name and a unit word).
	if !c.need((ph+an)*(nameLen+4)+dg*(16*nameLen+4), "channel tables") {
		return 0, 0, 0
	}
	p.Phasors = make([]Phasor, ph)
	p.Analogs = make([]Analog, an)
	p.Digital = make([]Digital, dg)
	return
}

func parsePMU12(c *cursor, p *PMU) {
	p.Station = c.name16("STN")
	p.IDCode = c.u16("IDCODE")
	ph, an, dg := parseCounts(c, p, 16)
	for i := 0; i < ph; i++ {
		p.Phasors[i].Name = c.name16("CHNAM")
	}
	for i := 0; i < an; i++ {
		p.Analogs[i].Name = c.name16("CHNAM")
	}
	for i := 0; i < dg; i++ {
		for j := range p.Digital[i].Names {
			p.Digital[i].Names[j] = c.name16("CHNAM")
		}
	}
	for i := 0; i < ph; i++ {
		u := c.u32("PHUNIT")
		p.Phasors[i].Kind, p.Phasors[i].Scale = uint8(u>>24), u&0xFFFFFF
	}
	for i := 0; i < an; i++ {
		u := c.u32("ANUNIT")
		p.Analogs[i].Kind, p.Analogs[i].Scale = uint8(u>>24), int32(u<<8)>>8
	}
	for i := 0; i < dg; i++ {
		p.Digital[i].NormalMask, p.Digital[i].ValidMask = c.u16("DIGUNIT"), c.u16("DIGUNIT")
	}
	p.NominalHz = fnom(c.u16("FNOM"))
	p.CfgCnt = c.u16("CFGCNT")
}

func parsePMU3(c *cursor, p *PMU) {
	p.Station = c.name1("STN")
	p.IDCode = c.u16("IDCODE")
	copy(p.GlobalID[:], c.bytes(16, "G_PMU_ID"))
	ph, an, dg := parseCounts(c, p, 1)
	for i := 0; i < ph; i++ {
		p.Phasors[i].Name = c.name1("CHNAM")
	}
	for i := 0; i < an; i++ {
		p.Analogs[i].Name = c.name1("CHNAM")
	}
	for i := 0; i < dg; i++ {
		for j := range p.Digital[i].Names {
			p.Digital[i].Names[j] = c.name1("CHNAM")
		}
	}
	for i := 0; i < ph; i++ {
		ph := &p.Phasors[i]
		ph.Flags3 = c.u32("PHSCALE")
		ph.Kind = uint8(ph.Flags3>>8) >> 3 & 1
		ph.Mag3, ph.Angle3 = c.f32("PHSCALE"), c.f32("PHSCALE")
	}
	for i := 0; i < an; i++ {
		p.Analogs[i].Mag3, p.Analogs[i].Offset3 = c.f32("ANSCALE"), c.f32("ANSCALE")
	}
	for i := 0; i < dg; i++ {
		p.Digital[i].NormalMask, p.Digital[i].ValidMask = c.u16("DIGUNIT"), c.u16("DIGUNIT")
	}
	p.Lat, p.Lon, p.Elev = c.f32("PMU_LAT"), c.f32("PMU_LON"), c.f32("PMU_ELEV")
	p.SvcClass = c.u8("SVC_CLASS")
	p.Window, p.GroupDelay = int32(c.u32("WINDOW")), int32(c.u32("GRP_DLY"))
	p.NominalHz = fnom(c.u16("FNOM"))
	p.CfgCnt = c.u16("CFGCNT")
}

func fnom(v uint16) int {
	if v&1 != 0 {
		return 50
	}
	return 60
}

// Append appends the encoded configuration frame (CFG-1/2 or CFG-3 by cfg.Type).
// Names longer than the format allows (16 bytes; 255 in CFG-3) are refused.
func (cfg *Config) Append(dst []byte) ([]byte, error) {
	if cfg.Type != TypeCfg1 && cfg.Type != TypeCfg2 && cfg.Type != TypeCfg3 {
		return dst, fmt.Errorf("%w: %v is not a configuration frame type", ErrFormat, cfg.Type)
	}
	start := len(dst)
	dst = appendHeader(dst, cfg.Header)
	if cfg.Type == TypeCfg3 {
		dst = append(dst, 0, 0) // CONT_IDX: the only frame
	}
	dst, err := cfg.appendBody(dst)
	if err != nil {
		return dst[:start], err
	}
	return finish(dst, start)
}

// appendBody appends the fields from TIME_BASE to DATA_RATE.
func (cfg *Config) appendBody(dst []byte) ([]byte, error) {
	start := len(dst)
	cfg3 := cfg.Type == TypeCfg3
	dst = binary.BigEndian.AppendUint32(dst, uint32(cfg.TimeFlags)<<24|cfg.TimeBase&0xFFFFFF)
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(cfg.PMUs)))
	var err error
	name := func(s string) {
		if cfg3 {
			if len(s) > 255 {
				err = fmt.Errorf("%w: name %q longer than 255 bytes", ErrFormat, s)
			}
			dst = append(dst, byte(len(s)))
			dst = append(dst, s...)
			return
		}
		if len(s) > 16 {
			err = fmt.Errorf("%w: name %q longer than 16 bytes", ErrFormat, s)
			s = s[:16]
		}
		dst = append(dst, s...)
		for i := len(s); i < 16; i++ {
			dst = append(dst, ' ')
		}
	}
	for i := range cfg.PMUs {
		p := &cfg.PMUs[i]
		name(p.Station)
		dst = binary.BigEndian.AppendUint16(dst, p.IDCode)
		if cfg3 {
			dst = append(dst, p.GlobalID[:]...)
		}
		dst = binary.BigEndian.AppendUint16(dst, uint16(p.Format))
		dst = binary.BigEndian.AppendUint16(dst, uint16(len(p.Phasors)))
		dst = binary.BigEndian.AppendUint16(dst, uint16(len(p.Analogs)))
		dst = binary.BigEndian.AppendUint16(dst, uint16(len(p.Digital)))
		for _, ph := range p.Phasors {
			name(ph.Name)
		}
		for _, an := range p.Analogs {
			name(an.Name)
		}
		for _, dg := range p.Digital {
			for _, n := range dg.Names {
				name(n)
			}
		}
		for _, ph := range p.Phasors {
			if cfg3 {
				flags := ph.Flags3&^(0x08<<8) | uint32(ph.Kind&1)<<11
				dst = binary.BigEndian.AppendUint32(dst, flags)
				dst = binary.BigEndian.AppendUint32(dst, math.Float32bits(ph.Mag3))
				dst = binary.BigEndian.AppendUint32(dst, math.Float32bits(ph.Angle3))
			} else {
				dst = binary.BigEndian.AppendUint32(dst, uint32(ph.Kind)<<24|ph.Scale&0xFFFFFF)
			}
		}
		for _, an := range p.Analogs {
			if cfg3 {
				dst = binary.BigEndian.AppendUint32(dst, math.Float32bits(an.Mag3))
				dst = binary.BigEndian.AppendUint32(dst, math.Float32bits(an.Offset3))
			} else {
				dst = binary.BigEndian.AppendUint32(dst, uint32(an.Kind)<<24|uint32(an.Scale)&0xFFFFFF)
			}
		}
		for _, dg := range p.Digital {
			dst = binary.BigEndian.AppendUint16(dst, dg.NormalMask)
			dst = binary.BigEndian.AppendUint16(dst, dg.ValidMask)
		}
		if cfg3 {
			for _, f := range []float32{p.Lat, p.Lon, p.Elev} {
				dst = binary.BigEndian.AppendUint32(dst, math.Float32bits(f))
			}
			dst = append(dst, p.SvcClass)
			dst = binary.BigEndian.AppendUint32(dst, uint32(p.Window))
			dst = binary.BigEndian.AppendUint32(dst, uint32(p.GroupDelay))
		}
		var fn uint16
		if p.NominalHz == 50 {
			fn = 1
		}
		dst = binary.BigEndian.AppendUint16(dst, fn)
		dst = binary.BigEndian.AppendUint16(dst, p.CfgCnt)
	}
	dst = binary.BigEndian.AppendUint16(dst, uint16(cfg.DataRate))
	if err != nil {
		return dst[:start], err
	}
	return dst, nil
}

// DataSize returns the byte length of a data frame under this configuration.
func (cfg *Config) DataSize() int {
	n := MinFrameLen
	for i := range cfg.PMUs {
		n += cfg.PMUs[i].dataSize()
	}
	return n
}

func (p *PMU) dataSize() int {
	ph, an, fr := 4, 2, 2
	if p.Format&FormatPhasorFloat != 0 {
		ph = 8
	}
	if p.Format&FormatAnalogFloat != 0 {
		an = 4
	}
	if p.Format&FormatFreqFloat != 0 {
		fr = 4
	}
	return 2 + ph*len(p.Phasors) + 2*fr + an*len(p.Analogs) + 2*len(p.Digital)
}
