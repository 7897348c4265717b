package rpc

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash"
	"io"
	"net"
	"sync"
	"time"

	"github.com/tsdht/tsdht/clusterkey"
)

// The handshake opens every connection, and no frame is read before it
// completes.
//
// Hellos. The client sends a hello: the magic string, the protocol version it
// speaks and the oldest one it still speaks (both big-endian uint16). The
// server answers with its own hello and a status byte. Both sides check that
// their version ranges overlap, so each side reports a mismatch in its own
// words, and a client that reached something other than a tsdht server finds
// out from the magic. The two then speak the lower of their versions.
//
// Proof (version 2 and later). In the same write as its hello the server
// sends a random 32-byte nonce and the IDs of the cluster keys it accepts
// (a count byte, then 8 bytes each; none when it has no key). The client
// answers with its own nonce, the ID of the key it chose (the first of its
// keys that the server accepts; all zeros when it has none) and
//
//	HMAC-SHA256(K, "tsdht rpc auth" ‖ 'C' ‖ both hellos ‖ client nonce ‖ server nonce ‖ key ID)
//
// where K is derived from the chosen key for this purpose alone. The server
// checks it and answers with a status byte and the same MAC with role 'S'.
// Each side thus proves it holds the key, over nonces the other chose, so a
// recorded proof is worth nothing later; the roles keep one side's proof
// from being replayed as the other's. Without a key on either side the MACs
// are zeros and the connection is open, as in version 1. A side with a key
// never talks to one without.
const (
	handshakeMagic = "TSDHT"
	helloLen       = len(handshakeMagic) + 4
	statusRefused  = 0
	statusOK       = 1
	statusBadKey   = 2 // version 2: the server does not accept the client's proof

	nonceLen = 32
	macLen   = sha256.Size
	// authLen is what the client sends after the hellos: its nonce, the
	// key ID and its MAC.
	authLen = nonceLen + clusterkey.IDSize + macLen

	// authVersion is the first protocol version with the proof.
	authVersion = 2
	// authPurpose derives the handshake's HMAC key from a cluster key.
	authPurpose = "tsdht rpc auth"
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
		if looksLikeGossip(b[0]) {
			return hello{}, fmt.Errorf("bad magic %q: not a tsdht rpc peer; it looks like memberlist gossip: "+
				"a node's --join names this RPC address (--join wants the seeds' --gossip addresses)", b[:len(handshakeMagic)])
		}
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

// mac computes one side's proof. transcript is both hellos, the two nonces
// and the key ID, as the proof's layout above says.
func mac(key clusterkey.Key, role byte, transcript []byte) []byte {
	pool := authMACs(key)
	h := pool.Get().(hash.Hash)
	defer pool.Put(h)
	h.Reset()
	head := roleHeads[0]
	if role == 'C' {
		head = roleHeads[1]
	}
	h.Write(head)
	h.Write(transcript)
	return h.Sum(make([]byte, 0, macLen))
}

// roleHeads is what a proof's MAC covers first: the purpose and the role,
// 'S' at index 0 and 'C' at 1, made once.
var roleHeads = [2][]byte{[]byte(authPurpose + "S"), []byte(authPurpose + "C")}

// macPools holds, per cluster key (ID → *sync.Pool), HMACs keyed for the
// proof, reset between uses: a fresh HMAC costs six allocations and hashes its
// key's two pads again, and a node under a flood of handshakes, with the
// cluster key or without, computes one or two proofs per connection. Only our
// own keys enter it.
var macPools sync.Map

func authMACs(key clusterkey.Key) *sync.Pool {
	if p, ok := macPools.Load(key.ID()); ok {
		return p.(*sync.Pool)
	}
	k := authKey(key)
	p, _ := macPools.LoadOrStore(key.ID(), &sync.Pool{New: func() any { return hmac.New(sha256.New, k) }})
	return p.(*sync.Pool)
}

// authKeys caches the HMAC key derived from each cluster key (ID → []byte):
// deriving costs more than the proof itself. Only our own keys enter it.
var authKeys sync.Map

func authKey(key clusterkey.Key) []byte {
	if k, ok := authKeys.Load(key.ID()); ok {
		return k.([]byte)
	}
	k := key.Derive(authPurpose, sha256.Size)
	authKeys.Store(key.ID(), k)
	return k
}

// transcript returns what both proofs cover.
func transcript(clientHello, serverHello, clientNonce, serverNonce []byte, id clusterkey.ID) []byte {
	t := make([]byte, 0, 2*helloLen+2*nonceLen+len(id))
	t = append(append(t, clientHello...), serverHello...)
	t = append(append(t, clientNonce...), serverNonce...)
	return append(t, id[:]...)
}

// clientHandshake runs the client's side of the handshake on a new conn.
// keys is the client's cluster key ring, nil for none.
func clientHandshake(conn net.Conn, timeout time.Duration, keys clusterkey.Ring) error {
	if err := conn.SetDeadline(time.Now().Add(timeout)); err != nil {
		return err
	}
	myHello := ourHello.append(nil)
	if _, err := conn.Write(myHello); err != nil {
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
	if min(peer.version, ourHello.version) < authVersion {
		if keys != nil {
			return fmt.Errorf("%w: the peer speaks rpc protocol v%d, which cannot prove it holds the cluster key; upgrade it", ErrClusterKey, peer.version)
		}
		return conn.SetDeadline(time.Time{})
	}

	// The server's nonce and key IDs.
	var offer [nonceLen + 1]byte
	if _, err := io.ReadFull(conn, offer[:]); err != nil {
		return fmt.Errorf("rpc: handshake: %w", err)
	}
	serverNonce, n := offer[:nonceLen], int(offer[nonceLen])
	if n > clusterkey.MaxKeys {
		return fmt.Errorf("rpc: handshake: peer offers %d cluster keys, at most %d", n, clusterkey.MaxKeys)
	}
	ids := make([]clusterkey.ID, n)
	for i := range ids {
		if _, err := io.ReadFull(conn, ids[i][:]); err != nil {
			return fmt.Errorf("rpc: handshake: %w", err)
		}
	}
	if keys != nil && n == 0 {
		return fmt.Errorf("%w: the peer has none configured and we do: give it the same --cluster-key-file", ErrClusterKey)
	}

	// Our proof, with the first of our keys that the server accepts.
	var key clusterkey.Key
	var id clusterkey.ID
	if keys != nil {
		key = keys.Primary()
		for _, k := range keys {
			if containsID(ids, k.ID()) {
				key = k
				break
			}
		}
		id = key.ID()
	}
	clientNonce := make([]byte, nonceLen)
	_, _ = rand.Read(clientNonce)
	tr := transcript(myHello, reply[:helloLen], clientNonce, serverNonce, id)
	auth := append(append(clientNonce, id[:]...), make([]byte, macLen)...)
	if keys != nil {
		copy(auth[nonceLen+len(id):], mac(key, 'C', tr))
	}
	if _, err := conn.Write(auth); err != nil {
		return fmt.Errorf("rpc: handshake: %w", err)
	}

	var answer [1 + macLen]byte
	if _, err := io.ReadFull(conn, answer[:]); err != nil {
		return fmt.Errorf("rpc: handshake: %w", err)
	}
	switch {
	case answer[0] == statusBadKey && keys == nil:
		return fmt.Errorf("%w: the peer requires one and none is configured: give --cluster-key-file", ErrClusterKey)
	case answer[0] == statusBadKey:
		return fmt.Errorf("%w: the peer accepts none of our keys (ours: %s; its: %s): check --cluster-key-file on both sides", ErrClusterKey, idList(keys.IDs()), idList(ids))
	case answer[0] != statusOK:
		return fmt.Errorf("rpc: handshake: bad status byte %#x", answer[0])
	}
	if keys != nil && !hmac.Equal(answer[1:], mac(key, 'S', tr)) {
		return fmt.Errorf("%w: the peer could not prove it holds key %s", ErrClusterKey, id)
	}
	return conn.SetDeadline(time.Time{})
}

// serverHandshake runs the server's side of the handshake on an accepted
// conn, with the server's cluster key ring (nil for none). A client whose
// versions do not overlap ours, or whose proof fails, is told so before the
// error is returned; one that sent no valid hello gets no answer.
func serverHandshake(conn net.Conn, timeout time.Duration, keys clusterkey.Ring) error {
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
	myHello := ourHello.append(nil)
	if err := peer.compatible(); err != nil {
		// Best effort: the client learns why, and the conn is dropped anyway.
		_, _ = conn.Write(append(myHello, statusRefused))
		return err
	}
	if min(peer.version, ourHello.version) < authVersion {
		if keys != nil {
			_, _ = conn.Write(append(myHello, statusRefused))
			return fmt.Errorf("%w: the peer speaks rpc protocol v%d, which cannot prove it holds the cluster key", ErrClusterKey, peer.version)
		}
		if _, err := conn.Write(append(myHello, statusOK)); err != nil {
			return fmt.Errorf("rpc: handshake: %w", err)
		}
		return conn.SetDeadline(time.Time{})
	}

	serverNonce := make([]byte, nonceLen)
	_, _ = rand.Read(serverNonce)
	offer := append(append(myHello, statusOK), serverNonce...)
	offer = append(offer, byte(len(keys)))
	for _, id := range keys.IDs() {
		offer = append(offer, id[:]...)
	}
	if _, err := conn.Write(offer); err != nil {
		return fmt.Errorf("rpc: handshake: %w", err)
	}

	var auth [authLen]byte
	if _, err := io.ReadFull(conn, auth[:]); err != nil {
		return fmt.Errorf("rpc: handshake: %w", err)
	}
	clientNonce := auth[:nonceLen]
	var id clusterkey.ID
	copy(id[:], auth[nonceLen:])
	proof := auth[nonceLen+len(id):]
	answer := make([]byte, 1+macLen)
	answer[0] = statusOK
	if keys != nil {
		tr := transcript(buf[:], myHello, clientNonce, serverNonce, id)
		key, ok := keys.Find(id)
		switch {
		case id == (clusterkey.ID{}):
			err = fmt.Errorf("%w: the peer presented none", ErrClusterKey)
		case !ok:
			err = fmt.Errorf("%w: the peer speaks key %s, which is not among ours (%s)", ErrClusterKey, id, idList(keys.IDs()))
		case !hmac.Equal(proof, mac(key, 'C', tr)):
			err = fmt.Errorf("%w: the peer's proof for key %s is wrong", ErrClusterKey, id)
		default:
			copy(answer[1:], mac(key, 'S', tr))
		}
		if err != nil {
			answer[0] = statusBadKey
			_, _ = conn.Write(answer)
			return err
		}
	}
	if _, err := conn.Write(answer); err != nil {
		return fmt.Errorf("rpc: handshake: %w", err)
	}
	return conn.SetDeadline(time.Time{})
}

func containsID(ids []clusterkey.ID, id clusterkey.ID) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

func idList(ids []clusterkey.ID) string {
	if len(ids) == 0 {
		return "none"
	}
	var b bytes.Buffer
	for i, id := range ids {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(id.String())
	}
	return b.String()
}

// looksLikeGossip reports whether a stream's first byte is one of memberlist's message
// types (0–13 in memberlist 0.5, and 244, its label header): gossip sent to an RPC port.
func looksLikeGossip(b byte) bool { return b <= 13 || b == 244 }
