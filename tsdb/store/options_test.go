package store

import "testing"

// A board keeps the default block cache, a host with memory to spare gets a 32nd of
// it up to MaxAutoCacheSize, and an unknown budget gets the default.
func TestCacheSizeFor(t *testing.T) {
	def := DefaultPebbleOptions().CacheSize
	for _, c := range []struct {
		budget, want int64
	}{
		{0, def},                     // unknown
		{486 << 20, def},             // a BeagleBone's MemTotal
		{150 << 20, def},             // the role's GOMEMLIMIT
		{1 << 30, 32 << 20},          // 1 GiB
		{2 << 30, 64 << 20},          // 2 GiB
		{24 << 30, MaxAutoCacheSize}, // a server
	} {
		if got := CacheSizeFor(c.budget); got != c.want {
			t.Errorf("CacheSizeFor(%d MiB) = %d MiB, want %d MiB", c.budget>>20, got>>20, c.want>>20)
		}
	}
}
