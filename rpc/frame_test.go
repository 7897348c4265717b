package rpc

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"runtime"
	"testing"
	"testing/iotest"
)

func TestFrames(t *testing.T) {
	payloads := [][]byte{{}, []byte("a"), bytes.Repeat([]byte{1}, frameChunk), bytes.Repeat([]byte{2}, 3*frameChunk+5)}
	var stream []byte
	for _, p := range payloads {
		f := append(beginFrame(nil), p...)
		if err := finishFrame(f, 1<<20); err != nil {
			t.Fatal(err)
		}
		stream = append(stream, f...)
	}
	// One byte at a time, as a slow network delivers them.
	fr := newFrameReader(iotest.OneByteReader(bytes.NewReader(stream)), 1<<20)
	for i, want := range payloads {
		got, err := fr.next()
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("frame %d: got %d bytes, %v; want %d bytes", i, len(got), err, len(want))
		}
	}
	if _, err := fr.next(); err != io.EOF {
		t.Errorf("after the last frame: %v, want io.EOF", err)
	}

	if err := finishFrame(append(beginFrame(nil), make([]byte, 11)...), 10); !errors.Is(err, ErrFrameTooLarge) {
		t.Errorf("finishFrame over the limit: %v", err)
	}
}

func TestFrameReaderErrors(t *testing.T) {
	tests := []struct {
		name  string
		in    []byte
		limit int
		want  error
	}{
		{"over the limit", []byte{0, 0, 0, 11}, 10, ErrFrameTooLarge},
		{"4 GiB on 32-bit", []byte{0xff, 0xff, 0xff, 0xff}, 1 << 20, ErrFrameTooLarge},
		{"header cut short", []byte{0, 0}, 10, io.ErrUnexpectedEOF},
		{"payload cut short", []byte{0, 0, 0, 5, 1, 2}, 10, io.ErrUnexpectedEOF},
		{"nothing", nil, 10, io.EOF},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := newFrameReader(bytes.NewReader(tt.in), tt.limit).next()
			if !errors.Is(err, tt.want) {
				t.Errorf("got %v, want %v", err, tt.want)
			}
		})
	}
}

// TestFrameReaderLiar: a peer that declares a large frame and sends a few
// bytes costs a small buffer, not the declared size.
func TestFrameReaderLiar(t *testing.T) {
	in := append(binary.BigEndian.AppendUint32(nil, 16<<20), "short"...)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := newFrameReader(bytes.NewReader(in), 16<<20).next()
	runtime.ReadMemStats(&after)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("got %v, want io.ErrUnexpectedEOF", err)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 2*frameChunk {
		t.Errorf("a 5-byte frame that declared 16 MiB cost %d bytes", grew)
	}
}

// FuzzFrameReader: the reader never panics, never returns a frame over the
// limit, and the frames it returns, framed again, are the stream it read.
func FuzzFrameReader(f *testing.F) {
	f.Add([]byte{0, 0, 0, 1, 'x', 0, 0, 0, 0})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0, 0, 1, 0, 1, 2, 3})
	f.Fuzz(func(t *testing.T, stream []byte) {
		const limit = 1024
		fr := newFrameReader(bytes.NewReader(stream), limit)
		var reframed []byte
		for {
			p, err := fr.next()
			if err != nil {
				break
			}
			if len(p) > limit {
				t.Fatalf("frame of %d bytes over the limit %d", len(p), limit)
			}
			f := append(beginFrame(nil), p...)
			if err := finishFrame(f, limit); err != nil {
				t.Fatal(err)
			}
			reframed = append(reframed, f...)
		}
		if !bytes.HasPrefix(stream, reframed) {
			t.Fatalf("frames read do not reproduce the stream")
		}
	})
}

// readCounter counts the reads made of it.
type readCounter struct {
	r     io.Reader
	reads int
}

func (c *readCounter) Read(p []byte) (int, error) {
	c.reads++
	return c.r.Read(p)
}

// TestFrameSkipReadsInChunks: a frame its check refuses is read past in chunks of
// skipChunk, not of the reader's 4 KiB buffer, so a refused 1 MiB frame costs the
// server few reads of its connection; the frame after it is read whole, and one cut
// short while skipped says so.
func TestFrameSkipReadsInChunks(t *testing.T) {
	refused := append(beginFrame(nil), bytes.Repeat([]byte{0xc0}, 1<<20)...)
	if err := finishFrame(refused, 4<<20); err != nil {
		t.Fatal(err)
	}
	next := append(beginFrame(nil), "next"...)
	if err := finishFrame(next, 4<<20); err != nil {
		t.Fatal(err)
	}
	cr := &readCounter{r: bytes.NewReader(append(append([]byte(nil), refused...), next...))}
	fr := newFrameReader(cr, 4<<20)
	no := errors.New("refused")
	fr.check = func([]byte, int) error { return no }
	_, err := fr.next()
	var sf *skippedFrame
	if !errors.As(err, &sf) || !errors.Is(err, no) {
		t.Fatalf("refused frame: %v, want a *skippedFrame", err)
	}
	if most := (1<<20)/skipChunk + 3; cr.reads > most {
		t.Errorf("skipping 1 MiB took %d reads, more than %d (chunks of %d bytes)", cr.reads, most, skipChunk)
	}
	fr.check = nil
	if got, err := fr.next(); err != nil || string(got) != "next" {
		t.Fatalf("the frame after the skipped one: %q, %v", got, err)
	}

	fr = newFrameReader(bytes.NewReader(refused[:len(refused)/2]), 4<<20)
	fr.check = func([]byte, int) error { return no }
	if _, err := fr.next(); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("a refused frame cut short: %v, want io.ErrUnexpectedEOF", err)
	}
}
