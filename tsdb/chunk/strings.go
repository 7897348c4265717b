package chunk

import (
	"encoding/binary"

	"github.com/tsdht/tsdht/tsdb/series"
)

// A string column is stored in one of two modes, whichever is smaller:
//
//	stringPlain byte 0, int stream of lengths, then the strings' bytes back to back
//	stringDict  byte 1, uvarint d, d × (uvarint length, bytes) in order of first use,
//	            then an int stream of dictionary indices
//
// Status and state strings repeat: a dictionary stores each once, and a run of one
// state is a run of equal indices, which the int stream packs into almost nothing.
const (
	stringPlain = 0
	stringDict  = 1
)

// appendStrings appends the smaller string column encoding of vals.
func appendStrings(dst []byte, vals []string, s *scratch) []byte {
	lens := s.mant[:0]
	for _, v := range vals {
		lens = append(lens, int64(len(v)))
	}
	plain := appendInts(append(s.floatBuf[:0], stringPlain), lens, &s.ints)
	for _, v := range vals {
		plain = append(plain, v...)
	}
	s.floatBuf = plain

	// A dictionary pays only when values repeat; give up once it would hold more than
	// half of the values.
	index := make(map[string]int64)
	dict := append(s.decBuf[:0], stringDict)
	idx := lens[:0]
	for _, v := range vals {
		i, ok := index[v]
		if !ok {
			if len(index) > len(vals)/2 {
				s.mant = idx
				return append(dst, plain...)
			}
			i = int64(len(index))
			index[v] = i
		}
		idx = append(idx, i)
	}
	s.mant = idx
	dict = binary.AppendUvarint(dict, uint64(len(index)))
	seen := int64(0)
	for j, v := range vals {
		if idx[j] == seen { // first use, in index order
			dict = binary.AppendUvarint(dict, uint64(len(v)))
			dict = append(dict, v...)
			seen++
		}
	}
	dict = appendInts(dict, idx, &s.ints)
	s.decBuf = dict
	if len(dict) < len(plain) {
		return append(dst, dict...)
	}
	return append(dst, plain...)
}

// decodeStrings reads a string column of n values and returns the rest of b.
func decodeStrings(b []byte, n int, out []string, s *scratch) ([]string, []byte, error) {
	if len(b) < 1 {
		return out, nil, errShort
	}
	mode := b[0]
	b = b[1:]
	switch mode {
	case stringPlain:
		lens, rest, err := decodeInts(b, n, s.mant, s.ver)
		s.mant = lens
		if err != nil {
			return out, nil, err
		}
		total := 0
		for _, l := range lens {
			if l < 0 || l > series.MaxStringValueLen {
				return out, nil, corrupt("string length %d", l)
			}
			total += int(l)
			if total > len(rest) {
				return out, nil, errShort
			}
		}
		// One allocation for all values: they share the chunk's backing string.
		all := string(rest[:total])
		off := 0
		for _, l := range lens {
			out = append(out, all[off:off+int(l)])
			off += int(l)
		}
		return out, rest[total:], nil
	case stringDict:
		d, m := binary.Uvarint(b)
		if m <= 0 || d == 0 || d > uint64(n) || d > uint64(len(b)) {
			return out, nil, corrupt("dictionary size")
		}
		b = b[m:]
		dict := make([]string, 0, d)
		for range d {
			l, m := binary.Uvarint(b)
			if m <= 0 || l > series.MaxStringValueLen || l > uint64(len(b)-m) {
				return out, nil, corrupt("dictionary entry")
			}
			dict = append(dict, string(b[m:m+int(l)]))
			b = b[m+int(l):]
		}
		idx, rest, err := decodeInts(b, n, s.mant, s.ver)
		s.mant = idx
		if err != nil {
			return out, nil, err
		}
		for _, i := range idx {
			if i < 0 || i >= int64(len(dict)) {
				return out, nil, corrupt("dictionary index %d", i)
			}
			out = append(out, dict[i])
		}
		return out, rest, nil
	}
	return out, nil, corrupt("string mode %d", mode)
}
