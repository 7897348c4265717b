package store

import (
	"errors"
	"fmt"

	"github.com/tsdht/tsdht/quanta"
)

// DeclaresMany is a Registry that declares many series at the cost of about one: the
// records of the new ones in one commit and, with SyncAlways, one disk sync. A write
// of line protocol that names a few dozen new series sends their declarations to each
// registry replica in one request (wire.MethodDeclareMany); declared one by one, each
// in its own synced commit, they cost that replica a sync each (the engine's group
// commit shares some, not most).
type DeclaresMany interface {
	// DeclareSeriesMany declares each of keys as DeclareSeries would with ds[i], in
	// order, and returns each one's answer: a declaration refused (a type mismatch, an
	// invalid key) refuses that one alone. What it reports as declared is durable when
	// it returns, as DeclareSeries' is.
	DeclareSeriesMany(keys []string, ds []Decl) ([]Decl, []error)
}

// checkDecl refuses a declaration DeclareSeries would refuse before it looks at the
// store.
func checkDecl(key string, d Decl) error {
	if err := validDeclaration(key, d.Type); err != nil {
		return err
	}
	if d.Quantum < 0 || d.Quantum > quanta.MaxQuantum {
		return fmt.Errorf("series %q: quantum %ds: must be 1s..%v", key, d.Quantum, quanta.MaxQuantum.Duration())
	}
	return nil
}

// DeclareSeriesMany implements DeclaresMany: the records of the series new to this
// store go in one batch, committed once and synced once (commitLater, durable), and
// each series' claim is settled only once that sync is done, so no other writer takes
// the type as stored before it is on disk. A series this store holds already costs a
// read at most (settleQuantum, which commits alone when it learns a quantum).
func (p *Pebble) DeclareSeriesMany(keys []string, ds []Decl) ([]Decl, []error) {
	out, errs := make([]Decl, len(keys)), make([]error, len(keys))
	if !p.enter() {
		for i := range errs {
			errs[i] = ErrClosed
		}
		return out, errs
	}
	defer p.state.RUnlock()
	var claimed []int // of keys: their record is in b
	claims := make([]typeClaim, len(keys))
	var known []int           // of keys: the store holds their type
	first := map[string]int{} // of keys claimed: where each was first named
	var again [][2]int        // a key named again, and where it was first
	count := int64(0)
	b := p.db.NewBatch()
	defer b.Close()
	var err error
	for i, key := range keys {
		if errs[i] = checkDecl(key, ds[i]); errs[i] != nil {
			continue
		}
		if j, ok := first[key]; ok {
			// Named again: the first declaration of the batch is the one recorded.
			if ds[j].Type != ds[i].Type {
				out[i], errs[i] = Decl{Type: ds[j].Type}, mismatch(key, ds[j].Type, ds[i].Type)
				continue
			}
			again = append(again, [2]int{i, j})
			continue
		}
		cl, have, cerr := p.types.claim(key, ds[i].Type, p.loadType)
		if cerr != nil {
			out[i], errs[i] = Decl{Type: have}, cerr
			continue
		}
		if !cl.writeMeta {
			known = append(known, i)
			continue
		}
		claims[i] = cl
		claimed = append(claimed, i)
		first[key] = i
		if cl.count {
			count++
		}
		if err == nil {
			err = b.Set(metaKey(key), declValue(ds[i]), nil)
		}
	}
	if len(claimed) > 0 {
		if err == nil && count > 0 {
			err = b.Merge(countersKey, counters{series: count}.encode(), nil)
		}
		if err == nil {
			err = errors.Join(p.failure(), p.space.check())
		}
		if err == nil {
			err = p.commitLater(b)
		}
		if err == nil {
			err = p.durable()
		}
		for _, i := range claimed {
			p.types.settle(keys[i], claims[i], err == nil)
			if err != nil {
				errs[i] = fmt.Errorf("store: declare %q: %w", keys[i], err)
				continue
			}
			out[i] = ds[i]
		}
		if err == nil {
			p.series.Add(count)
		}
	}
	for _, i := range known {
		out[i], errs[i] = p.settleQuantum(keys[i], ds[i])
	}
	for _, ij := range again {
		out[ij[0]], errs[ij[0]] = out[ij[1]], errs[ij[1]]
	}
	return out, errs
}

// DeclareSeriesMany implements DeclaresMany: one DeclareSeries after another (a
// declaration in memory costs no sync to share).
func (m *Mem) DeclareSeriesMany(keys []string, ds []Decl) ([]Decl, []error) {
	out, errs := make([]Decl, len(keys)), make([]error, len(keys))
	for i, k := range keys {
		out[i], errs[i] = m.DeclareSeries(k, ds[i])
	}
	return out, errs
}
