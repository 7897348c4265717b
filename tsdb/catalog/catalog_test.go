package catalog

import (
	"math/rand"
	"reflect"
	"strings"
	"testing"

	"github.com/tsdht/tsdht/tsdb/series"
)

// randomEntry returns a valid copy of key's entry as some replica might hold it:
// versions from a small range so that ties happen.
func randomEntry(r *rand.Rand, key string) Entry {
	e := Entry{Key: key}
	if r.Intn(3) > 0 {
		e.Created = int64(1 + r.Intn(6))
		e.Type = series.Type(1 + r.Intn(3))
		if r.Intn(2) == 0 {
			e.HasBounds = true
			e.First = int64(r.Intn(100))
			e.Last = e.First + int64(r.Intn(100))
			if r.Intn(2) == 0 {
				e.HasTail = true
				e.Tail = e.First + int64(r.Intn(int(e.Last-e.First)+1))
			}
			if r.Intn(2) == 0 {
				e.HasAhead = true
				e.Ahead = e.First + int64(r.Intn(int(e.Last-e.First)+1))
			}
			if r.Intn(2) == 0 {
				e.HasNewest = true
				e.Newest = e.First + int64(r.Intn(int(e.Last-e.First)+1))
			}
		}
	}
	if r.Intn(3) > 0 {
		e.MetaVersion = int64(1 + r.Intn(6))
		e.Unit = []string{"", "Hz", "V", "rad"}[r.Intn(4)]
		e.Description = []string{"", "bus 3 frequency", "x"}[r.Intn(3)]
		e.NominalRate = float64(r.Intn(3) * 30)
		if r.Intn(2) == 0 {
			e.Tags = []Tag{{"bus", []string{"1", "3"}[r.Intn(2)]}, {"kind", "freq"}}
		}
	}
	if r.Intn(3) == 0 {
		e.Deleted = int64(1 + r.Intn(6))
	}
	e.dropDeleted()
	return e
}

func TestMergeConverges(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	for iter := 0; iter < 5000; iter++ {
		n := 2 + r.Intn(4)
		copies := make([]Entry, n)
		for i := range copies {
			copies[i] = randomEntry(r, "pmu17/bus3/freq")
			if err := copies[i].Validate(); err != nil {
				t.Fatalf("random entry invalid: %v: %+v", err, copies[i])
			}
		}
		fold := func(order []int) Entry {
			acc := copies[order[0]]
			for _, i := range order[1:] {
				acc = Merge(acc, copies[i])
			}
			return acc
		}
		want := fold(r.Perm(n))
		if err := want.Validate(); err != nil {
			t.Fatalf("merge result invalid: %v: %+v", err, want)
		}
		for k := 0; k < 5; k++ {
			if got := fold(r.Perm(n)); !Equal(got, want) {
				t.Fatalf("merge depends on order:\n%+v\n%+v\ncopies %+v", got, want, copies)
			}
		}
		// Idempotent, and a tree of merges equals a fold.
		if got := Merge(want, want); !Equal(got, want) {
			t.Fatalf("merge not idempotent: %+v vs %+v", got, want)
		}
		if n >= 3 {
			tree := Merge(Merge(copies[0], copies[1]), Merge(copies[2], fold(seq(3, n))))
			if n == 3 {
				tree = Merge(Merge(copies[0], copies[1]), copies[2])
			}
			if !Equal(tree, want) {
				t.Fatalf("merge not associative:\n%+v\n%+v", tree, want)
			}
		}
	}
}

func seq(lo, hi int) []int {
	if lo >= hi {
		return []int{lo - 1}
	}
	var s []int
	for i := lo; i < hi; i++ {
		s = append(s, i)
	}
	return s
}

