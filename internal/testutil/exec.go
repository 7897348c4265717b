package testutil

import (
	"bytes"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// SyncBuffer is a bytes.Buffer safe for concurrent use: a process's output written
// by exec's copying goroutine while the test reads it.
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Bytes returns a copy of what was written.
func (b *SyncBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.buf.Bytes())
}

// RunCmd runs cmd with stdin and returns its stdout, its stderr and its exit code;
// only a command that could not run at all fails the test.
func RunCmd(t testing.TB, cmd *exec.Cmd, stdin string) (stdout, stderr string, code int) {
	t.Helper()
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run %v: %v", cmd.Args, err)
	}
	return out.String(), errb.String(), code
}

// StartLogged starts cmd with its stdout and stderr in one log, stops it (SIGTERM) when
// the test ends, and shows the log under what if the test failed.
func StartLogged(t testing.TB, what string, cmd *exec.Cmd) {
	t.Helper()
	var log SyncBuffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", what, err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
		if t.Failed() {
			t.Logf("%s log:\n%s", what, log.String())
		}
	})
}
