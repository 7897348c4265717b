package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tsdht/tsdht/internal/testutil"
)

// withoutEnv returns the environment without the variables named.
func withoutEnv(names ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		keep := true
		for _, n := range names {
			if strings.HasPrefix(kv, n+"=") {
				keep = false
			}
		}
		if keep {
			env = append(env, kv)
		}
	}
	return env
}

// TestClusterKeyCLI: keygen writes a private key file and never overwrites
// one; a cluster started with it (real processes) serves clients that hold
// the key and refuses, saying "cluster key", clients and nodes that do not.
func TestClusterKeyCLI(t *testing.T) {
	bin := testutil.Binary(t)
	dir := t.TempDir()
	key, other := filepath.Join(dir, "cluster.key"), filepath.Join(dir, "other.key")
	for _, f := range []string{key, other} {
		if out, errs, code := testutil.RunCmd(t, exec.Command(bin, "keygen", "--out", f), ""); code != 0 || !strings.Contains(out, "key ID") {
			t.Fatalf("keygen: exit %d, %s%s", code, out, errs)
		}
	}
	if fi, err := os.Stat(key); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v, mode %v; want 0600", err, fi.Mode())
	}
	if _, errs, code := testutil.RunCmd(t, exec.Command(bin, "keygen", "--out", key), ""); code == 0 || !strings.Contains(errs, "exists") {
		t.Errorf("keygen over an existing key: exit %d, %s", code, errs)
	}

	t.Setenv("TSDHT_CLUSTER_KEY_FILE", key) // the nodes and the status polls read it
	c := startE2ECluster(t, 2)
	pts := pmuPoints(1_700_000_000_000_000_000, 100)
	if out, errs, code := c.Run(csvOf(pts), "put", "--cluster", c.Nodes[0].RPC, "--series", "k/s"); code != 0 {
		t.Fatalf("put with the key: exit %d, %s%s", code, out, errs)
	}
	out, errs, code := c.Run("", "get", "--cluster", c.Nodes[1].RPC, "--series", "k/s", "--from", "1700000000000000000", "--to", "1700000010000000000",
		"--cluster-key-file", key)
	if code != 0 || len(parseCSV(t, out)) != len(pts) {
		t.Fatalf("get with the key: exit %d, %d lines, %s", code, len(parseCSV(t, out)), errs)
	}

	for _, tc := range []struct {
		name string
		args []string
	}{{"no key", nil}, {"wrong key", []string{"--cluster-key-file", other}}} {
		for _, cmd := range [][]string{
			{"put", "--cluster", c.Nodes[0].RPC, "--series", "k/s"},
			{"get", "--cluster", c.Nodes[0].RPC, "--series", "k/s", "--from", "1700000000000000000", "--to", "1700000010000000000"},
			{"status", "--cluster", c.Nodes[0].RPC},
		} {
			x := exec.Command(bin, append(cmd, tc.args...)...)
			x.Env = withoutEnv("TSDHT_CLUSTER_KEY_FILE")
			_, errs, code := testutil.RunCmd(t, x, csvOf(pts[:1]))
			if code == 0 || !strings.Contains(errs, "cluster key") {
				t.Errorf("%s with %s: exit %d, stderr %q; want a failure that says cluster key", cmd[0], tc.name, code, errs)
			}
		}
	}

	// A node without the key is refused at join, and says so.
	x := exec.Command(bin, "node", "--rpc", testutil.FreeAddr(t), "--gossip", testutil.FreeAddr(t), "--data", t.TempDir(), "--join", c.Nodes[0].Gossip)
	x.Env = withoutEnv("TSDHT_CLUSTER_KEY_FILE")
	done := make(chan struct{})
	var nodeErr string
	var nodeCode int
	go func() {
		_, nodeErr, nodeCode = testutil.RunCmd(t, x, "")
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		x.Process.Kill()
		<-done
		t.Fatalf("a node without the key kept running; its log:\n%s", nodeErr)
	}
	if nodeCode == 0 || !strings.Contains(nodeErr, "cluster key") {
		t.Errorf("node without the key: exit %d, stderr %q; want a failure that says cluster key", nodeCode, nodeErr)
	}
}
