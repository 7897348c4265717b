package spool

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func rec(i int) []byte { return bytes.Repeat([]byte(fmt.Sprintf("record %06d;", i)), 1+i%7) }

func mustOpen(t *testing.T, dir string, cfg Config) (*Spool, []string) {
	t.Helper()
	var reports []string
	s, err := Open(dir, cfg, func(m string) { reports = append(reports, m) })
	if err != nil {
		t.Fatal(err)
	}
	return s, reports
}

func drain(t *testing.T, s *Spool, n int, ack bool) [][]byte {
	t.Helper()
	var out [][]byte
	for i := 0; i < n; i++ {
		b, pos, err := s.Next(nil)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
		if ack {
			if err := s.Ack(pos); err != nil {
				t.Fatal(err)
			}
		}
	}
	return out
}

func TestInOrderAcrossSegmentsAndReopen(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{MaxBytes: 1 << 20, SegmentBytes: 4 << 10}
	s, _ := mustOpen(t, dir, cfg)
	for i := 0; i < 300; i++ {
		if err := s.Append(rec(i)); err != nil {
			t.Fatal(err)
		}
	}
	got := drain(t, s, 100, true)
	for i, b := range got {
		if !bytes.Equal(b, rec(i)) {
			t.Fatalf("record %d differs", i)
		}
	}
	segsBefore, _ := filepath.Glob(filepath.Join(dir, "*.seg"))
	if len(segsBefore) < 3 {
		t.Fatalf("expected several segments, have %d", len(segsBefore))
	}
	s.Close()
	// Reopen: the 200 unacknowledged records come back, in order, nothing before them
	// (acknowledged segments were deleted; at most the acked part of one segment repeats).
	s, _ = mustOpen(t, dir, cfg)
	defer s.Close()
	if st := s.Stats(); st.Records != 200 {
		t.Fatalf("records after reopen %d, want 200", st.Records)
	}
	got = drain(t, s, 200, true)
	for i, b := range got {
		if !bytes.Equal(b, rec(100+i)) {
			t.Fatalf("after reopen record %d = %q, want %q", i, b[:13], rec(100 + i)[:13])
		}
	}
	// Everything acknowledged: the space is back (at most one, the active, segment left).
	if st := s.Stats(); st.Bytes > cfg.SegmentBytes || st.Records != 0 {
		t.Fatalf("after full ack: %+v", st)
	}
}

func TestTornTailIsCutNotReplayed(t *testing.T) {
	for _, tail := range []struct {
		name string
		junk func(last []byte) []byte
	}{
		{"half a header", func([]byte) []byte { return []byte{9, 0, 0} }},
		{"half a record", func(last []byte) []byte { return last[:len(last)/2] }},
		{"bad checksum", func(last []byte) []byte { b := bytes.Clone(last); b[len(b)-1] ^= 0xFF; return b }},
		{"zeros", func([]byte) []byte { return make([]byte, 4096) }},
	} {
		t.Run(tail.name, func(t *testing.T) {
			dir := t.TempDir()
			s, _ := mustOpen(t, dir, Config{})
			for i := 0; i < 10; i++ {
				s.Append(rec(i))
			}
			s.Close()
			segs, _ := filepath.Glob(filepath.Join(dir, "*.seg"))
			path := segs[len(segs)-1]
			whole, _ := os.ReadFile(path)
			// A record as the spool frames it, then damaged as a crash would leave it.
			var framed bytes.Buffer
			s2, _ := mustOpen(t, t.TempDir(), Config{})
			s2.Append(rec(10))
			s2.Close()
			g2, _ := filepath.Glob(filepath.Join(s2.dir, "*.seg"))
			one, _ := os.ReadFile(g2[0])
			framed.Write(tail.junk(one))
			os.WriteFile(path, append(whole, framed.Bytes()...), 0o644)

			s, reports := mustOpen(t, dir, Config{})
			defer s.Close()
			if st := s.Stats(); st.TornBytes != int64(framed.Len()) || len(reports) != 1 {
				t.Fatalf("torn bytes %d (want %d), reports %q", st.TornBytes, framed.Len(), reports)
			}
			got := drain(t, s, 10, true)
			for i, b := range got {
				if !bytes.Equal(b, rec(i)) {
					t.Fatalf("record %d differs", i)
				}
			}
			// Nothing more: the damaged record is not handed out.
			stop := make(chan struct{})
			time.AfterFunc(50*time.Millisecond, func() { close(stop) })
			if _, _, err := s.Next(stop); !errors.Is(err, ErrClosed) {
				t.Fatalf("after the good records: %v", err)
			}
			// Appends after the cut are read normally.
			s.Append(rec(42))
			if b := drain(t, s, 1, true)[0]; !bytes.Equal(b, rec(42)) {
				t.Fatal("append after cut not read back")
			}
		})
	}
}

