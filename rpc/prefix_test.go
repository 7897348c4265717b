package rpc

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"sync/atomic"
	"testing"
)

// requestFrame returns a whole frame (header included) carrying a request for
// method with body.
func requestFrame(id uint64, method string, body []byte) []byte {
	req := envelope{kind: kindRequest, id: id, method: method, body: body}
	frame := req.appendTo(beginFrame(nil))
	if err := finishFrame(frame, 1<<30); err != nil {
		panic(err)
	}
	return frame
}

// countingReader counts the bytes read from it.
type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// prefixReader returns a frame reader over stream that vets requests as a
// server with wideRequest's method registered through HandleDecoded does,
// and counts what it reserves (what the server would buffer and charge).
func prefixReader(stream []byte, reserved *int) (*frameReader, *countingReader) {
	s := NewServer(NewMemNetwork().Transport(), Config{})
	s.HandleDecoded("wide", (*wideRequest)(nil), echo)
	s.Handle("raw", echo)
	cr := &countingReader{r: bytes.NewReader(stream)}
	fr := newFrameReader(cr, 4<<20)
	fr.check = s.checkRequest
	fr.reserve = func(n int) error { *reserved += n; return nil }
	return fr, cr
}

// TestPrefixRefusesNils: a 4 MiB request of nils, its lengths honest, to be
// decoded into 152-byte structs, is refused from its first bytes: nothing of
// it is buffered or charged to the byte budget (a server without the check
// reserves and buffers all 4 MiB, and Validate and the cost walk then go over
// each of its four million elements), and the request after it on the same
// stream is read intact.
func TestPrefixRefusesNils(t *testing.T) {
	body := nils("Writes", 4<<20-64)
	next := []byte("the next request")
	stream := append(requestFrame(7, "wide", body), requestFrame(8, "wide", next)...)
	var reserved int
	fr, _ := prefixReader(stream, &reserved)
	var err error
	grew := allocated(func() { _, err = fr.next() })
	var refused *refusal
	if !errors.As(err, &refused) || refused.id != 7 || !strings.Contains(err.Error(), "DecodeCostFactor") {
		t.Fatalf("next() = %v, want a refusal of request 7 naming DecodeCostFactor", err)
	}
	if reserved != 0 {
		t.Errorf("refusing a %d-byte frame reserved %d bytes of the budget, want 0", len(body), reserved)
	}
	if grew > 64<<10 {
		t.Errorf("refusing a %d-byte frame allocated %d bytes", len(body), grew)
	}
	b, err := fr.next()
	if err != nil {
		t.Fatalf("the request after the refused one: %v", err)
	}
	var req envelope
	if err := req.decode(b); err != nil || req.id != 8 || !bytes.Equal(req.body, next) {
		t.Fatalf("the request after the refused one: id %d body %q err %v", req.id, req.body, err)
	}
}

// TestPrefixRefusesLater: a request that hides its costly array behind a
// cheap one is refused when the bytes read reach it, at a growth of the
// frame's buffer, not after the whole frame.
func TestPrefixRefusesLater(t *testing.T) {
	// {"Reads": [100,000 nil pointers], "Writes": [3 Mi nils]}: the first
	// costs 8 bytes a byte, within the bound; the second 152.
	body := []byte{0x82, 0xa5, 'R', 'e', 'a', 'd', 's', 0xdd}
	body = binary.BigEndian.AppendUint32(body, 100_000)
	body = append(body, bytes.Repeat([]byte{0xc0}, 100_000)...)
	body = append(body, 0xa6, 'W', 'r', 'i', 't', 'e', 's', 0xdd)
	body = binary.BigEndian.AppendUint32(body, 3<<20)
	body = append(body, bytes.Repeat([]byte{0xc0}, 3<<20)...)
	var reserved int
	stream := requestFrame(1, "wide", body)
	fr, cr := prefixReader(stream, &reserved)
	_, err := fr.next()
	if !errors.As(err, new(*refusal)) {
		t.Fatalf("next() = %v, want a refusal", err)
	}
	if reserved > 256<<10 {
		t.Errorf("a %d-byte frame refused after %d bytes reserved, want at most 256 KiB", len(body), reserved)
	}
	if cr.n != len(stream) {
		t.Errorf("read %d bytes of the stream, want the whole frame (%d) read past", cr.n, len(stream))
	}
}

// TestPrefixPasses: honest requests, requests to methods registered with
// Handle, and bodies whose type cannot cost per element go through whole.
func TestPrefixPasses(t *testing.T) {
	honest := wideRequest{}
	for i := range 3000 {
		honest.Writes = append(honest.Writes, wide{Series: "pmu17/bus3/vang", T: []int64{int64(i)}, V: []float64{1.5}})
	}
	for _, c := range []struct {
		method string
		body   []byte
	}{
		{"wide", mustEncode(t, honest)},
		{"raw", nils("Writes", 1<<20)},              // Handle: not vetted
		{"unknown", nils("Writes", 1<<20)},          // answered "unknown method" by the worker
		{"wide", bytes.Repeat([]byte{0xc0}, 1<<20)}, // malformed: Decode says why
	} {
		var reserved int
		fr, _ := prefixReader(requestFrame(1, c.method, c.body), &reserved)
		b, err := fr.next()
		if err != nil {
			t.Errorf("%s, %d bytes: %v", c.method, len(c.body), err)
			continue
		}
		var req envelope
		if err := req.decode(b); err != nil || !bytes.Equal(req.body, c.body) {
			t.Errorf("%s: body not read intact: %v", c.method, err)
		}
	}
}

// TestPrefixRefusalServed: over TCP, a client's request of nils gets a
// CodeBadRequest error naming DecodeCostFactor, its handler never runs, and
// the same connection serves the next call.
func TestPrefixRefusalServed(t *testing.T) {
	tr := NewTCPTransport()
	var calls atomic.Int32
	s := NewServer(tr, Config{})
	s.HandleDecoded("wide", (*wideRequest)(nil), func(_ context.Context, b []byte) ([]byte, error) {
		calls.Add(1)
		var req wideRequest
		if err := Decode(b, &req); err != nil {
			return nil, err
		}
		return []byte("ok"), nil
	})
	addr, err := s.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ct := &countingTransport{Transport: tr}
	c := newClient(t, ct, Config{})
	_, err = c.Call(context.Background(), addr.String(), "wide", nils("Writes", 1<<20))
	var re *RemoteError
	if !errors.As(err, &re) || re.Code != CodeBadRequest || !strings.Contains(re.Msg, "DecodeCostFactor") {
		t.Fatalf("a request of nils: %v, want a %s error naming DecodeCostFactor", err, CodeBadRequest)
	}
	if calls.Load() != 0 {
		t.Errorf("the handler ran %d times for a request refused from its first bytes", calls.Load())
	}
	out, err := c.Call(context.Background(), addr.String(), "wide", mustEncode(t, wideRequest{Writes: []wide{{Series: "x"}}}))
	if err != nil || string(out) != "ok" {
		t.Fatalf("the next call: %q, %v", out, err)
	}
	if n := ct.dials.Load(); n != 1 {
		t.Errorf("%d dials, want 1: the refusal kept the connection", n)
	}
}
