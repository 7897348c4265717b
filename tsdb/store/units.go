package store

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// ParseDuration parses a retention as a flag gives it: a Go duration ("720h",
// "90m"), a number of days with a d suffix ("30d", "1.5d"), or days followed by a Go
// duration ("7d12h"). "0" is zero.
func ParseDuration(s string) (time.Duration, error) {
	in := s
	s = strings.TrimSpace(s)
	var days time.Duration
	if i := strings.IndexByte(s, 'd'); i >= 0 {
		n, err := strconv.ParseFloat(s[:i], 64)
		if err != nil || n < 0 || math.IsInf(n, 0) || math.IsNaN(n) || n*24 > float64(math.MaxInt64/time.Hour) {
			return 0, fmt.Errorf("duration %q: want a Go duration (720h) or days (30d)", in)
		}
		days = time.Duration(n * 24 * float64(time.Hour))
		if s = s[i+1:]; s == "" {
			return days, nil
		}
		if s[0] == '-' || s[0] == '+' {
			return 0, fmt.Errorf("duration %q: want a Go duration (720h) or days (30d)", in)
		}
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("duration %q: want a Go duration (720h) or days (30d)", in)
	}
	if days > 0 && d > math.MaxInt64-days {
		return 0, fmt.Errorf("duration %q is too long", in)
	}
	return days + d, nil
}

// sizeUnits are the suffixes ParseSize accepts, case-insensitively: SI multiples of
// 1000 and binary multiples of 1024, as disk makers and operating systems use them.
var sizeUnits = []struct {
	suffix string
	mult   float64
}{
	{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30}, {"tib", 1 << 40},
	{"kb", 1e3}, {"mb", 1e6}, {"gb", 1e9}, {"tb", 1e12},
	{"b", 1},
}

// ParseSize parses a byte count as a flag gives it: plain bytes ("1048576"), or a
// number with a unit: KB, MB, GB, TB (powers of 1000) or KiB, MiB, GiB, TiB (powers of
// 1024), in any case ("512MB", "2GB", "1.5GiB").
func ParseSize(s string) (int64, error) {
	in := s
	s = strings.ToLower(strings.TrimSpace(s))
	mult := 1.0
	for _, u := range sizeUnits {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSpace(strings.TrimSuffix(s, u.suffix)), u.mult
			break
		}
	}
	bad := fmt.Errorf("size %q: want whole bytes or a number with KB, MB, GB (×1000) or KiB, MiB, GiB (×1024)", in)
	if mult == 1 { // whole bytes
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			return 0, bad
		}
		return n, nil
	}
	n, err := strconv.ParseFloat(s, 64)
	if err != nil || n < 0 || math.IsNaN(n) || n*mult >= math.MaxInt64 {
		return 0, bad
	}
	return int64(math.Round(n * mult)), nil
}

// FormatSize formats a byte count for people, in binary units.
func FormatSize(n int64) string {
	const units = "KMGTPE"
	if n < 1024 && n > -1024 {
		return fmt.Sprintf("%d B", n)
	}
	f, i := float64(n)/1024, 0
	for math.Abs(f) >= 1024 && i < len(units)-1 {
		f /= 1024
		i++
	}
	return fmt.Sprintf("%.1f %ciB", f, units[i])
}