func TestMergeRules(t *testing.T) {
	k := "s"
	created := Entry{Key: k, Type: series.Float, Created: 10, HasBounds: true, First: 5, Last: 9}
	wider := Entry{Key: k, Type: series.Float, Created: 10, HasBounds: true, First: 1, Last: 7}
	m := Merge(created, wider)
	if m.First != 1 || m.Last != 9 {
		t.Fatalf("bounds of one incarnation do not widen: %+v", m)
	}
	tail := Entry{Key: k, Type: series.Float, Created: 10, HasBounds: true, First: 5, Last: 9, HasTail: true, Tail: 8}
	older := Entry{Key: k, Type: series.Float, Created: 10, HasBounds: true, First: 5, Last: 9, HasTail: true, Tail: 6}
	if m2 := Merge(Merge(m, older), tail); !m2.HasTail || m2.Tail != 8 {
		t.Fatalf("the newest tail does not win: %+v", m2)
	}
	if m2 := Merge(tail, Entry{Key: k, Type: series.Float, Created: 11}); m2.HasTail || m2.HasBounds {
		t.Fatalf("a new incarnation kept the old one's tail: %+v", m2)
	}
	if bad := (Entry{Key: k, Type: series.Float, Created: 10, HasBounds: true, First: 5, Last: 9, HasTail: true, Tail: 10}); bad.Validate() == nil {
		t.Fatalf("a tail past the bounds validates")
	}
	newest := Entry{Key: k, Type: series.Float, Created: 10, HasBounds: true, First: 5, Last: 9, HasNewest: true, Newest: 8}
	if m2 := Merge(Merge(m, Entry{Key: k, Type: series.Float, Created: 10, HasBounds: true, First: 5, Last: 9, HasNewest: true, Newest: 6}), newest); !m2.HasNewest || m2.Newest != 8 {
		t.Fatalf("the newest newest does not win: %+v", m2)
	}
	if m2 := Merge(newest, Entry{Key: k, Type: series.Float, Created: 11}); m2.HasNewest {
		t.Fatalf("a new incarnation kept the old one's newest: %+v", m2)
	}
	if bad := (Entry{Key: k, Type: series.Float, Created: 10, HasBounds: true, First: 5, Last: 9, HasNewest: true, Newest: 10}); bad.Validate() == nil {
		t.Fatalf("a newest past the bounds validates")
	}
	if got, err := DecodeEntry(newest.Encode(nil)); err != nil || !reflect.DeepEqual(got, newest) {
		t.Fatalf("newest does not survive encoding: %+v, %v", got, err)
	}
	meta := Entry{Key: k, MetaVersion: 11, Unit: "Hz", Tags: []Tag{{"bus", "3"}}}
	m = Merge(m, meta)
	if !m.Live() || m.Unit != "Hz" || len(m.Tags) != 1 {
		t.Fatalf("metadata lost: %+v", m)
	}
	del := Entry{Key: k, Deleted: 12}
	m = Merge(m, del)
	if m.Live() || m.HasMeta() || m.HasBounds || m.Type != series.Unknown {
		t.Fatalf("delete kept parts: %+v", m)
	}
	// A late copy of the old incarnation (a replica that missed the delete) cannot
	// bring it back; a new incarnation after the delete can have another type.
	if m2 := Merge(created, m); m2.Live() {
		t.Fatalf("deleted incarnation resurrected: %+v", m2)
	}
	again := Entry{Key: k, Type: series.String, Created: 13}
	if m2 := Merge(m, again); !m2.Live() || m2.Type != series.String {
		t.Fatalf("new incarnation after delete: %+v", m2)
	}
	// Last writer wins on metadata.
	newer := Entry{Key: k, MetaVersion: 20, Unit: "V"}
	if m2 := Merge(newer, meta); m2.Unit != "V" || len(m2.Tags) != 0 {
		t.Fatalf("older metadata won: %+v", m2)
	}
}

func TestEntryRoundTrip(t *testing.T) {
	r := rand.New(rand.NewSource(2))
	for i := 0; i < 1000; i++ {
		e := randomEntry(r, strings.Repeat("k", 1+r.Intn(256)))
		b := e.Encode(nil)
		got, err := DecodeEntry(b)
		if err != nil {
			t.Fatalf("decode: %v", err)
		}
		if !reflect.DeepEqual(got, e) {
			t.Fatalf("round trip:\n%+v\n%+v", got, e)
		}
		// Every truncation is an error, never a panic.
		for n := 0; n < len(b); n++ {
			if _, err := DecodeEntry(b[:n]); err == nil {
				t.Fatalf("truncated to %d of %d bytes: no error", n, len(b))
			}
		}
	}
}

func TestDecodeRefusesHostileLengths(t *testing.T) {
	// A tag count that claims the maximum with no bytes behind it.
	e := Entry{Key: "k"}
	b := e.Encode(nil)
	b[len(b)-2] = MaxTags // the tag count byte
	if _, err := DecodeEntry(b); err == nil {
		t.Fatal("a tag count beyond the remaining bytes was accepted")
	}
	huge := append([]byte{entryVersion}, 0xff, 0xff, 0xff, 0xff, 0x0f)
	if _, err := DecodeEntry(huge); err == nil {
		t.Fatal("a 4 GiB key length was accepted")
	}
}

// An entry from a later build (a bounds flag bit this one does not know, its fields
// after this build's) decodes to what this build knows.
func TestDecodeEntrySkipsLaterFields(t *testing.T) {
	r := rand.New(rand.NewSource(5))
	for range 50 {
		e := randomEntry(r, "pmu/later")
		if !e.HasBounds {
			continue
		}
		b := e.Encode(nil)
		// The bounds flag byte is the first byte after the tags: find it by
		// encoding the entry without bounds, which ends at the flag.
		nb := e
		nb.HasBounds, nb.HasTail, nb.HasAhead, nb.HasNewest = false, false, false, false
		at := len(nb.Encode(nil)) - 1
		later := append([]byte(nil), b...)
		later[at] |= 16
		later = append(later, 0x05, 0xff, 0x01) // the later build's field
		got, err := DecodeEntry(later)
		if err != nil {
			t.Fatalf("an entry with a later build's field: %v", err)
		}
		if !Equal(got, e) {
			t.Fatalf("an entry with a later build's field decodes as %+v, want %+v", got, e)
		}
	}
	e := randomEntryWithBounds(t, r)
	if _, err := DecodeEntry(append(e.Encode(nil), 0)); err == nil {
		t.Fatal("trailing bytes without a later build's flag were accepted")
	}
}

