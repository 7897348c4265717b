package c37118

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Reader cuts a byte stream (TCP) into frames. It owns one buffer of MaxFrameLen bytes,
// allocated once: a FRAMESIZE field is checked against [MinFrameLen, MaxFrameLen] before
// any byte of the frame is read. When the stream is out of step it skips bytes up to the
// next SYNC word and counts them.
type Reader struct {
	r   *bufio.Reader
	buf []byte
	// Skipped counts bytes thrown away to find the next SYNC word.
	Skipped int64
}

// NewReader returns a Reader over r.
func NewReader(r io.Reader) *Reader {
	return &Reader{r: bufio.NewReaderSize(r, 64<<10), buf: make([]byte, MaxFrameLen)}
}

// Next returns the next frame and its header. The frame is valid until the next call.
// A frame whose CRC fails is consumed and reported with an error wrapping ErrCRC (the
// caller counts and drops it; the stream stays usable). Other errors come from the
// underlying reader (io.EOF at a clean end, a deadline, a reset).
func (r *Reader) Next() ([]byte, Header, error) {
	for {
		b, err := r.r.Peek(4)
		if err != nil {
			if errors.Is(err, io.EOF) && len(b) > 0 {
				err = io.ErrUnexpectedEOF
			}
			return nil, Header{}, err
		}
		n := int(binary.BigEndian.Uint16(b[2:]))
		if b[0] != syncByte || b[1]&0x80 != 0 || b[1]>>4&7 > uint8(TypeCfg3) || n < MinFrameLen {
			r.r.Discard(1)
			r.Skipped++
			continue
		}
		frame := r.buf[:n]
		if _, err := io.ReadFull(r.r, frame); err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return nil, Header{}, err
		}
		h, err := ParseHeader(frame)
		if err != nil {
			return nil, h, fmt.Errorf("frame dropped: %w", err)
		}
		return frame, h, nil
	}
}
