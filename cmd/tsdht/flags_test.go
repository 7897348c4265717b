package main

import (
	"strings"
	"testing"
	"time"
)

func TestParseTimeFlag(t *testing.T) {
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	n := now.UnixNano()
	for _, c := range []struct {
		in   string
		want int64
	}{
		{"now", n},
		{" now ", n},
		{"now-5m", n - int64(5*time.Minute)},
		{"now+1h", n + int64(time.Hour)},
		{"-5m", n - int64(5*time.Minute)},
		{"-90s", n - int64(90*time.Second)},
		{"-7d", n - int64(7*24*time.Hour)},
		{"now-1h30m", n - int64(90*time.Minute)},
		{"-5", -5}, // an integer is nanoseconds since the epoch
		{"1795309200000000000", 1795309200000000000},
		{"2026-11-22T01:00:00Z", 1795309200000000000},
		{"2026-11-22", 1795305600000000000},
		{"today", 1795305600000000000},
		{"yesterday", 1795305600000000000 - int64(24*time.Hour)},
	} {
		got, err := parseTimeFlag(c.in, now)
		if err != nil || got != c.want {
			t.Errorf("parseTimeFlag(%q) = %d, %v; want %d", c.in, got, err, c.want)
		}
	}
	for _, bad := range []string{"now-", "now5m", "now-bogus", "-5x", "yesterdays", "2026-13-01", "-100000000d"} {
		if _, err := parseTimeFlag(bad, now); err == nil {
			t.Errorf("parseTimeFlag(%q) accepted", bad)
		} else if !strings.Contains(err.Error(), bad) {
			t.Errorf("parseTimeFlag(%q): error %q does not name the input", bad, err)
		}
	}
}

func TestParseWidth(t *testing.T) {
	for in, want := range map[string]int64{"1m": int64(time.Minute), "250ms": int64(250 * time.Millisecond), "1d": int64(24 * time.Hour), "1000": 1000} {
		if got, err := parseWidth(in); err != nil || got != want {
			t.Errorf("parseWidth(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"0", "-1m", "0s", "x", ""} {
		if _, err := parseWidth(bad); err == nil {
			t.Errorf("parseWidth(%q) accepted", bad)
		}
	}
}
