package store

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble"
)

// Damage.
//
// Pebble checks every table block's checksum when it reads the block and every WAL
// record's when it replays it; the store's own codecs check what they decode. What the
// store adds is that damage is never quiet: a read that meets it fails with an error
// wrapping ErrCorrupt (the coordinator then reads another replica, and the repairer
// re-sends the pair), the failure is counted in Stats.Corruptions and logged with the
// file or key pebble named, and a WAL replay that stopped before valid records is
// reported at open (wal.go).

// damageLog counts and reports damage, at most one log line per damageLogEvery for
// repeated reads of the same damage.
type damageLog struct {
	corrupt    atomic.Int64
	walDropped atomic.Int64

	mu         sync.Mutex
	last       time.Time
	suppressed int
}

const damageLogEvery = 10 * time.Second

// isDamage reports whether err says stored bytes are damaged.
func isDamage(err error) bool {
	return errors.Is(err, ErrCorrupt) || pebble.IsCorruptionError(err)
}

// damaged counts and logs err if it reports damage, and returns it wrapping ErrCorrupt
// so that callers can tell damage from other failures; other errors pass unchanged.
func (p *Pebble) damaged(err error) error {
	if err == nil || !isDamage(err) {
		return err
	}
	p.damage.corrupt.Add(1)
	d := &p.damage
	d.mu.Lock()
	if time.Since(d.last) >= damageLogEvery {
		p.opts.Logger.Error("store: damaged data: a read failed its checksum or did not decode; the read fails over to another replica and repair re-sends the pair (check the disk, run `tsdht fsck` on a stopped node)",
			"dir", p.dir, "err", err.Error(), "suppressed", d.suppressed)
		d.last, d.suppressed = time.Now(), 0
	} else {
		d.suppressed++
	}
	d.mu.Unlock()
	if errors.Is(err, ErrCorrupt) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrCorrupt, err)
}
