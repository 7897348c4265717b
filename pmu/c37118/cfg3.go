package c37118

import (
	"encoding/binary"
	"fmt"
	"time"
)

// A CFG-3 frame may be too large for one frame (FRAMESIZE ≤ 65535: CFG-3 names are up
// to 255 bytes and carry more per channel), so C37.118.2-2011 lets a PMU send it in
// fragments. Each fragment is a whole frame (SYNC … CHK, its own CRC) whose CONT_IDX
// says where it stands:
//
//	0x0000          the only frame: not fragmented
//	0x0001          the first fragment, more follow
//	0x0002…0xFFFE   the following fragments, numbered in order
//	0xFFFF          the last fragment
//
// The configuration's fields (TIME_BASE … DATA_RATE) are the fragments' bodies after
// CONT_IDX, concatenated in order.

// Continuation indexes of CFG-3's CONT_IDX.
const (
	ContOnly  uint16 = 0
	ContFirst uint16 = 1
	ContLast  uint16 = 0xFFFF
)

// ErrFragment: a CFG-3 fragment does not fit the configuration being reassembled (out
// of order, another stream, over a limit, too late). The pieces collected so far are
// discarded; the caller counts the error and asks for CFG-3 again. It wraps ErrFormat.
var ErrFragment = fmt.Errorf("%w: CFG-3 fragment refused", ErrFormat)

