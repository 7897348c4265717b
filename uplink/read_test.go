package uplink

import "testing"

// TestReadGroupEnd: a pass reads at most readGroup series at once, and stops reading
// once what the series found last time fills the batch's room, so that a full batch
// does not decode series it cannot send.
func TestReadGroupEnd(t *testing.T) {
	mk := func(ns ...int) []*state {
		sts := make([]*state, len(ns))
		for i, n := range ns {
			sts[i] = &state{lastN: n}
		}
		return sts
	}
	for _, tc := range []struct {
		last     []int
		i, room  int
		want     int
		scenario string
	}{
		{make([]int, 40), 0, MaxBatchPoints, readGroup, "nothing read yet: a whole group"},
		{make([]int, 40), 32, MaxBatchPoints, 40, "the last, short group"},
		{[]int{600, 600, 600, 600}, 0, 1000, 2, "the second series fills the room: read, sent in part"},
		{[]int{600, 600, 600, 600}, 1, 600, 2, "room for exactly one"},
		{[]int{600, 600, 600, 600}, 3, 1, 4, "at least one series"},
	} {
		if got := readGroupEnd(mk(tc.last...), tc.i, tc.room); got != tc.want {
			t.Errorf("%s: readGroupEnd(%v, %d, %d) = %d, want %d", tc.scenario, tc.last, tc.i, tc.room, got, tc.want)
		}
	}
}
