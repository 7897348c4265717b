package rollup

import (
	"errors"
	"fmt"
	"time"

	"github.com/tsdht/tsdht/quanta"
)

// Config configures rollups (tsdb.Config.Rollups). The zero value is the default:
// rollups on, at the default levels the quantum divides. Every node of a cluster must
// be configured alike: a coordinator with rollups off does not mark late writes dirty
// at homes with rollups on.
type Config struct {
	// Off turns rollups off. On (the default), this node keeps rollups for the series
	// it is a home of, marks late writes and deletes at the homes, and answers
	// aggregates from them (On).
	Off bool
	// Levels are the window widths kept, finest first, each a multiple of the previous
	// and the finest a multiple of the quantum. Default 1 minute, 1 hour and 1 day,
	// without those that are not multiples of the quantum.
	Levels []time.Duration
	// Horizon is how far behind now a home holds windows: windows ending later are
	// answered from the raw shards. Writes older than now − Horizon/2 mark their windows
	// dirty at the homes, so clocks of the cluster must agree within Horizon/2. At least
	// two quanta. Default 2 minutes, or two quanta if longer.
	Horizon time.Duration
	// PullInterval is how often a home pulls what changed: dirty and unsettled windows,
	// and the windows that passed the horizon. A pass with nothing to pull costs nothing
	// but a look at its series. Default 15 seconds.
	PullInterval time.Duration
	// MaxSeries bounds the series one home keeps rollups of; past it a home answers
	// that it holds nothing of a new series (its aggregates come from the raw shards).
	// A home starts keeping a series when a coordinator first asks it. What a home
	// holds in memory is at most MaxSeries × (about 200 bytes + MaxMarks × about 50
	// bytes); the windows themselves are in the store. Default 4096.
	MaxSeries int
	// MaxMarks bounds the finest windows of one series a home holds marked (dirty, or
	// unsettled after a pull the replicas disagreed on) in memory; past it the home
	// pulls everything from the oldest marked window again instead. Default 4096.
	MaxMarks int
	// Retention says, per level (in the order of Levels), how long a home keeps its
	// windows; 0 keeps them forever. A window older than its level's retention is no
	// longer answered from (reads use a coarser level or the raw shards) and is deleted
	// from the store within 10 minutes. It is independent of the raw data's retention
	// (store.PebbleOptions.Retention, `tsdht node --retention`): levels kept longer than
	// the raw data keep answering for it. Default: 90 days for levels under an hour,
	// forever for the others. Fewer entries than levels: the rest take the default.
	Retention []time.Duration
}

// maxLevels bounds Levels.
const maxLevels = 8

// defaultRetention returns the default retention of a level of width w.
func defaultRetention(w time.Duration) time.Duration {
	if w < time.Hour {
		return 90 * 24 * time.Hour
	}
	return 0
}

// DefaultConfig returns the defaults (rollups on) for quantum q.
func DefaultConfig(q quanta.Quantum) Config {
	var levels []time.Duration
	for _, d := range []time.Duration{time.Minute, time.Hour, 24 * time.Hour} {
		if d%q.Duration() == 0 {
			levels = append(levels, d)
		}
	}
	c := Config{Levels: levels, Horizon: max(2*time.Minute, 2*q.Duration()), PullInterval: 15 * time.Second, MaxSeries: 4096, MaxMarks: 4096}
	for _, l := range levels {
		c.Retention = append(c.Retention, defaultRetention(l))
	}
	return c
}

// WithDefaults returns c with zero fields set to the defaults for quantum q.
func (c Config) WithDefaults(q quanta.Quantum) Config {
	d := DefaultConfig(q)
	if len(c.Levels) == 0 {
		c.Levels = d.Levels
	}
	if c.Horizon == 0 {
		c.Horizon = d.Horizon
	}
	if c.PullInterval == 0 {
		c.PullInterval = d.PullInterval
	}
	if c.MaxSeries == 0 {
		c.MaxSeries = d.MaxSeries
	}
	if c.MaxMarks == 0 {
		c.MaxMarks = d.MaxMarks
	}
	ret := make([]time.Duration, len(c.Levels))
	for i, l := range c.Levels {
		if i < len(c.Retention) {
			ret[i] = c.Retention[i]
		} else {
			ret[i] = defaultRetention(l)
		}
	}
	c.Retention = ret
	return c
}

// Validate reports settings that cannot work with quantum q.
func (c Config) Validate(q quanta.Quantum) error {
	var errs []error
	if len(c.Retention) > max(len(c.Levels), len(DefaultConfig(q).Levels)) {
		errs = append(errs, fmt.Errorf("rollups: %d retentions for fewer levels: give one per level, in the order of the levels", len(c.Retention)))
	}
	for _, d := range c.Retention {
		if d < 0 {
			errs = append(errs, fmt.Errorf("rollups: retention %v: must not be negative (0 keeps a level forever)", d))
		}
	}
	c = c.WithDefaults(q)
	if len(c.Levels) > maxLevels {
		errs = append(errs, fmt.Errorf("rollups: %d levels, at most %d", len(c.Levels), maxLevels))
	}
	for i, l := range c.Levels {
		switch {
		case l <= 0 || l%q.Duration() != 0:
			errs = append(errs, fmt.Errorf("rollups: level %v: must be a positive multiple of the quantum %v", l, q.Duration()))
		case i > 0 && (l <= c.Levels[i-1] || l%c.Levels[i-1] != 0):
			errs = append(errs, fmt.Errorf("rollups: level %v: must be a larger multiple of the level before it (%v)", l, c.Levels[i-1]))
		}
	}
	if c.Horizon < 0 || c.PullInterval < 0 || c.MaxSeries < 0 || c.MaxMarks < 0 {
		errs = append(errs, errors.New("rollups: horizon, pull interval, max series and max marks must not be negative (0 takes the default)"))
	}
	if c.Horizon > 0 && c.Horizon < 2*q.Duration() {
		errs = append(errs, fmt.Errorf("rollups: horizon %v: must be at least two quanta (%v)", c.Horizon, 2*q.Duration()))
	}
	return errors.Join(errs...)
}

// On reports whether c (with its defaults set: WithDefaults) keeps rollups: not Off,
// and some level to keep. A quantum that divides none of the default levels leaves
// rollups off unless Levels names some.
func (c Config) On() bool { return !c.Off && len(c.Levels) > 0 }

// widths returns the levels in ns.
func (c Config) widths() []int64 {
	out := make([]int64, len(c.Levels))
	for i, l := range c.Levels {
		out[i] = l.Nanoseconds()
	}
	return out
}
