package dht

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	kb "github.com/libp2p/go-libp2p-kbucket"
)

func TestIdentityPersists(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data") // created on first use
	first, err := LoadOrCreateIdentity(dir)
	if err != nil {
		t.Fatal(err)
	}
	again, err := LoadOrCreateIdentity(dir)
	if err != nil {
		t.Fatal(err)
	}
	if first != again {
		t.Fatalf("identity changed across loads: %s, then %s", first, again)
	}
	fi, err := os.Stat(filepath.Join(dir, IdentityFile))
	if err != nil {
		t.Fatal(err)
	}
	if mode := fi.Mode().Perm(); mode != 0o600 {
		t.Errorf("key file mode %v, want 0600", mode)
	}
	if other, err := LoadOrCreateIdentity(t.TempDir()); err != nil || other == first {
		t.Fatalf("a new data dir gave %s, %v: want a new identity", other, err)
	}

	p := NewPeer(first, "10.0.0.1:7000")
	if full := kb.ConvertPeerID(first); string(p.Key[:]) != string(full[:20]) {
		t.Errorf("Key %x is not the first 20 bytes of kb.ConvertPeerID %x", p.Key, full)
	}
}

func TestIdentityCorruptKeyIsAnError(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, IdentityFile), []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadOrCreateIdentity(dir); err == nil || !strings.Contains(err.Error(), "unreadable") {
		t.Fatalf("corrupt key file: %v, want an error (never a silent new identity)", err)
	}
}
