package c37118

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
	"time"
)

// bigCfg3 returns a CFG-3 too large for one frame: 400 phasors with 200-byte names.
func bigCfg3() *Config {
	cfg := testConfig(TypeCfg3, FormatPolar|FormatPhasorFloat, 0)
	for i := 0; i < 400; i++ {
		cfg.PMUs[1].Phasors = append(cfg.PMUs[1].Phasors, Phasor{Name: strings.Repeat("x", 190) + string(rune('A'+i%26)) + "-" + string(rune('a'+i/26)), Mag3: float32(i)})
	}
	return cfg
}

func TestCfg3FragmentsReassemble(t *testing.T) {
	for _, tc := range []struct {
		name     string
		cfg      *Config
		maxFrame int
		wantN    int
	}{
		{"small config in 3 fragments", testConfig(TypeCfg3, FormatPolar, 0), 150, 0},
		{"fits one frame", testConfig(TypeCfg3, FormatPolar, 0), MaxFrameLen, 1},
		{"larger than a frame can be", bigCfg3(), MaxFrameLen, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := tc.cfg.Append(nil); tc.name == "larger than a frame can be" && !errors.Is(err, ErrSize) {
				t.Fatalf("one frame of a %s: err %v, want ErrSize", tc.name, err)
			}
			frags, err := tc.cfg.AppendFragments(tc.maxFrame)
			if err != nil {
				t.Fatal(err)
			}
			if tc.wantN != 0 && len(frags) != tc.wantN {
				t.Fatalf("%d fragments, want %d", len(frags), tc.wantN)
			}
			if tc.wantN == 0 && len(frags) < 2 {
				t.Fatalf("%d fragments, want several", len(frags))
			}
			var a Cfg3Assembler
			now := time.Unix(1_700_000_000, 0)
			var got *Config
			for i, f := range frags {
				if len(f) > tc.maxFrame {
					t.Fatalf("fragment %d: %d bytes > %d", i, len(f), tc.maxFrame)
				}
				if _, err := ParseHeader(f); err != nil {
					t.Fatalf("fragment %d is not a valid frame: %v", i, err)
				}
				idx := binary.BigEndian.Uint16(f[HeaderLen:])
				switch {
				case len(frags) == 1 && idx != ContOnly,
					len(frags) > 1 && i == len(frags)-1 && idx != ContLast,
					len(frags) > 1 && i < len(frags)-1 && idx != uint16(i+1):
					t.Fatalf("fragment %d of %d: CONT_IDX %#04x", i, len(frags), idx)
				}
				c, err := a.Add(f, now)
				if err != nil {
					t.Fatalf("fragment %d: %v", i, err)
				}
				if (c != nil) != (i == len(frags)-1) {
					t.Fatalf("fragment %d of %d: config returned %v", i, len(frags), c != nil)
				}
				got = c
			}
			sent, _ := tc.cfg.appendBody(nil)
			again, err := got.appendBody(nil)
			if err != nil || !bytes.Equal(sent, again) || got.Header != tc.cfg.Header {
				t.Fatalf("reassembled configuration differs from the one sent (%v)", err)
			}
			if len(got.PMUs[1].Phasors) != len(tc.cfg.PMUs[1].Phasors) || got.PMUs[1].Phasors[0].Name != tc.cfg.PMUs[1].Phasors[0].Name {
				t.Fatalf("reassembled phasors differ")
			}
			if a.InProgress() || a.Discarded != 0 {
				t.Fatalf("after the last fragment: in progress %v, discarded %d", a.InProgress(), a.Discarded)
			}
			// ParseConfig alone refuses a fragment, saying what to do.
			if len(frags) > 1 {
				if _, err := ParseConfig(frags[0]); !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "Cfg3Assembler") {
					t.Fatalf("ParseConfig of a fragment: %v", err)
				}
			}
		})
	}
}