func randomEntryWithBounds(t *testing.T, r *rand.Rand) Entry {
	for range 1000 {
		if e := randomEntry(r, "pmu/b"); e.HasBounds {
			return e
		}
	}
	t.Fatal("randomEntry gives no entry with bounds")
	return Entry{}
}

func FuzzDecodeEntry(f *testing.F) {
	r := rand.New(rand.NewSource(3))
	for i := 0; i < 20; i++ {
		e := randomEntry(r, "pmu/x")
		f.Add(e.Encode(nil))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := DecodeEntry(b)
		if err != nil {
			return
		}
		again, err := DecodeEntry(e.Encode(nil))
		if err != nil || !Equal(again, e) {
			t.Fatalf("re-encoding a decoded entry: %v", err)
		}
		if m := Merge(e, e); !Equal(m, e) {
			t.Fatalf("a decoded entry does not merge with itself to itself")
		}
	})
}

func TestParseTags(t *testing.T) {
	tags, err := ParseTags("kind=freq,bus=3", "station=PMU=17")
	if err != nil {
		t.Fatal(err)
	}
	if got := FormatTags(tags); got != "bus=3,kind=freq,station=PMU=17" {
		t.Fatalf("got %s", got)
	}
	for _, bad := range []string{"novalue", "=v", "k=", "a=1,a=2", "k\x01=v"} {
		if _, err := ParseTags(bad); err == nil {
			t.Errorf("ParseTags(%q) accepted", bad)
		}
	}
	many := make([]string, MaxTags+1)
	for i := range many {
		many[i] = "k" + strings.Repeat("x", i) + "=v"
	}
	if _, err := ParseTags(many...); err == nil || !strings.Contains(err.Error(), "at most") {
		t.Errorf("%d tags accepted: %v", len(many), err)
	}
	if !Matches(tags, []Tag{{"bus", "3"}, {"kind", "freq"}}) || Matches(tags, []Tag{{"bus", "4"}}) {
		t.Error("Matches")
	}
}

func TestPrefixIndex(t *testing.T) {
	got := PrefixTags("pmu17/bus3/freq")
	if len(got) != 2 || got[0].V != "pmu17/" || got[1].V != "pmu17/bus3/" {
		t.Fatalf("PrefixTags: %v", got)
	}
	if n := len(PrefixTags("a/b/c/d/e/f/g")); n != MaxPrefixDepth {
		t.Fatalf("depth %d", n)
	}
	// Every prefix P of a key is answered by a posting that lists the key.
	keys := []string{"pmu17/bus3/freq", "db/m,host=a#value", "up{job=\"x\"}", "a/b/c/d/e/f/g", "x/"}
	for _, key := range keys {
		posted := map[Tag]bool{}
		for _, tg := range IndexTags(key, nil) {
			posted[tg] = true
		}
		for i := 0; i <= len(key); i++ {
			p := key[:i]
			if q, ok := PrefixQuery(p); ok {
				if !posted[q] {
					t.Errorf("prefix %q of %q: posting %v does not list it", p, key, q)
				}
			} else if !posted[AllTag(key)] {
				t.Errorf("all-series bucket of %q missing", key)
			}
		}
	}
	for _, tg := range IndexTags("pmu17/bus3/freq", []Tag{{"bus", "3"}}) {
		if err := ValidateIndexTag(tg); err != nil {
			t.Errorf("%q: %v", tg, err)
		}
	}
}

func TestMergeMember(t *testing.T) {
	add := Member{Key: "s", Version: 5}
	rm := Member{Key: "s", Version: 5, Removed: true}
	if !MergeMember(add, rm).Removed || !MergeMember(rm, add).Removed {
		t.Fatal("a tie does not go to the removal")
	}
	if MergeMember(rm, Member{Key: "s", Version: 6}).Removed {
		t.Fatal("a later add lost")
	}
	m, err := DecodeMemberState("s", EncodeMemberState(rm))
	if err != nil || m != rm {
		t.Fatalf("member state round trip: %+v %v", m, err)
	}
	if _, err := DecodeMemberState("s", []byte{0x02, 0x05}); err == nil {
		t.Fatal("bad flag accepted")
	}
	if got := Intersect([]string{"a", "b", "c"}, []string{"b", "c", "d"}, []string{"c"}); !reflect.DeepEqual(got, []string{"c"}) {
		t.Fatalf("Intersect: %v", got)
	}
}

func TestInternalSeriesIndexedByNoTag(t *testing.T) {
	if got := IndexTags(InternalPrefix+"uplink/u1/db/m#v", []Tag{{"k", "v"}}); len(got) != 0 {
		t.Fatalf("an internal series is indexed by %v; want no tag", got)
	}
	if got := IndexTags("__tsdhtx/a", nil); len(got) == 0 {
		t.Fatal("a key that only resembles the internal prefix is not indexed")
	}
}
