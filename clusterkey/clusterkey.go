// Package clusterkey owns the cluster key: the shared secret that lets a
// process take part in a tsdht cluster. It reads key files, writes new ones,
// and derives from a key the separate secrets each use needs (the rpc
// handshake's HMAC key, memberlist's AES key), so that one leaked derived
// secret says nothing about the others.
//
// A key file holds one or more keys, one per line: 64 hex digits (32 bytes,
// what Generate writes) or, more generally, 32 to 128 hex digits or standard
// base64 of 16 to 64 bytes. Blank lines and lines starting with # are
// ignored. The first key is the one a process speaks; every key in the file
// is accepted from peers. That is what rotates a key without downtime: add
// the new key as a second line on every node, then make it the first line
// everywhere, then remove the old one (docs/security.md).
package clusterkey

import (
	"bufio"
	"bytes"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
)

// Size is the length in bytes of the keys Generate makes.
const Size = 32

// MinSize and MaxSize bound the length in bytes of a key read from a file.
const (
	MinSize = 16
	MaxSize = 64
)

// MaxKeys is how many keys one file may hold: enough for any rotation, few
// enough that trying each costs nothing.
const MaxKeys = 8

// maxFileSize bounds what Load reads: MaxKeys lines of base64 or hex and
// generous comments.
const maxFileSize = 64 << 10

// IDSize is the length of a key ID.
const IDSize = 8

// ID names a key without revealing it: the first bytes of a secret derived
// from it. Peers exchange IDs to pick a key both hold.
type ID [IDSize]byte

func (id ID) String() string { return hex.EncodeToString(id[:]) }

// Key is one cluster key.
type Key struct {
	secret []byte
	id     ID
}

// New returns the key whose secret is b (MinSize to MaxSize bytes).
func New(b []byte) (Key, error) {
	if len(b) < MinSize || len(b) > MaxSize {
		return Key{}, fmt.Errorf("key of %d bytes: want %d to %d (tsdht keygen writes %d)", len(b), MinSize, MaxSize, Size)
	}
	k := Key{secret: bytes.Clone(b)}
	copy(k.id[:], k.Derive("tsdht cluster key id", IDSize))
	return k, nil
}

// ID returns the key's ID.
func (k Key) ID() ID { return k.id }

// Derive returns n bytes derived from the key for the given purpose
// (HKDF-SHA256 with the purpose as its info). Different purposes give
// independent secrets.
func (k Key) Derive(purpose string, n int) []byte {
	out, err := hkdf.Key(sha256.New, k.secret, nil, purpose, n)
	if err != nil { // only for n > 255×32
		panic("clusterkey: " + err.Error())
	}
	return out
}

// Ring is the keys of one key file, in order: the first is spoken, all are
// accepted. A nil Ring means no cluster key: the cluster is open to anyone
// who reaches its ports.
type Ring []Key

// Primary returns the key to speak. It panics on an empty Ring.
func (r Ring) Primary() Key { return r[0] }

// Find returns the key of r with the given ID.
func (r Ring) Find(id ID) (Key, bool) {
	for _, k := range r {
		if k.id == id {
			return k, true
		}
	}
	return Key{}, false
}

// IDs returns the IDs of r's keys, in order.
func (r Ring) IDs() []ID {
	ids := make([]ID, len(r))
	for i, k := range r {
		ids[i] = k.id
	}
	return ids
}

// Parse reads the keys of a key file's contents.
func Parse(data []byte) (Ring, error) {
	var ring Ring
	sc := bufio.NewScanner(bytes.NewReader(data))
	for line := 1; sc.Scan(); line++ {
		s := strings.TrimSpace(sc.Text())
		if s == "" || strings.HasPrefix(s, "#") {
			continue
		}
		b, err := decodeLine(s)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		k, err := New(b)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		if _, dup := ring.Find(k.id); dup {
			return nil, fmt.Errorf("line %d: the same key twice", line)
		}
		if len(ring) == MaxKeys {
			return nil, fmt.Errorf("line %d: more than %d keys", line, MaxKeys)
		}
		ring = append(ring, k)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(ring) == 0 {
		return nil, errors.New("no key in it (tsdht keygen --out FILE writes one)")
	}
	return ring, nil
}

func decodeLine(s string) ([]byte, error) {
	if b, err := hex.DecodeString(s); err == nil {
		return b, nil
	}
	if b, err := base64.StdEncoding.DecodeString(s); err == nil {
		return b, nil
	}
	return nil, errors.New("neither hex nor base64")
}

// Load reads the key file at path. The file must not be readable by group or
// others: a cluster key readable by any local user is no secret.
func Load(path string) (Ring, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("cluster key file: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("cluster key file: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("cluster key file %s: not a regular file", path)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("cluster key file %s: mode %#o lets other users read it; run chmod 600 %s", path, perm, path)
	}
	if fi.Size() > maxFileSize {
		return nil, fmt.Errorf("cluster key file %s: %d bytes, a key file is at most %d", path, fi.Size(), maxFileSize)
	}
	data := make([]byte, fi.Size())
	if _, err := f.ReadAt(data, 0); err != nil {
		return nil, fmt.Errorf("cluster key file %s: %w", path, err)
	}
	ring, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("cluster key file %s: %w", path, err)
	}
	return ring, nil
}

// Generate returns a new random key as a key file line (hex, no newline).
func Generate() string {
	b := make([]byte, Size)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}

// WriteNew writes a new key file at path holding one new random key, with
// mode 0600. It refuses to overwrite an existing file: that would lock its
// holder out of its cluster.
func WriteNew(path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("%s exists; a new key would replace the cluster's: remove it first or choose another path", path)
	}
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintln(f, Generate()); err != nil {
		f.Close()
		os.Remove(path)
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
