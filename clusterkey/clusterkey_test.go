package clusterkey

import (
	"bytes"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	a, b := Generate(), Generate()
	b64 := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 24))
	ring, err := Parse([]byte("# rotated in on 2026-11-01\n" + a + "\n\n  " + b + "  \n" + b64 + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(ring) != 3 {
		t.Fatalf("%d keys, want 3", len(ring))
	}
	first, _ := Parse([]byte(a))
	if ring.Primary().ID() != first[0].ID() {
		t.Error("the first key in the file is not the primary")
	}
	if _, ok := ring.Find(ring[2].ID()); !ok {
		t.Error("Find misses a key of the ring")
	}

	bad := []struct{ in, want string }{
		{"", "no key in it"},
		{"# only a comment\n", "no key in it"},
		{"zz-not-a-key\n", "line 1: neither hex nor base64"},
		{a + "\nabcd\n", "line 2: key of 2 bytes: want 16 to 64"},
		{a + "\n" + a + "\n", "line 2: the same key twice"},
	}
	for _, tt := range bad {
		_, err := Parse([]byte(tt.in))
		if tt.want == "" {
			if err != nil {
				t.Errorf("Parse(%q): %v", tt.in, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Parse(%q): %v, want %q", tt.in, err, tt.want)
		}
	}
	var many []string
	for range MaxKeys + 1 {
		many = append(many, Generate())
	}
	if _, err := Parse([]byte(strings.Join(many, "\n"))); err == nil || !strings.Contains(err.Error(), "more than 8 keys") {
		t.Errorf("%d keys: %v", len(many), err)
	}
}

func TestDerive(t *testing.T) {
	ring, err := Parse([]byte(Generate() + "\n" + Generate()))
	if err != nil {
		t.Fatal(err)
	}
	k := ring[0]
	if bytes.Equal(k.Derive("a", 32), k.Derive("b", 32)) {
		t.Error("two purposes derive the same secret")
	}
	if !bytes.Equal(k.Derive("a", 32), k.Derive("a", 32)) {
		t.Error("derivation is not deterministic")
	}
	if bytes.Equal(k.Derive("a", 32), ring[1].Derive("a", 32)) || k.ID() == ring[1].ID() {
		t.Error("two keys derive the same secret or ID")
	}
}

func TestWriteNewLoad(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cluster.key")
	if err := WriteNew(path); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm != 0o600 {
		t.Errorf("mode %#o, want 0600", perm)
	}
	before, _ := os.ReadFile(path)
	if err := WriteNew(path); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Errorf("WriteNew over an existing file: %v", err)
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
		t.Error("WriteNew changed an existing key file")
	}
	ring, err := Load(path)
	if err != nil || len(ring) != 1 {
		t.Fatalf("Load: %v, %d keys", err, len(ring))
	}

	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(path); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("Load of a world-readable file: %v", err)
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing")); err == nil || !strings.Contains(err.Error(), "cluster key file") {
		t.Errorf("Load of a missing file: %v", err)
	}
}
