package rpc

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
)

// frameHeaderLen is the size of a frame's length prefix: a big-endian uint32.
const frameHeaderLen = 4

// frameChunk is what a frameReader allocates for a frame before its bytes
// arrive; it grows the buffer with the bytes that do. A peer that declares a
// large frame and sends little costs this much, not the declared length.
const frameChunk = 64 << 10

// frameReader reads length-prefixed frames from a stream.
type frameReader struct {
	r     *bufio.Reader
	limit int // largest payload accepted, in bytes
	hdr   [frameHeaderLen]byte

	// reserve, if set, is called with n before the frame's buffer grows by
	// n bytes (the first frameChunk included); an error from it is returned
	// instead of the frame. The server charges frames to its byte budgets
	// with it, so a frame holds budget for the bytes that arrived (at most
	// twice those, plus one chunk), never for the length it declared.
	reserve func(n int) error

	// check, if set, vets a frame before its bytes are buffered: it is called
	// with the frame's first bytes (as many as the reader's own buffer holds)
	// and its length, then again with the bytes that arrived each time the
	// frame's buffer is to grow; frames that fit in the reader's buffer are
	// not checked. An error from it skips the frame: its remaining bytes are
	// read and dropped without being buffered, so the stream stays in step,
	// and next returns a *skippedFrame holding the error.
	check func(prefix []byte, n int) error
}

// skippedFrame is what frameReader.next returns for a frame its check
// refused, the frame read past.
type skippedFrame struct{ err error }

func (e *skippedFrame) Error() string { return e.err.Error() }
func (e *skippedFrame) Unwrap() error { return e.err }

func newFrameReader(r io.Reader, limit int) *frameReader {
	br := readerPool.Get().(*bufio.Reader)
	br.Reset(r)
	return &frameReader{r: br, limit: limit}
}

// readerPool holds the 4 KiB read buffers of frame readers released (release): a
// server under a flood of short-lived connections — thousands a minute of hostile
// ones, each handshaked and dropped — reuses them instead of making one for each.
var readerPool = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 4<<10) }}

// release gives the reader's buffer back for another connection's reader; fr is not
// to be used again. Whatever it had buffered is dropped.
func (fr *frameReader) release() {
	fr.r.Reset(nil)
	readerPool.Put(fr.r)
	fr.r = nil
}

// buffered reports whether the next frame is in the reader's buffer whole, so
// that next reads nothing from the connection.
func (fr *frameReader) buffered() bool {
	n := fr.r.Buffered()
	if n < frameHeaderLen {
		return false
	}
	hdr, _ := fr.r.Peek(frameHeaderLen) // cannot fail: the bytes are buffered
	return uint64(binary.BigEndian.Uint32(hdr)) <= uint64(n-frameHeaderLen)
}

// next returns the payload of the next frame in a new buffer that the caller
// owns. A declared length over the limit is refused before anything is
// allocated; the stream is then out of sync and must be dropped.
func (fr *frameReader) next() ([]byte, error) {
	if _, err := io.ReadFull(fr.r, fr.hdr[:]); err != nil {
		return nil, err
	}
	declared := binary.BigEndian.Uint32(fr.hdr[:])
	if uint64(declared) > uint64(fr.limit) {
		return nil, fmt.Errorf("%w: peer declared %d bytes, limit is %d", ErrFrameTooLarge, declared, fr.limit)
	}
	n := int(declared) // fits: declared <= limit <= MaxInt32
	if fr.check != nil && n > fr.r.Size() {
		prefix, err := fr.r.Peek(fr.r.Size())
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
		if err := fr.check(prefix, n); err != nil {
			return nil, fr.skip(n, err)
		}
	}
	var buf []byte
	room := 0 // the capacity reserved and asked for; cap(buf) may round it up
	for len(buf) < n {
		if len(buf) == room {
			if fr.check != nil && room > 0 {
				if err := fr.check(buf, n); err != nil {
					return nil, fr.skip(n-len(buf), err)
				}
			}
			// Grow with the data that arrived, doubling, never past n.
			grow := min(n-room, max(room, frameChunk))
			if fr.reserve != nil {
				if err := fr.reserve(grow); err != nil {
					return nil, err
				}
			}
			room += grow
			nb := make([]byte, len(buf), room)
			copy(nb, buf)
			buf = nb
		}
		m, err := fr.r.Read(buf[len(buf):room])
		buf = buf[:len(buf)+m]
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
	if buf == nil {
		buf = []byte{}
	}
	return buf, nil
}

// skipChunk is the most of a skipped frame's bytes read at once, past the
// reader's own 4 KiB buffer: a refused 1 MiB frame then costs the server 32
// reads of the connection (and as many wake-ups) instead of 256. A pooled
// buffer each for the connections skipping at once: at most MaxConns × 32 KiB.
const skipChunk = 32 << 10

var skipBufs = sync.Pool{New: func() any { b := make([]byte, skipChunk); return &b }}

// skip reads past the n bytes that remain of a frame that check refused with
// err, without keeping them, and returns a *skippedFrame.
func (fr *frameReader) skip(n int, err error) error {
	buffered := min(n, fr.r.Buffered())
	_, _ = fr.r.Discard(buffered) // cannot fail: the bytes are buffered
	n -= buffered
	if n > 0 {
		bp := skipBufs.Get().(*[]byte)
		defer skipBufs.Put(bp)
		for n > 0 {
			// With its buffer empty, bufio reads a chunk of at least its size
			// straight from the connection, never past the frame.
			m, rerr := fr.r.Read((*bp)[:min(n, len(*bp))])
			n -= m
			if rerr != nil && n > 0 {
				if errors.Is(rerr, io.EOF) {
					rerr = io.ErrUnexpectedEOF
				}
				return rerr
			}
		}
	}
	return &skippedFrame{err}
}

// beginFrame appends room for a frame header to dst; the payload is appended
// after it and finishFrame fills the header in. Building the whole frame in
// one buffer lets it go out in one write.
func beginFrame(dst []byte) []byte {
	return append(dst, make([]byte, frameHeaderLen)...)
}

// finishFrame writes the header of frame, which beginFrame started, or
// returns ErrFrameTooLarge if its payload is over limit bytes.
func finishFrame(frame []byte, limit int) error {
	n := len(frame) - frameHeaderLen
	if n > limit {
		return fmt.Errorf("%w: %d bytes, limit is %d", ErrFrameTooLarge, n, limit)
	}
	binary.BigEndian.PutUint32(frame, uint32(n))
	return nil
}
