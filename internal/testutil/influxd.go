package testutil

import (
	"fmt"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"syscall"
	"testing"
	"time"
)

// NeedTool returns the path of command cmd, installing Debian package pkg when it is
// missing; it skips the test under -short and fails it when it cannot install. The
// tests that compare tsdht with other software (InfluxDB, Prometheus, their clients)
// get it this way.
func NeedTool(t testing.TB, cmd, pkg string) string {
	t.Helper()
	if testing.Short() {
		t.Skipf("-short: skipping a test that drives %s", cmd)
	}
	if p, err := exec.LookPath(cmd); err == nil {
		return p
	}
	if out, err := exec.Command("apt-get", "install", "-y", pkg).CombinedOutput(); err != nil {
		if out2, err2 := exec.Command("sh", "-c", "apt-get update && apt-get install -y "+pkg).CombinedOutput(); err2 != nil {
			t.Fatalf("installing %s for %s: %v\n%s\n%s", pkg, cmd, err2, out, out2)
		}
	}
	p, err := exec.LookPath(cmd)
	if err != nil {
		t.Fatalf("%s installed but %s not found in $PATH: %v", pkg, cmd, err)
	}
	return p
}

// StartInfluxd runs InfluxDB 1.x, the reference the HTTP API is compared with, on
// loopback with a configuration of its own, and returns its HTTP address once /ping
// answers. The test's cleanup stops it and, when the test failed, logs its output.
func StartInfluxd(t testing.TB) string {
	t.Helper()
	return NewInfluxd(t).Addr
}

// StartInfluxdDir is StartInfluxd that also returns InfluxDB's directory: its data in
// dir/data, its WAL in dir/wal (where influx_inspect export reads them).
func StartInfluxdDir(t testing.TB) (addr, dir string) {
	t.Helper()
	i := NewInfluxd(t)
	return i.Addr, i.Dir
}

// Influxd is InfluxDB 1.x on loopback that a test can stop and start again on its
// data (a central store that goes away and comes back).
type Influxd struct {
	Addr    string // HTTP, HOST:PORT
	Dir     string // data in Dir/data, WAL in Dir/wal
	bin, cf string
	cmd     *exec.Cmd
	log     SyncBuffer
}

// NewInfluxd starts InfluxDB as StartInfluxd does and returns it running.
func NewInfluxd(t testing.TB) *Influxd {
	t.Helper()
	bin := NeedTool(t, "influxd", "influxdb")
	dir := t.TempDir()
	addr := FreeAddr(t)
	conf := fmt.Sprintf(`reporting-disabled = true
bind-address = %q
[meta]
  dir = %q
[data]
  dir = %q
  wal-dir = %q
  query-log-enabled = false
[http]
  bind-address = %q
  log-enabled = false
[monitor]
  store-enabled = false
`, FreeAddr(t), filepath.Join(dir, "meta"), filepath.Join(dir, "data"), filepath.Join(dir, "wal"), addr)
	cfg := filepath.Join(dir, "influxdb.conf")
	if err := os.WriteFile(cfg, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	i := &Influxd{Addr: addr, Dir: dir, bin: bin, cf: cfg}
	i.Start(t)
	t.Cleanup(func() {
		i.Stop()
		if t.Failed() {
			t.Logf("influxd log:\n%s", i.log.String())
		}
	})
	return i
}

// Start starts InfluxDB (again) and waits until /ping answers.
func (i *Influxd) Start(t testing.TB) {
	t.Helper()
	i.cmd = exec.Command(i.bin, "-config", i.cf)
	i.cmd.Stdout, i.cmd.Stderr = &i.log, &i.log
	if err := i.cmd.Start(); err != nil {
		t.Fatalf("starting influxd: %v", err)
	}
	WaitHTTP(t, "http://"+i.Addr+"/ping", time.Minute)
}

// Stop stops InfluxDB (SIGTERM) and waits for it; its data stays for Start.
func (i *Influxd) Stop() {
	if i.cmd == nil || i.cmd.ProcessState != nil {
		return
	}
	i.cmd.Process.Signal(syscall.SIGTERM)
	i.cmd.Wait()
}

// WaitHTTP waits until a GET of url answers 2xx.
func WaitHTTP(t testing.TB, url string, within time.Duration) {
	t.Helper()
	WaitNoError(t, within, func() error {
		resp, err := http.Get(url)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			return fmt.Errorf("status %s", resp.Status)
		}
		return nil
	}, "%s to answer 2xx", url)
}

// SameJSON reports whether two decoded JSON values are equal, numbers to 1e-9
// relative: an answer of the HTTP API and InfluxDB's to the same query sum and
// average in different orders.
func SameJSON(a, b any) bool {
	switch x := a.(type) {
	case float64:
		y, ok := b.(float64)
		return ok && (x == y || math.Abs(x-y) <= 1e-9*math.Max(math.Abs(x), math.Abs(y)))
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !SameJSON(x[i], y[i]) {
				return false
			}
		}
		return true
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k := range x {
			if !SameJSON(x[k], y[k]) {
				return false
			}
		}
		return true
	}
	return reflect.DeepEqual(a, b)
}
