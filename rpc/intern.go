package rpc

import (
	"sync"
	"sync/atomic"
)

// maxInterned bounds the method names kept by internMethod: a server has a few
// dozen methods, and a peer sending made-up names must not grow the table.
const maxInterned = 128

var (
	interned   atomic.Pointer[map[string]string] // read without a lock; replaced whole
	internedMu sync.Mutex                        // serialises replacements
)

// internMethod returns p as a string, the same string for the same name every
// time once the name is known: a server decodes a method name for every
// request, and looking it up costs no allocation where converting it would.
// After maxInterned names, new ones are converted each time.
func internMethod(p []byte) string {
	if m := interned.Load(); m != nil {
		if s, ok := (*m)[string(p)]; ok {
			return s
		}
	}
	s := string(p)
	internedMu.Lock()
	defer internedMu.Unlock()
	old := interned.Load()
	if old != nil && len(*old) >= maxInterned {
		return s
	}
	next := make(map[string]string, 1+lenOf(old))
	if old != nil {
		for k, v := range *old {
			next[k] = v
		}
	}
	next[s] = s
	interned.Store(&next)
	return s
}

func lenOf(m *map[string]string) int {
	if m == nil {
		return 0
	}
	return len(*m)
}