// AppendFragments encodes a CFG-3 configuration as fragments of at most maxFrame bytes
// each (at least MinFrameLen+3), the way a PMU sends one too large for a frame. A
// configuration that fits one frame still comes as ≥ 2 fragments when maxFrame is
// smaller than it; one that fits maxFrame comes as one frame with CONT_IDX 0. Every
// fragment carries cfg's header (IDCODE, SOC, FRACSEC).
func (cfg *Config) AppendFragments(maxFrame int) ([][]byte, error) {
	if cfg.Type != TypeCfg3 {
		return nil, fmt.Errorf("%w: only a CFG-3 is sent in fragments, not a %v", ErrFormat, cfg.Type)
	}
	if maxFrame > MaxFrameLen {
		maxFrame = MaxFrameLen
	}
	const overhead = HeaderLen + 2 + 2 // header, CONT_IDX, CHK
	if maxFrame < overhead+1 {
		return nil, fmt.Errorf("%w: fragments of %d bytes cannot carry any configuration (at least %d)", ErrSize, maxFrame, overhead+1)
	}
	body, err := cfg.appendBody(nil)
	if err != nil {
		return nil, err
	}
	per := maxFrame - overhead
	n := (len(body) + per - 1) / per
	if n == 1 {
		b, err := cfg.Append(nil)
		return [][]byte{b}, err
	}
	if n > int(ContLast)-1 {
		return nil, fmt.Errorf("%w: %d fragments, at most %d", ErrSize, n, int(ContLast)-1)
	}
	out := make([][]byte, 0, n)
	for i := 0; i < n; i++ {
		idx := uint16(i + 1)
		if i == n-1 {
			idx = ContLast
		}
		chunk := body[i*per : min((i+1)*per, len(body))]
		h := cfg.Header
		h.Type = TypeCfg3
		f := appendHeader(make([]byte, 0, overhead+len(chunk)), h)
		f = binary.BigEndian.AppendUint16(f, idx)
		f = append(f, chunk...)
		if f, err = finish(f, 0); err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	return out, nil
}

// Cfg3Limits bound the reassembly of a fragmented CFG-3. Zero fields take the defaults.
type Cfg3Limits struct {
	// MaxBytes caps the reassembled configuration's fields; 0 means 1 MiB.
	MaxBytes int
	// MaxFragments caps the fragments of one configuration; 0 means 64.
	MaxFragments int
	// Timeout is how long after its first fragment a configuration must be complete;
	// 0 means 30s.
	Timeout time.Duration
}

func (l Cfg3Limits) withDefaults() Cfg3Limits {
	if l.MaxBytes == 0 {
		l.MaxBytes = 1 << 20
	}
	if l.MaxFragments == 0 {
		l.MaxFragments = 64
	}
	if l.Timeout == 0 {
		l.Timeout = 30 * time.Second
	}
	return l
}

// Cfg3Assembler reassembles CFG-3 frames sent in fragments. It holds at most one
// configuration in progress, and never more than Limits.MaxBytes of it: each
// fragment's size is checked before its bytes are kept. Not safe for concurrent use.
type Cfg3Assembler struct {
	Limits Cfg3Limits

	buf     []byte
	hdr     Header
	n       int    // fragments collected; 0: none in progress
	next    uint16 // CONT_IDX expected next (ContLast may come instead)
	started time.Time

	// Discarded counts unfinished configurations abandoned because a new one began or
	// Limits.Timeout passed; LastDiscard says why the last one was.
	Discarded   int64
	LastDiscard error
}

func (a *Cfg3Assembler) discard(why error) {
	a.Discarded++
	a.LastDiscard = why
	a.Reset()
}

// InProgress reports whether fragments are waiting for the rest of their configuration.
func (a *Cfg3Assembler) InProgress() bool { return a.n > 0 }

// Reset discards a configuration in progress.
func (a *Cfg3Assembler) Reset() {
	a.buf, a.n, a.next = a.buf[:0], 0, 0
	if cap(a.buf) > 64<<10 {
		a.buf = nil // do not keep a large buffer for the stream's lifetime
	}
}

// Add takes a CFG-3 frame received at now. It returns the configuration when frame
// completes one (or is not fragmented: CONT_IDX 0), nil while more fragments are due,
// and an error wrapping ErrFragment (or ErrFormat for a malformed configuration, or
// ErrCRC…) when the piece cannot be used: the configuration in progress is then
// discarded. A first fragment (or an unfragmented CFG-3) always starts anew; an
// unfinished configuration it replaces, or one past Limits.Timeout, is counted in
// Discarded.
func (a *Cfg3Assembler) Add(frame []byte, now time.Time) (*Config, error) {
	lim := a.Limits.withDefaults()
	h, err := ParseHeader(frame)
	if err != nil {
		return nil, err
	}
	if h.Type != TypeCfg3 {
		return nil, fmt.Errorf("%w: a %v frame, not a CFG-3", ErrFormat, h.Type)
	}
	body := frame[HeaderLen : len(frame)-2]
	if len(body) < 2 {
		return nil, fmt.Errorf("%w: CFG-3 without CONT_IDX", ErrFormat)
	}
	idx := binary.BigEndian.Uint16(body)
	body = body[2:]
	if a.n > 0 && now.Sub(a.started) > lim.Timeout {
		a.discard(fmt.Errorf("%w: the configuration begun %v ago (%d fragments) was not finished within %v",
			ErrFragment, now.Sub(a.started).Round(time.Millisecond), a.n, lim.Timeout))
	}
	switch idx {
	case ContOnly:
		if a.n > 0 {
			a.discard(fmt.Errorf("%w: an unfragmented CFG-3 arrived while %d fragments waited", ErrFragment, a.n))
		}
		return parseConfigBody(h, body)
	case ContFirst:
		if a.n > 0 {
			a.discard(fmt.Errorf("%w: a new first fragment arrived while %d fragments waited", ErrFragment, a.n))
		}
		return nil, a.keep(lim, h, body, now)
	}
	if a.n == 0 {
		return nil, fmt.Errorf("%w: CONT_IDX %#04x without a first fragment", ErrFragment, idx)
	}
	if h.IDCode != a.hdr.IDCode || h.Version != a.hdr.Version {
		err := fmt.Errorf("%w: fragment of IDCODE %d version %d amid one of IDCODE %d version %d", ErrFragment, h.IDCode, h.Version, a.hdr.IDCode, a.hdr.Version)
		a.Reset()
		return nil, err
	}
	if idx != ContLast && idx != a.next {
		err := fmt.Errorf("%w: CONT_IDX %d, expected %d or %#04x (a fragment lost or out of order)", ErrFragment, idx, a.next, ContLast)
		a.Reset()
		return nil, err
	}
	if err := a.keep(lim, h, body, now); err != nil {
		return nil, err
	}
	if idx != ContLast {
		return nil, nil
	}
	cfg, err := parseConfigBody(a.hdr, a.buf)
	a.Reset()
	if err != nil {
		return nil, fmt.Errorf("reassembled CFG-3: %w", err)
	}
	return cfg, nil
}

// keep appends one fragment's body after checking the limits.
func (a *Cfg3Assembler) keep(lim Cfg3Limits, h Header, body []byte, now time.Time) error {
	if a.n+1 > lim.MaxFragments {
		err := fmt.Errorf("%w: more than %d fragments", ErrFragment, lim.MaxFragments)
		a.Reset()
		return err
	}
	if len(a.buf)+len(body) > lim.MaxBytes {
		err := fmt.Errorf("%w: more than %d bytes of configuration", ErrFragment, lim.MaxBytes)
		a.Reset()
		return err
	}
	if a.n == 0 {
		a.hdr, a.started, a.next = h, now, ContFirst
	}
	a.buf = append(a.buf, body...)
	a.n++
	a.next++
	return nil
}
