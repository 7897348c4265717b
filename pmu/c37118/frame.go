// Package c37118 encodes and decodes IEEE C37.118.2 synchrophasor frames: the common
// frame header, CRC-CCITT, command frames, header frames, configuration frames (CFG-1,
// CFG-2 and CFG-3, several PMUs per stream as a PDC sends them; a CFG-3 sent in
// fragments is reassembled by a Cfg3Assembler) and data frames decoded against the
// configuration in force. Version 1 (C37.118-2005) and
// version 2 (C37.118.2-2011) frames are both accepted.
//
// Every decoder checks each declared count against the bytes that remain before it
// allocates, so a frame costs at most a small multiple of its own size (≤ 65535 bytes,
// its FRAMESIZE field); decoders never panic on hostile input (fuzzed).
package c37118

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// FrameType is the frame type in bits 6–4 of the second SYNC byte.
type FrameType uint8

// Frame types.
const (
	TypeData    FrameType = 0
	TypeHeader  FrameType = 1
	TypeCfg1    FrameType = 2
	TypeCfg2    FrameType = 3
	TypeCommand FrameType = 4
	TypeCfg3    FrameType = 5
)

func (t FrameType) String() string {
	switch t {
	case TypeData:
		return "data"
	case TypeHeader:
		return "header"
	case TypeCfg1:
		return "CFG-1"
	case TypeCfg2:
		return "CFG-2"
	case TypeCommand:
		return "command"
	case TypeCfg3:
		return "CFG-3"
	}
	return fmt.Sprintf("type%d", uint8(t))
}

// Versions of the standard, in bits 3–0 of the second SYNC byte.
const (
	Version2005 = 1
	Version2011 = 2
)

const (
	syncByte = 0xAA
	// HeaderLen is the common header: SYNC, FRAMESIZE, IDCODE, SOC, FRACSEC.
	HeaderLen = 14
	// MinFrameLen is the smallest frame: the header and the CRC.
	MinFrameLen = HeaderLen + 2
	// MaxFrameLen is the largest frame FRAMESIZE can describe.
	MaxFrameLen = 65535
)

// Errors of frame validation. Each is wrapped with details; test with errors.Is.
var (
	// ErrSync: the first two bytes are not a C37.118 SYNC word; the stream is out of step.
	ErrSync = errors.New("c37118: bad SYNC word")
	// ErrSize: FRAMESIZE is below the minimum or disagrees with the bytes given.
	ErrSize = errors.New("c37118: bad FRAMESIZE")
	// ErrCRC: the CRC-CCITT does not match; the frame must be dropped.
	ErrCRC = errors.New("c37118: CRC mismatch")
	// ErrFormat: a field of the frame is inconsistent (counts, lengths, unknown type).
	ErrFormat = errors.New("c37118: malformed frame")
)

// Header is the common header of every frame.
type Header struct {
	Type    FrameType
	Version uint8  // Version2005 or Version2011
	IDCode  uint16 // data stream (PDC) or PMU ID
	SOC     uint32 // seconds since 1970-01-01 UTC
	// FracSec is the fraction of a second, in TIME_BASE units (24 bits).
	FracSec uint32
	// TimeQuality is FRACSEC's top byte: leap-second bits and the time quality code.
	TimeQuality uint8
}

// TimeNs returns SOC + FRACSEC/timeBase in nanoseconds since the epoch, in integer
// arithmetic (exact whenever timeBase divides 10^9·FRACSEC; otherwise rounded down).
// timeBase 0 is treated as 1.
func (h Header) TimeNs(timeBase uint32) int64 {
	if timeBase == 0 {
		timeBase = 1
	}
	return int64(h.SOC)*1_000_000_000 + int64(h.FracSec)*1_000_000_000/int64(timeBase)
}