func TestCfg3AssemblerRefusesInconsistentPieces(t *testing.T) {
	cfg := testConfig(TypeCfg3, FormatPolar, 0)
	frags, err := cfg.AppendFragments(80)
	if err != nil {
		t.Fatal(err)
	}
	if len(frags) < 4 {
		t.Fatalf("%d fragments; the test needs 4 or more", len(frags))
	}
	other := *cfg
	other.IDCode = 99
	otherFrags, _ := other.AppendFragments(80)
	now := time.Unix(1_700_000_000, 0)
	feed := func(a *Cfg3Assembler, fs ...[]byte) (*Config, error) {
		var c *Config
		var err error
		for _, f := range fs {
			if c, err = a.Add(f, now); err != nil {
				return c, err
			}
		}
		return c, nil
	}
	last := len(frags) - 1
	for _, tc := range []struct {
		name   string
		limits Cfg3Limits
		frames [][]byte
	}{
		{"a fragment skipped", Cfg3Limits{}, [][]byte{frags[0], frags[2]}},
		{"fragments swapped", Cfg3Limits{}, [][]byte{frags[0], frags[2], frags[1]}},
		{"a continuation without a first", Cfg3Limits{}, [][]byte{frags[1]}},
		{"a last without a first", Cfg3Limits{}, [][]byte{frags[last]}},
		{"another stream's fragment", Cfg3Limits{}, [][]byte{frags[0], otherFrags[1]}},
		{"too many fragments", Cfg3Limits{MaxFragments: 2}, [][]byte{frags[0], frags[1], frags[2]}},
		{"too many bytes", Cfg3Limits{MaxBytes: 100}, [][]byte{frags[0], frags[1]}},
		{"a missing middle makes the body short", Cfg3Limits{}, append([][]byte{frags[0], frags[1]}, frags[last])},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := &Cfg3Assembler{Limits: tc.limits}
			c, err := feed(a, tc.frames...)
			if err == nil || c != nil {
				t.Fatalf("accepted: config %v, err %v", c != nil, err)
			}
			if !errors.Is(err, ErrFormat) {
				t.Fatalf("err %v does not wrap ErrFormat", err)
			}
			if a.InProgress() {
				t.Fatal("the refused configuration is still in progress")
			}
			// The assembler recovers: a whole configuration afterwards is reassembled.
			a.Limits = Cfg3Limits{}
			if c, err := feed(a, frags...); err != nil || c == nil {
				t.Fatalf("after the refusal: config %v, err %v", c != nil, err)
			}
		})
	}

	t.Run("timeout", func(t *testing.T) {
		a := &Cfg3Assembler{Limits: Cfg3Limits{Timeout: time.Second}}
		if _, err := a.Add(frags[0], now); err != nil {
			t.Fatal(err)
		}
		_, err := a.Add(frags[1], now.Add(2*time.Second))
		if !errors.Is(err, ErrFragment) || a.Discarded != 1 || !errors.Is(a.LastDiscard, ErrFragment) {
			t.Fatalf("a late fragment: err %v, discarded %d (%v)", err, a.Discarded, a.LastDiscard)
		}
	})
	t.Run("a new first fragment restarts", func(t *testing.T) {
		a := &Cfg3Assembler{}
		c, err := feed(a, append([][]byte{frags[0], frags[1]}, frags...)...)
		if err != nil || c == nil || a.Discarded != 1 {
			t.Fatalf("config %v, err %v, discarded %d", c != nil, err, a.Discarded)
		}
	})
	t.Run("a corrupt fragment", func(t *testing.T) {
		bad := append([]byte(nil), frags[1]...)
		bad[len(bad)-1] ^= 1
		a := &Cfg3Assembler{}
		if _, err := feed(a, frags[0], bad); !errors.Is(err, ErrCRC) {
			t.Fatalf("err %v, want ErrCRC", err)
		}
	})
}

// FuzzCfg3Assembler feeds the reassembler fragments cut from the fuzzer's bytes (sizes,
// CRCs and SYNC made right so the reassembly logic is reached): it must never panic,
// never hold more than its byte limit, and whatever it returns must parse again.
func FuzzCfg3Assembler(f *testing.F) {
	frags, _ := testConfig(TypeCfg3, FormatPolar, 0).AppendFragments(100)
	var seed []byte
	for _, fr := range frags {
		seed = binary.BigEndian.AppendUint16(seed, uint16(len(fr)))
		seed = append(seed, fr...)
	}
	f.Add(seed)
	f.Fuzz(func(t *testing.T, b []byte) {
		a := &Cfg3Assembler{Limits: Cfg3Limits{MaxBytes: 4096, MaxFragments: 8, Timeout: time.Second}}
		now := time.Unix(1_700_000_000, 0)
		for len(b) >= 2 {
			n := int(binary.BigEndian.Uint16(b))
			b = b[2:]
			if n > len(b) {
				n = len(b)
			}
			fr := append([]byte(nil), b[:n]...)
			b = b[n:]
			if len(fr) >= MinFrameLen {
				fr[0], fr[1] = syncByte, byte(TypeCfg3)<<4|fr[1]&0x0F
				binary.BigEndian.PutUint16(fr[2:], uint16(len(fr)))
				binary.BigEndian.PutUint16(fr[len(fr)-2:], CRC(fr[:len(fr)-2]))
			}
			now = now.Add(time.Duration(n) * time.Millisecond)
			cfg, err := a.Add(fr, now)
			if len(a.buf) > 4096 || a.n > 8 {
				t.Fatalf("holding %d bytes in %d fragments, over the limits", len(a.buf), a.n)
			}
			if err == nil && cfg != nil {
				if _, err := cfg.appendBody(nil); err != nil && !strings.Contains(err.Error(), "longer than") {
					t.Fatalf("a reassembled configuration does not encode: %v", err)
				}
			}
		}
	})
}
