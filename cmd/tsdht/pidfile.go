package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// pidFileName is the file in --data that names the process running a node on it: written
// once the store's lock is held, removed on a clean exit, read when the lock is taken.
const pidFileName = "tsdht.pid"

// writePIDFile records this process as the owner of dir.
func writePIDFile(dir string) error {
	return os.WriteFile(filepath.Join(dir, pidFileName), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644)
}

func removePIDFile(dir string) { os.Remove(filepath.Join(dir, pidFileName)) }

// dirInUse turns the storage engine's lock error into one a person can act on, naming the
// process that holds dir when its pid file says so. Other errors are returned as they are.
func dirInUse(dir string, err error) error {
	if !errors.Is(err, syscall.EAGAIN) && !strings.Contains(err.Error(), "resource temporarily unavailable") {
		return err
	}
	who := "another process"
	if b, rerr := os.ReadFile(filepath.Join(dir, pidFileName)); rerr == nil {
		if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); perr == nil {
			who = fmt.Sprintf("another tsdht node (pid %d)", pid)
		}
	}
	return fmt.Errorf("--data %s is in use by %s: stop it, or give this node its own --data directory", dir, who)
}
