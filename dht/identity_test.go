package dht

import (
	"errors"
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

// TestIdentityLostIsAnError: a data directory that holds a node's data (a
// subdirectory) but lost its identity file is an error naming the file, never a new
// node; AdoptNewIdentity makes one on purpose, once, and a directory with loose files
// only (a pid file, a key) or a lost+found is a first start.
func TestIdentityLostIsAnError(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "lost+found"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cluster.key"), []byte("k"), 0o600); err != nil {
		t.Fatal(err)
	}
	first, err := LoadOrCreateIdentity(dir)
	if err != nil {
		t.Fatalf("first start beside loose files and lost+found: %v", err)
	}
	if err := os.Mkdir(filepath.Join(dir, "store"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, IdentityFile)); err != nil {
		t.Fatal(err)
	}
	_, err = LoadOrCreateIdentity(dir)
	if !errors.Is(err, ErrIdentityLost) || !strings.Contains(err.Error(), filepath.Join(dir, IdentityFile)) || !strings.Contains(err.Error(), "store/") {
		t.Fatalf("identity file gone from a directory with a store: %v, want ErrIdentityLost naming the file and the data", err)
	}
	if _, err := os.Stat(filepath.Join(dir, IdentityFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the refusal wrote an identity file: %v", err)
	}
	adopted, err := AdoptNewIdentity(dir)
	if err != nil || adopted == first {
		t.Fatalf("AdoptNewIdentity: %s, %v: want a new identity", adopted, err)
	}
	if again, err := AdoptNewIdentity(dir); err != nil || again != adopted {
		t.Fatalf("AdoptNewIdentity again: %s, %v: want the adopted %s kept", again, err, adopted)
	}
	if again, err := LoadOrCreateIdentity(dir); err != nil || again != adopted {
		t.Fatalf("after adopting: %s, %v", again, err)
	}
}
