package coord

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// TestSeriesBudget: a PutMany past the budget of new series a write is refused whole,
// storing nothing and charging nothing; series admitted by AdmitSeries (as httpapi does
// before gathering requests) are not charged again by their PutMany, nor are duplicate
// keys, nor known series; past the budget per second the refusal says when to retry.
func TestSeriesBudget(t *testing.T) {
	c := oneNode(t, func(cfg *Config) { cfg.NewSeriesPerRequest, cfg.NewSeriesPerSecond = 10, 0.001 })
	ctx := context.Background()
	now := time.Now().UnixNano()
	puts := func(prefix string, n int) []SeriesPut {
		out := make([]SeriesPut, n)
		for i := range out {
			var p series.Points
			p.AppendFloat(now, float64(i))
			out[i] = SeriesPut{Key: prefix + strconv.Itoa(i), Points: p}
		}
		return out
	}
	code := func(err error) string {
		var be *BudgetError
		if errors.As(err, &be) {
			return be.ErrorCode()
		}
		return ""
	}

	for i, r := range c.PutMany(ctx, puts("a", 11), wire.PutOptions{}) {
		if code(r.Err) != wire.CodeTooManySeries || r.Stored != 0 {
			t.Fatalf("series %d of 11 new: stored %d, %v; want %s", i, r.Stored, r.Err, wire.CodeTooManySeries)
		}
	}
	if _, err := c.types.lookup(ctx, "a0"); err == nil {
		t.Fatal("a series of the refused write was declared")
	}
	// The refusal charged nothing: 10 new series, twice the same key among them, pass.
	ten := puts("b", 10)
	if err := c.AdmitSeries([]string{"b0", "b0", "b1", "b2", "b3", "b4", "b5", "b6", "b7", "b8", "b9"}); err != nil {
		t.Fatal(err)
	}
	for i, r := range c.PutMany(ctx, ten, wire.PutOptions{}) { // admitted already: not charged again
		if r.Err != nil || r.Stored != 1 {
			t.Fatalf("admitted series %d: stored %d, %v", i, r.Stored, r.Err)
		}
	}
	// The bucket is empty: known series still pass, a new one is told when to retry.
	for i, r := range c.PutMany(ctx, ten, wire.PutOptions{}) {
		if r.Err != nil {
			t.Fatalf("known series %d with the budget spent: %v", i, r.Err)
		}
	}
	r := c.PutMany(ctx, puts("c", 1), wire.PutOptions{})[0]
	var be *BudgetError
	if !errors.As(r.Err, &be) || be.ErrorCode() != wire.CodeSlowDown || be.RetryAfter < time.Minute {
		t.Fatalf("a new series with the budget spent: %v; want %s with a retry over a minute away", r.Err, wire.CodeSlowDown)
	}
}
