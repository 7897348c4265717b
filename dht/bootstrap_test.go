package dht

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/tsdht/tsdht/quanta"
)

// FuzzBootstrapRequest feeds arbitrary bytes to the bootstrap handshake's reader, as a
// stranger on the gossip port may: it never panics, never reads a payload over
// maxBootPayload, and what it accepts is what was framed.
func FuzzBootstrapRequest(f *testing.F) {
	p := Peer{ID: "\x00\x24\x08\x01\x12\x20" + string(bytes.Repeat([]byte("k"), 32)), RPCAddr: "10.0.0.1:7000"}
	meta := encodeMeta(p, Meta{Protocol: 1, Quantum: 10, Format: quanta.HFI, Routing: RoutingKademlia})
	f.Add(append(binary.AppendUvarint([]byte(bootMagic), uint64(len(meta))), meta...))
	f.Add(binary.AppendUvarint([]byte(bootMagic), 1<<40))
	f.Add([]byte(bootMagic))
	f.Add([]byte{6, 0, 0, 0}) // what memberlist's push-pull starts with
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := readBootRequest(bufio.NewReader(bytes.NewReader(b)))
		if err != nil {
			return
		}
		if len(got) > maxBootPayload {
			t.Fatalf("read a payload of %d bytes, limit %d", len(got), maxBootPayload)
		}
		rest := b[len(bootMagic):]
		n, k := binary.Uvarint(rest)
		if k <= 0 || int(n) != len(got) || !bytes.Equal(rest[k:k+len(got)], got) {
			t.Fatalf("accepted %x from %x", got, b)
		}
	})
}
