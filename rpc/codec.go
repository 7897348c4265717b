package rpc

import (
	"bytes"
	"context"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
)

// Encode returns the msgpack encoding of v, with integers in their most
// compact form. Types may implement msgpack.CustomEncoder for speed.
func Encode(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := msgpack.GetEncoder()
	enc.Reset(&buf)
	enc.UseCompactInts(true)
	err := enc.Encode(v)
	msgpack.PutEncoder(enc)
	if err != nil {
		return nil, fmt.Errorf("rpc: encode %T: %w", v, err)
	}
	return buf.Bytes(), nil
}

// Decode decodes the msgpack value in b into v, which must be a pointer.
// It runs Validate first, refuses a message that would allocate more than
// DecodeCostFactor bytes per byte of b in v's type, and turns a panic in the
// decoder into an error, so b may come from anyone. A type with its own
// decoder (msgpack.CustomDecoder or Unmarshaler) is charged its wire bytes
// and must keep its own allocations within the same bound. Types may implement msgpack.CustomDecoder for
// speed. Its errors carry CodeBadRequest: a handler may return them as they
// are.
func Decode(b []byte, v any) (err error) {
	if err := Validate(b); err != nil {
		return &decodeError{err}
	}
	defer func() {
		if r := recover(); r != nil {
			err = &decodeError{fmt.Errorf("rpc: decode into %T: panic: %v", v, r)}
		}
	}()
	if err := checkDecodeCost(b, v); err != nil {
		return &decodeError{err}
	}
	// Not msgpack.Unmarshal: it preallocates values through a goroutine per
	// pointer type that holds 256 of them for ever.
	dec := msgpack.GetDecoder()
	dec.Reset(bytes.NewReader(b))
	err = dec.Decode(v)
	msgpack.PutDecoder(dec) // skipped after a panic: that decoder is dropped
	if err != nil {
		return &decodeError{fmt.Errorf("rpc: decode into %T: %w", v, err)}
	}
	return nil
}

// decodeError is an error from Decode.
type decodeError struct{ err error }

func (e *decodeError) Error() string     { return e.err.Error() }
func (e *decodeError) Unwrap() error     { return e.err }
func (e *decodeError) ErrorCode() string { return CodeBadRequest }

// Invoke calls method at addr with req encoded, and decodes the response into
// resp unless resp is nil. Its errors are those of Call, or of Encode and
// Decode.
func Invoke(ctx context.Context, c *Client, addr, method string, req, resp any) error {
	body, err := Encode(req)
	if err != nil {
		return err
	}
	out, err := c.Call(ctx, addr, method, body)
	if err != nil || resp == nil {
		return err
	}
	if err := Decode(out, resp); err != nil {
		// %v, not %w: a bad response is no bad request of our caller's, so
		// CodeBadRequest must not travel on with it.
		return fmt.Errorf("rpc: response of %s from %s: %v", method, addr, err)
	}
	return nil
}
