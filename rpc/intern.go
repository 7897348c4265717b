package rpc

import (
	"sync"
	"sync/atomic"
)

// maxInterned bounds the method names kept by internName: a server has a few
// dozen methods.
const maxInterned = 128

var (
	interned   atomic.Pointer[map[string]string] // read without a lock; replaced whole
	internedMu sync.Mutex                        // serialises replacements
)

// internMethod returns p as a string: the interned copy when p names a method a
// server of this process registered (no allocation), a new string otherwise. A
// peer sending made-up names costs itself a conversion each and never grows the
// table.
func internMethod(p []byte) string {
	if m := interned.Load(); m != nil {
		if s, ok := (*m)[string(p)]; ok {
			return s
		}
	}
	return string(p)
}

// internName adds a registered method's name to the table (Server.Handle), up to
// maxInterned names.
func internName(s string) {
	internedMu.Lock()
	defer internedMu.Unlock()
	old := interned.Load()
	if old != nil {
		if _, ok := (*old)[s]; ok || len(*old) >= maxInterned {
			return
		}
	}
	next := make(map[string]string, 1+lenOf(old))
	if old != nil {
		for k, v := range *old {
			next[k] = v
		}
	}
	next[s] = s
	interned.Store(&next)
}

func lenOf(m *map[string]string) int {
	if m == nil {
		return 0
	}
	return len(*m)
}
