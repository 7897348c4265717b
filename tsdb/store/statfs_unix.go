//go:build linux || darwin || freebsd

package store

import "syscall"

// freeBytes returns the bytes an unprivileged writer may still use on the filesystem
// holding path.
func freeBytes(path string) (int64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		return 0, err
	}
	free := uint64(st.Bavail) * uint64(st.Bsize)
	return int64(min(free, 1<<62)), nil
}
