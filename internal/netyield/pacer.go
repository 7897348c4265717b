package netyield

// Pacer yields the core once every so much work, for a computation whose steps
// differ in cost and whose length its input decides (a request's body parsed, an
// answer encoded): the caller counts each step's work with Spend, in whatever unit
// it measures work in, and the Pacer yields (Yield, or the function it was given)
// each time Every units have passed since its last yield. A nil *Pacer never yields,
// so that code shared with paths that need no pacing can take one and pass nil.
type Pacer struct {
	every int
	done  int    // units spent since the last yield
	yield func() // what a yield calls
	n     int    // yields so far
}

// NewPacer returns a Pacer that calls yield (nil: Yield) once every every units spent;
// every must be positive.
func NewPacer(every int, yield func()) *Pacer {
	if every <= 0 {
		panic("netyield: NewPacer with a non-positive interval")
	}
	if yield == nil {
		yield = Yield
	}
	return &Pacer{every: every, yield: yield}
}

// Spend counts n units of work done, and yields if Every have been done since the
// last yield (once, however many n holds: the work is behind, not ahead). What the
// step did past the interval counts toward the next: a yield every Every units on
// average, wherever the steps end.
func (p *Pacer) Spend(n int) {
	if p == nil {
		return
	}
	if p.done += n; p.done < p.every {
		return
	}
	p.done %= p.every
	p.n++
	p.yield()
}

// Yields is how many times the Pacer has yielded.
func (p *Pacer) Yields() int {
	if p == nil {
		return 0
	}
	return p.n
}
