package rpc

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"sync"
	"testing"
)

// TestMACPooled: the pooled proofs are HMAC-SHA256(K, "tsdht rpc auth" ‖ role ‖
// transcript) as the handshake's layout says, whichever MAC the pool hands out
// and however many goroutines ask at once: peers of other builds check them.
func TestMACPooled(t *testing.T) {
	k := newKey(t)
	tr := transcript(make([]byte, helloLen), make([]byte, helloLen), bytes.Repeat([]byte{1}, nonceLen), bytes.Repeat([]byte{2}, nonceLen), k.ID())
	want := func(role byte) []byte {
		h := hmac.New(sha256.New, k.Derive(authPurpose, sha256.Size))
		h.Write([]byte(authPurpose))
		h.Write([]byte{role})
		h.Write(tr)
		return h.Sum(nil)
	}
	wc, ws := want('C'), want('S')
	if bytes.Equal(wc, ws) {
		t.Fatal("the roles' proofs are equal")
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				if got := mac(k, 'C', tr); !bytes.Equal(got, wc) {
					t.Errorf("client proof %x, want %x", got, wc)
					return
				}
				if got := mac(k, 'S', tr); !bytes.Equal(got, ws) {
					t.Errorf("server proof %x, want %x", got, ws)
					return
				}
			}
		})
	}
	wg.Wait()
}
