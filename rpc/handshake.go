package rpc

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"time"
)

// The handshake opens every connection. The client sends a hello: the magic
// string, the protocol version it speaks and the oldest one it still speaks
// (both big-endian uint16). The server answers with its own hello and a
// status byte. Both sides check that their version ranges overlap, so each
// side reports a mismatch in its own words, and a client that reached
// something other than a tsdht server finds out from the magic.
const (
	handshakeMagic = "TSDHT"
	helloLen       = len(handshakeMagic) + 4
	statusRefused  = 0
	statusOK       = 1
)

type hello struct {
	version, min uint16
}

var ourHello = hello{version: ProtocolVersion, min: minProtocolVersion}

func (h hello) append(dst []byte) []byte {
	dst = append(dst, handshakeMagic...)
	dst = binary.BigEndian.AppendUint16(dst, h.version)
	return binary.BigEndian.AppendUint16(dst, h.min)
}

func parseHello(b []byte) (hello, error) {
	if !bytes.Equal(b[:len(handshakeMagic)], []byte(handshakeMagic)) {
		return hello{}, fmt.Errorf("bad magic %q: not a tsdht rpc peer", b[:len(handshakeMagic)])
	}
	b = b[len(handshakeMagic):]
	return hello{version: binary.BigEndian.Uint16(b), min: binary.BigEndian.Uint16(b[2:])}, nil
}

// compatible reports whether a peer speaking versions [min, version] can talk
// to us; if not, the error says what each side speaks.
func (h hello) compatible() error {
	if h.version < ourHello.min || h.min > ourHello.version {
		return fmt.Errorf("%w: peer speaks rpc protocol v%d, we speak v%d", ErrVersionMismatch, h.version, ourHello.version)
	}
	return nil
}

// clientHandshake runs the client's side of the handshake on a new conn.
func clientHandshake(conn net.Conn, timeout time.Duration) error {
	if err := conn.SetDeadline(time.Now().Add(timeout)); err != nil {
		return err
	}
	if _, err := conn.Write(ourHello.append(nil)); err != nil {
		return fmt.Errorf("rpc: handshake: %w", err)
	}
	var reply [helloLen + 1]byte
	if _, err := io.ReadFull(conn, reply[:]); err != nil {
		return fmt.Errorf("rpc: handshake: %w", err)
	}
	peer, err := parseHello(reply[:helloLen])
	if err != nil {
		return fmt.Errorf("rpc: handshake: %w", err)
	}
	if err := peer.compatible(); err != nil {
		return err
	}
	switch reply[helloLen] {
	case statusOK:
	case statusRefused:
		return fmt.Errorf("%w: peer refused rpc protocol v%d", ErrVersionMismatch, ourHello.version)
	default:
		return fmt.Errorf("rpc: handshake: bad status byte %#x", reply[helloLen])
	}
	return conn.SetDeadline(time.Time{})
}

// serverHandshake runs the server's side of the handshake on an accepted
// conn. A client whose versions do not overlap ours is told so before the
// error is returned; one that sent no valid hello gets no answer.
func serverHandshake(conn net.Conn, timeout time.Duration) error {
	if err := conn.SetDeadline(time.Now().Add(timeout)); err != nil {
		return err
	}
	var buf [helloLen]byte
	if _, err := io.ReadFull(conn, buf[:]); err != nil {
		return fmt.Errorf("rpc: handshake: %w", err)
	}
	peer, err := parseHello(buf[:])
	if err != nil {
		return fmt.Errorf("rpc: handshake: %w", err)
	}
	if err := peer.compatible(); err != nil {
		// Best effort: the client learns why, and the conn is dropped anyway.
		_, _ = conn.Write(append(ourHello.append(nil), statusRefused))
		return err
	}
	if _, err := conn.Write(append(ourHello.append(nil), statusOK)); err != nil {
		return fmt.Errorf("rpc: handshake: %w", err)
	}
	return conn.SetDeadline(time.Time{})
}