func TestFullRefusesAndCounts(t *testing.T) {
	dir := t.TempDir()
	s, _ := mustOpen(t, dir, Config{MaxBytes: 64 << 10, SegmentBytes: 8 << 10})
	defer s.Close()
	big := make([]byte, 1000)
	n := 0
	var err error
	for ; n < 1000; n++ {
		if err = s.Append(big); err != nil {
			break
		}
	}
	if !errors.Is(err, ErrFull) || n != 64<<10/1008 {
		t.Fatalf("after %d appends: %v", n, err)
	}
	if st := s.Stats(); st.Refused != 1 || st.Bytes > 64<<10 {
		t.Fatalf("stats %+v", st)
	}
	// Reading and acknowledging frees whole segments, and appends succeed again.
	drain(t, s, 20, true)
	if err := s.Append(big); err != nil {
		t.Fatalf("after draining: %v", err)
	}
	if err := s.Append(make([]byte, 40<<10)); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("oversized record: %v", err)
	}
}

func TestReadAllSeesWhatReopenReplays(t *testing.T) {
	dir := t.TempDir()
	s, _ := mustOpen(t, dir, Config{SegmentBytes: 4 << 10})
	for i := 0; i < 50; i++ {
		s.Append(rec(i))
	}
	drain(t, s, 5, true)
	s.Close()
	all, err := ReadAll(dir)
	if err != nil {
		t.Fatal(err)
	}
	s, _ = mustOpen(t, dir, Config{SegmentBytes: 4 << 10})
	defer s.Close()
	got := drain(t, s, len(all), false)
	for i := range all {
		if !bytes.Equal(all[i], got[i]) {
			t.Fatalf("record %d: ReadAll and replay differ", i)
		}
	}
	if len(all) != 45 {
		t.Fatalf("ReadAll %d records, want 45", len(all))
	}
}

// FuzzOpenSegment: whatever a segment file holds, Open neither panics nor hands out a
// record whose checksum is wrong, and reads stay bounded.
func FuzzOpenSegment(f *testing.F) {
	dir := f.TempDir()
	s, _ := Open(dir, Config{}, nil)
	s.Append([]byte("hello"))
	s.Append([]byte("world!"))
	s.Close()
	seed, _ := os.ReadFile(filepath.Join(dir, segName(1)))
	f.Add(seed)
	f.Add([]byte{0xff, 0xff, 0xff, 0x7f, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, segName(1)), b, 0o644); err != nil {
			t.Fatal(err)
		}
		s, err := Open(dir, Config{MaxBytes: 1 << 20}, nil)
		if err != nil {
			return
		}
		defer s.Close()
		n := s.Stats().Records
		total := 0
		for i := int64(0); i < n; i++ {
			rec, pos, err := s.Next(nil)
			if err != nil {
				t.Fatalf("record %d of %d: %v", i, n, err)
			}
			total += len(rec)
			s.Ack(pos)
		}
		if total > len(b) {
			t.Fatalf("%d bytes of records from a %d-byte file", total, len(b))
		}
	})
}
