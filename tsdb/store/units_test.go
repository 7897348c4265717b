package store

import (
	"testing"
	"time"
)

func TestParseDuration(t *testing.T) {
	good := map[string]time.Duration{
		"0": 0, "720h": 720 * time.Hour, "90m": 90 * time.Minute, "30d": 30 * 24 * time.Hour,
		"1.5d": 36 * time.Hour, "7d12h": 7*24*time.Hour + 12*time.Hour, " 2d ": 48 * time.Hour, "0d": 0,
	}
	for in, want := range good {
		if got, err := ParseDuration(in); err != nil || got != want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "d", "x", "30days", "-1d", "1d-2h", "2d2d", "1e300d", "NaNd", "10"} {
		if got, err := ParseDuration(in); err == nil {
			t.Errorf("ParseDuration(%q) = %v, want an error", in, got)
		}
	}
}

func TestParseSize(t *testing.T) {
	good := map[string]int64{
		"0": 0, "1048576": 1 << 20, "512MB": 512e6, "2GB": 2e9, "1.5GiB": 3 << 29, "64MiB": 64 << 20,
		"10kb": 10e3, "7 KiB": 7 << 10, "3b": 3, "1TB": 1e12, "9223372036854775807": 1<<63 - 1,
	}
	for in, want := range good {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "MB", "-1", "-1MB", "1.5", "x", "1ZB", "1e30GB", "NaN"} {
		if got, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) = %d, want an error", in, got)
		}
	}
}

func TestFormatSize(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 6 << 20: "6.0 MiB", 3 << 29: "1.5 GiB"} {
		if got := FormatSize(n); got != want {
			t.Errorf("FormatSize(%d) = %q, want %q", n, got, want)
		}
	}
}
