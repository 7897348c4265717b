package wire

import "fmt"

// MethodTypes asks a registry replica for many series' types and quanta at once:
// KeysReq → TypesResp, a TypeResp per key asked, in order (Known false for a series
// it has never heard of). What a coordinator asks when it reads many series it has
// not cached (coord.Registry.lookupMany): one request per registry replica, not one
// per series.
const MethodTypes = "tsdb.types"

// MaxTypesPerRequest bounds the keys of one MethodTypes request: a replica refuses
// more, and a coordinator asks for more in several requests. Keys of up to 256 bytes
// keep a request of this many well inside an RPC frame.
const MaxTypesPerRequest = 1024

// TypesResp answers a MethodTypes request: one TypeResp per key asked, in order.
type TypesResp struct {
	Decls []TypeResp `msgpack:"d"`
}

// CheckTypesReq refuses a MethodTypes request of more keys than MaxTypesPerRequest.
func CheckTypesReq(req *KeysReq) error {
	if n := len(req.Keys); n > MaxTypesPerRequest {
		return fmt.Errorf("%s: %d keys in one request; at most %d: ask in parts", MethodTypes, n, MaxTypesPerRequest)
	}
	return nil
}

// CheckTypesResp refuses an answer to a MethodTypes request of asked keys that does
// not hold one declaration per key.
func CheckTypesResp(resp *TypesResp, asked int) error {
	if len(resp.Decls) != asked {
		return fmt.Errorf("%s: %d declarations for %d keys", MethodTypes, len(resp.Decls), asked)
	}
	return nil
}
