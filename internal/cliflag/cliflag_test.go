package cliflag

import (
	"reflect"
	"testing"
)

func TestSplitAddrs(t *testing.T) {
	for in, want := range map[string][]string{
		"":                 nil,
		" , ,":             nil,
		"a:1":              {"a:1"},
		" a:1 ,b:2,, c:3 ": {"a:1", "b:2", "c:3"},
		"qfi,kfi":          {"qfi", "kfi"},
	} {
		if got := SplitAddrs(in); !reflect.DeepEqual(got, want) {
			t.Errorf("SplitAddrs(%q) = %q, want %q", in, got, want)
		}
	}
}
