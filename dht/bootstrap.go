package dht

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"
)

// In RoutingKademlia mode a node runs no memberlist. Its gossip address
// serves the bootstrap handshake alone, so that --join names the same
// addresses in both modes: a joining node sends its metadata, the seed checks
// it as memberlist's merge would (protocol, quantum, ID format, routing mode)
// and answers with its own metadata, which names its RPC address; the joiner
// checks that in turn, then talks to the seed over RPC (ping, FIND_NODE).
//
// Request:  bootMagic, a uvarint length, the joiner's metadata (encodeMeta).
// Response: a status byte (bootOK, bootRefused), a uvarint length, and the
// seed's metadata or, if refused, the reason as text.

// bootMagic opens a bootstrap request. Memberlist reads its first byte as a
// message type it does not know and closes the connection.
const bootMagic = "tsdht-boot 1\n"

const (
	bootOK      = 0
	bootRefused = 1
	// maxBootPayload bounds what either side reads: metadata stays under
	// memberlist's 512 bytes, and a refusal's text under this.
	maxBootPayload = 1024
	// maxBootConns bounds the handshakes a node serves at once; more are
	// closed at once (the joiner retries).
	maxBootConns = 16
)

// serveBootstrap answers bootstrap handshakes on ln until it is closed.
func (n *Node) serveBootstrap(ln net.Listener) {
	defer n.wg.Done()
	sem := make(chan struct{}, maxBootConns)
	for {
		c, err := ln.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				n.logger.Warn("dht: bootstrap listener failed", "err", err)
			}
			return
		}
		select {
		case sem <- struct{}{}:
		default:
			c.Close()
			continue
		}
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			defer func() { <-sem }()
			n.answerBootstrap(c)
		}()
	}
}

// answerBootstrap serves one handshake: every read is under a deadline and
// every length checked before anything is allocated.
func (n *Node) answerBootstrap(c net.Conn) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(n.cfg.TCPTimeout))
	br := bufio.NewReaderSize(c, 64)
	meta, err := readBootRequest(br)
	if err != nil {
		return // not a tsdht node, or a broken one: nothing to answer
	}
	p, _, err := decodeMeta(meta)
	if err == nil {
		err = n.checkCompatible(memberlistName(p.PeerID()), meta)
	}
	if err != nil {
		_ = writeBootFrame(c, bootRefused, []byte(err.Error()))
		return
	}
	_ = writeBootFrame(c, bootOK, encodeMeta(n.Self(), n.localMeta()))
}

// askSeed runs the handshake with the seed at addr and returns the seed's
// Peer. A refusal wraps ErrIncompatible.
func (n *Node) askSeed(addr string) (Peer, error) {
	d := net.Dialer{Timeout: n.cfg.TCPTimeout}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return Peer{}, fmt.Errorf("seed %s: %w", addr, err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(n.cfg.TCPTimeout))
	meta := encodeMeta(n.Self(), n.localMeta())
	req := binary.AppendUvarint([]byte(bootMagic), uint64(len(meta)))
	req = append(req, meta...)
	if _, err := c.Write(req); err != nil {
		return Peer{}, fmt.Errorf("seed %s: %w", addr, err)
	}
	br := bufio.NewReaderSize(c, 64)
	status, payload, err := readBootFrame(br)
	if err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || isConnReset(err) {
			return Peer{}, fmt.Errorf("seed %s closed the connection without answering the kademlia bootstrap: "+
				"it may run --routing full (every node of a cluster must use the same routing mode) or not be a tsdht node", addr)
		}
		return Peer{}, fmt.Errorf("seed %s: bootstrap: %w", addr, err)
	}
	if status == bootRefused {
		return Peer{}, fmt.Errorf("seed %s refused this node (%s): %w; the seed says: %s", addr, n.Self().PeerID(), ErrIncompatible, payload)
	}
	if status != bootOK {
		return Peer{}, fmt.Errorf("seed %s: bootstrap answer of unknown status %d", addr, status)
	}
	p, _, err := decodeMeta(payload)
	if err == nil {
		err = n.checkCompatible(memberlistName(p.PeerID()), payload)
	}
	if err != nil {
		if strings.HasPrefix(err.Error(), incompatibleNode) {
			return Peer{}, fmt.Errorf("seed %s: %w: %w", addr, ErrIncompatible, err)
		}
		return Peer{}, fmt.Errorf("seed %s: %w", addr, err)
	}
	return p, nil
}

// isConnReset reports whether err is a connection reset by the other side.
func isConnReset(err error) bool {
	return strings.Contains(err.Error(), "connection reset")
}

// readBootRequest reads the magic and the joiner's metadata.
func readBootRequest(br *bufio.Reader) ([]byte, error) {
	magic := make([]byte, len(bootMagic))
	if _, err := io.ReadFull(br, magic); err != nil || string(magic) != bootMagic {
		return nil, errors.New("not a bootstrap request")
	}
	return readBootPayload(br)
}

// readBootFrame reads a status byte and a payload.
func readBootFrame(br *bufio.Reader) (byte, []byte, error) {
	status, err := br.ReadByte()
	if err != nil {
		return 0, nil, err
	}
	payload, err := readBootPayload(br)
	return status, payload, err
}

// readBootPayload reads a uvarint length of at most maxBootPayload and that
// many bytes.
func readBootPayload(br *bufio.Reader) ([]byte, error) {
	size, err := binary.ReadUvarint(br)
	if err != nil {
		return nil, err
	}
	if size > maxBootPayload {
		return nil, fmt.Errorf("bootstrap payload of %d bytes, at most %d", size, maxBootPayload)
	}
	b := make([]byte, size)
	if _, err := io.ReadFull(br, b); err != nil {
		return nil, err
	}
	return b, nil
}

// writeBootFrame writes a status byte and a payload.
func writeBootFrame(w io.Writer, status byte, payload []byte) error {
	if len(payload) > maxBootPayload {
		payload = payload[:maxBootPayload]
	}
	b := append([]byte{status}, binary.AppendUvarint(nil, uint64(len(payload)))...)
	_, err := w.Write(append(b, payload...))
	return err
}
