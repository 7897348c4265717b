package wire

import (
	"reflect"
	"strings"
	"testing"

	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/series"
)

// A MethodTypes request and its answer come back as they were sent, and the limits
// refuse what they must.
func TestTypesRoundTrip(t *testing.T) {
	req := &KeysReq{Keys: []string{"a", "pmu17/bus3/vang", strings.Repeat("k", 256)}}
	resp := &TypesResp{Decls: []TypeResp{
		{Known: true, Type: series.Float},
		{Known: true, Type: series.Int, Quantum: 3600},
		{Known: true, Type: series.String, NoQuantum: true},
		{},
	}}
	for _, m := range []any{req, resp} {
		b, err := rpc.Encode(m)
		if err != nil {
			t.Fatal(err)
		}
		got := reflect.New(reflect.TypeOf(m).Elem()).Interface()
		if err := rpc.Decode(b, got); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, m) {
			t.Errorf("%T: got %+v, want %+v", m, got, m)
		}
	}
	if err := CheckTypesReq(&KeysReq{Keys: make([]string, MaxTypesPerRequest)}); err != nil {
		t.Errorf("%d keys: %v", MaxTypesPerRequest, err)
	}
	if err := CheckTypesReq(&KeysReq{Keys: make([]string, MaxTypesPerRequest+1)}); err == nil || !strings.Contains(err.Error(), "ask in parts") {
		t.Errorf("%d keys: %v; want a refusal saying to ask in parts", MaxTypesPerRequest+1, err)
	}
	if err := CheckTypesResp(resp, 4); err != nil {
		t.Error(err)
	}
	if err := CheckTypesResp(resp, 3); err == nil {
		t.Error("an answer of 4 declarations to 3 keys passed")
	}
}
