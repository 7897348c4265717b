package wire

import "fmt"

// MethodDeclareMany fixes the types and quanta of many series at one of their registry
// replicas: DeclareManyReq → DeclareManyResp, one answer per item, in order. A write's
// new series are declared in one request per registry replica, not one each. A
// replica that does not know it answers rpc.CodeUnknownMethod, and the caller declares
// each series alone (MethodDeclare).
const MethodDeclareMany = "tsdb.declare.many"

// DeclareManyReq is the declarations of MethodDeclareMany: at most
// MaxEntriesPerRequest.
type DeclareManyReq struct {
	Items []TypeReq `msgpack:"i"`
}

// Check refuses a request of more items than one may carry, saying what to do.
func (r *DeclareManyReq) Check() error {
	if len(r.Items) > MaxEntriesPerRequest {
		return fmt.Errorf("%d declarations in one request; at most %d: send fewer at a time", len(r.Items), MaxEntriesPerRequest)
	}
	return nil
}

// DeclareManyResp answers each item of a DeclareManyReq: what the replica holds
// (Items[i]) or, when Codes[i] is not empty, why it refused (an rpc.RemoteError's code
// and message: CodeTypeMismatch for another type).
type DeclareManyResp struct {
	Items []TypeResp `msgpack:"i"`
	Codes []string   `msgpack:"c"`
	Msgs  []string   `msgpack:"m"`
}