// CRC returns the CRC-CCITT of b as C37.118 defines it: polynomial 0x1021, initial
// value 0xFFFF, no reflection, no final XOR.
func CRC(b []byte) uint16 {
	crc := uint16(0xFFFF)
	for _, c := range b {
		crc ^= uint16(c) << 8
		for i := 0; i < 8; i++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// ParseHeader validates a whole frame — SYNC, FRAMESIZE equal to len(frame), CRC —
// and returns its header. The payload is frame[HeaderLen : len(frame)-2].
func ParseHeader(frame []byte) (Header, error) {
	var h Header
	if len(frame) < MinFrameLen {
		return h, fmt.Errorf("%w: %d bytes, a frame has at least %d", ErrSize, len(frame), MinFrameLen)
	}
	if frame[0] != syncByte || frame[1]&0x80 != 0 {
		return h, fmt.Errorf("%w: %#02x %#02x", ErrSync, frame[0], frame[1])
	}
	if n := int(binary.BigEndian.Uint16(frame[2:])); n != len(frame) {
		return h, fmt.Errorf("%w: says %d bytes, frame has %d", ErrSize, n, len(frame))
	}
	want := binary.BigEndian.Uint16(frame[len(frame)-2:])
	if got := CRC(frame[:len(frame)-2]); got != want {
		return h, fmt.Errorf("%w: computed %#04x, frame carries %#04x", ErrCRC, got, want)
	}
	h.Type = FrameType(frame[1] >> 4 & 0x7)
	h.Version = frame[1] & 0x0F
	if h.Type > TypeCfg3 {
		return h, fmt.Errorf("%w: unknown frame type %d", ErrFormat, h.Type)
	}
	h.IDCode = binary.BigEndian.Uint16(frame[4:])
	h.SOC = binary.BigEndian.Uint32(frame[6:])
	fs := binary.BigEndian.Uint32(frame[10:])
	h.TimeQuality = uint8(fs >> 24)
	h.FracSec = fs & 0xFFFFFF
	return h, nil
}

// appendHeader starts a frame; finish fills FRAMESIZE and appends the CRC.
func appendHeader(dst []byte, h Header) []byte {
	v := h.Version
	if v == 0 {
		v = Version2011
	}
	dst = append(dst, syncByte, byte(h.Type&7)<<4|v&0x0F, 0, 0)
	dst = binary.BigEndian.AppendUint16(dst, h.IDCode)
	dst = binary.BigEndian.AppendUint32(dst, h.SOC)
	return binary.BigEndian.AppendUint32(dst, uint32(h.TimeQuality)<<24|h.FracSec&0xFFFFFF)
}

// finish completes the frame that starts at dst[start:]: FRAMESIZE and CRC.
func finish(dst []byte, start int) ([]byte, error) {
	n := len(dst) - start + 2
	if n > MaxFrameLen {
		return dst[:start], fmt.Errorf("%w: %d bytes, at most %d", ErrSize, n, MaxFrameLen)
	}
	binary.BigEndian.PutUint16(dst[start+2:], uint16(n))
	return binary.BigEndian.AppendUint16(dst, CRC(dst[start:])), nil
}

// Commands of a command frame's CMD field.
const (
	CmdDataOff  uint16 = 1
	CmdDataOn   uint16 = 2
	CmdSendHDR  uint16 = 3
	CmdSendCFG1 uint16 = 4
	CmdSendCFG2 uint16 = 5
	CmdSendCFG3 uint16 = 6
	CmdExtFrame uint16 = 8
)

// AppendCommand appends a command frame with the given CMD word (and optional
// extended-frame bytes) for the data stream idcode.
func AppendCommand(dst []byte, h Header, cmd uint16, ext []byte) ([]byte, error) {
	h.Type = TypeCommand
	start := len(dst)
	dst = appendHeader(dst, h)
	dst = binary.BigEndian.AppendUint16(dst, cmd)
	dst = append(dst, ext...)
	return finish(dst, start)
}

// ParseCommand returns the CMD word of a validated command frame.
func ParseCommand(frame []byte) (Header, uint16, error) {
	h, err := ParseHeader(frame)
	if err != nil {
		return h, 0, err
	}
	if h.Type != TypeCommand {
		return h, 0, fmt.Errorf("%w: a %v frame, not a command", ErrFormat, h.Type)
	}
	if len(frame) < MinFrameLen+2 {
		return h, 0, fmt.Errorf("%w: command frame without CMD", ErrFormat)
	}
	return h, binary.BigEndian.Uint16(frame[HeaderLen:]), nil
}

// AppendHeaderFrame appends a header frame carrying text (ASCII by the standard).
func AppendHeaderFrame(dst []byte, h Header, text string) ([]byte, error) {
	h.Type = TypeHeader
	start := len(dst)
	dst = appendHeader(dst, h)
	dst = append(dst, text...)
	return finish(dst, start)
}

// ParseHeaderFrame returns the text of a validated header frame.
func ParseHeaderFrame(frame []byte) (Header, string, error) {
	h, err := ParseHeader(frame)
	if err != nil {
		return h, "", err
	}
	if h.Type != TypeHeader {
		return h, "", fmt.Errorf("%w: a %v frame, not a header frame", ErrFormat, h.Type)
	}
	return h, string(frame[HeaderLen : len(frame)-2]), nil
}
