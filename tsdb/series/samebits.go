package series

import "math"

// SameBits reports whether p and q hold the same timestamps and bit-identical values:
// a float's sign of zero and its NaN payload count, as they do in what is stored or
// sent on.
func SameBits(p, q *Points) bool {
	if p.Len() != q.Len() || p.Len() > 0 && p.Type != q.Type {
		return false
	}
	for i := range p.T {
		if p.T[i] != q.T[i] {
			return false
		}
		switch p.Type {
		case Float:
			if math.Float64bits(p.F[i]) != math.Float64bits(q.F[i]) {
				return false
			}
		case Int:
			if p.I[i] != q.I[i] {
				return false
			}
		case String:
			if p.S[i] != q.S[i] {
				return false
			}
		}
	}
	return true
}
