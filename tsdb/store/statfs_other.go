//go:build !(linux || darwin || freebsd)

package store

import "errors"

// freeBytes is unknown on this platform: the free-space check is off.
func freeBytes(string) (int64, error) { return 0, errors.New("free space unknown on this platform") }
