package backup

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tsdht/tsdht/tsdb/series"
)

func testBlocks() []Block {
	f := series.Points{Type: series.Float}
	for i := range 600 {
		f.AppendFloat(1_700_000_000e9+int64(i)*16_666_667, float64(i)*0.5)
	}
	s := series.Points{Type: series.String}
	s.AppendString(1_700_000_010e9, "open")
	s.AppendString(1_700_000_011e9, "closed, with a comma")
	in := series.Points{Type: series.Int}
	in.AppendInt(-5e9, -7)
	return []Block{
		{Key: "pmu1/freq", Start: 1_700_000_000, Quantum: 10, From: 1_700_000_000e9, To: 1_700_000_010e9, Points: f},
		{Key: "breaker/state", Start: 1_699_999_200, Quantum: 3600, From: 1_700_000_000e9, To: 1_700_000_020e9, Points: s},
		{Key: "before-1970", Start: -10, Quantum: 10, From: -10e9, To: 0, Points: in},
		{Key: "empty", Start: 0, Quantum: 1, From: 0, To: 1e9, Points: series.Points{Type: series.Float}},
	}
}

func TestBlocksRoundTrip(t *testing.T) {
	var buf []byte
	want := testBlocks()
	for i := range want {
		buf = appendBlock(buf, &want[i])
	}
	r := bufio.NewReader(bytes.NewReader(buf))
	for i, w := range want {
		got, n, err := readBlock(r)
		if err != nil {
			t.Fatalf("block %d: %v", i, err)
		}
		if n != len(appendBlock(nil, &w)) {
			t.Errorf("block %d: read %d bytes, wrote %d", i, n, len(appendBlock(nil, &w)))
		}
		if got.Key != w.Key || got.Start != w.Start || got.Quantum != w.Quantum || got.From != w.From || got.To != w.To ||
			got.Points.Len() != w.Points.Len() || series.Concat(got.Points).Type != w.Points.Type && w.Points.Len() > 0 {
			t.Fatalf("block %d: got %+v, want %+v", i, got, w)
		}
		for k := range w.Points.T {
			if got.Points.T[k] != w.Points.T[k] {
				t.Fatalf("block %d point %d: t %d, want %d", i, k, got.Points.T[k], w.Points.T[k])
			}
		}
	}
	if _, _, err := readBlock(r); err != io.EOF {
		t.Fatalf("after the last block: %v, want io.EOF", err)
	}
}

// Every byte of a block is covered: flipping any one is refused, never decoded into
// other points.
func TestEveryDamagedByteIsRefused(t *testing.T) {
	b := testBlocks()[1]
	enc := appendBlock(nil, &b)
	for i := range enc {
		bad := bytes.Clone(enc)
		bad[i] ^= 0x20
		if _, _, err := readBlock(bufio.NewReader(bytes.NewReader(bad))); err == nil {
			t.Fatalf("byte %d of %d damaged: the block still decoded", i, len(enc))
		}
	}
	for n := 1; n < len(enc); n++ {
		if _, _, err := readBlock(bufio.NewReader(bytes.NewReader(enc[:n]))); err == nil {
			t.Fatalf("block cut to %d of %d bytes: decoded", n, len(enc))
		}
	}
}

// Limits are checked before allocation: a block claiming a huge length is refused at
// once.
func TestHugeLengthsRefused(t *testing.T) {
	for _, in := range [][]byte{
		{0xff, 0xff, 0xff, 0xff, 0x0f},                                      // key length
		append([]byte{1, 'k', 0, 2, 0, 2, 0xff, 0xff, 0xff, 0xff, 0x0f}, 0), // point count
		{1, 'k', 0, 2, 0, 2, 1, 0xff, 0xff, 0xff, 0xff, 0x0f},               // packed length
	} {
		_, _, err := readBlock(bufio.NewReader(bytes.NewReader(in)))
		if err == nil || !strings.Contains(err.Error(), "at most") && !strings.Contains(err.Error(), "1..") {
			t.Errorf("%x: %v, want a limit named", in, err)
		}
	}
}

func TestFileHeader(t *testing.T) {
	h := appendFileHeader(nil)
	if err := checkFileHeader(h); err != nil {
		t.Fatal(err)
	}
	h[len(h)-1] = FormatVersion + 1
	if err := checkFileHeader(h); err == nil || !strings.Contains(err.Error(), "version") {
		t.Fatalf("a newer version: %v", err)
	}
	if err := checkFileHeader([]byte("PK\x03\x04zipfile")); err == nil {
		t.Fatal("a zip file taken for a backup")
	}
}

// The manifest's checksum is checked before it is parsed, and names the file.
func TestManifestChecksum(t *testing.T) {
	dir := t.TempDir()
	m := &Manifest{Format: formatName, Version: FormatVersion}
	if err := writeManifest(dir, m); err != nil {
		t.Fatal(err)
	}
	if _, err := readManifest(dir); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, ManifestName)
	b, _ := os.ReadFile(p)
	os.WriteFile(p, bytes.Replace(b, []byte(`"runs"`), []byte(`"rUns"`), 1), 0o644)
	if _, err := readManifest(dir); err == nil || !strings.Contains(err.Error(), ManifestName) || !strings.Contains(err.Error(), "damaged") {
		t.Fatalf("a damaged manifest: %v", err)
	}
}

func FuzzReadBlock(f *testing.F) {
	for _, b := range testBlocks() {
		f.Add(appendBlock(nil, &b))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		b, n, err := readBlock(bufio.NewReader(bytes.NewReader(in)))
		if err != nil {
			return
		}
		if n > len(in) {
			t.Fatalf("read %d bytes of %d", n, len(in))
		}
		// What decodes encodes into a block that decodes the same.
		again, _, err := readBlock(bufio.NewReader(bytes.NewReader(appendBlock(nil, &b))))
		if err != nil {
			t.Fatalf("re-encoded block refused: %v", err)
		}
		if again.Key != b.Key || again.Start != b.Start || again.From != b.From || again.To != b.To || again.Points.Len() != b.Points.Len() {
			t.Fatalf("re-encoded %+v, read %+v", again, b)
		}
	})
}
