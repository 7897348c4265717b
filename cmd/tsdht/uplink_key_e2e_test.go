package main

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tsdht/tsdht/internal/testutil"
)

// TestUplinkToClusterWithItsOwnKey: a tsdht:// uplink speaks to the central cluster
// with the key its URL names (?key=FILE), not with the edge cluster's own key, which
// the centre does not accept.
func TestUplinkToClusterWithItsOwnKey(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two node processes")
	}
	bin := testutil.Binary(t)
	dir := t.TempDir()
	edgeKey, centralKey := filepath.Join(dir, "edge.key"), filepath.Join(dir, "central.key")
	for _, f := range []string{edgeKey, centralKey} {
		if out, errs, code := testutil.RunCmd(t, exec.Command(bin, "keygen", "--out", f), ""); code != 0 {
			t.Fatalf("keygen: exit %d, %s%s", code, out, errs)
		}
	}
	// The start-up's status polls read the key from the environment: each cluster's own.
	t.Setenv("TSDHT_CLUSTER_KEY_FILE", centralKey)
	start := time.Now()
	central := startProcs(t, 1, "--rf", "1", "--cluster-key-file", centralKey)
	t.Setenv("TSDHT_CLUSTER_KEY_FILE", edgeKey)
	edge := startProcs(t, 1, "--rf", "1", "--cluster-key-file", edgeKey,
		"--uplink", "tsdht://"+central.Nodes[0].RPC+"?key="+centralKey)

	t.Logf("both nodes up after %v", time.Since(start).Round(100*time.Millisecond))
	const key = "feeder/9/p"
	base := time.Now().Add(-time.Hour).Truncate(time.Minute).UnixNano()
	var in strings.Builder
	for i := range 300 {
		fmt.Fprintf(&in, "%d,%d.25\n", base+int64(i)*int64(time.Second), i)
	}
	testutil.WaitNoError(t, 30*time.Second, func() error {
		if _, errOut, code := edge.Run(in.String(), "put", "--cluster", edge.Nodes[0].RPC, "--cluster-key-file", edgeKey, "--series", key); code != 0 {
			return fmt.Errorf("exit %d: %s", code, errOut)
		}
		return nil
	}, "a put into the edge node")
	get := func(keyFile string) (string, string, int) {
		return central.Run("", "get", "--cluster", central.Nodes[0].RPC, "--cluster-key-file", keyFile, "--series", key,
			"--from", fmt.Sprint(base), "--to", fmt.Sprint(base+int64(time.Hour)))
	}
	took := testutil.WaitNoError(t, 30*time.Second, func() error {
		out, errOut, code := get(centralKey)
		if code != 0 {
			return fmt.Errorf("exit %d: %s", code, errOut)
		}
		if n := len(parseCSV(t, out)); n != 300 {
			return fmt.Errorf("%d points of 300", n)
		}
		return nil
	}, "the 300 points to reach the central cluster")
	t.Logf("the points reached the central cluster %v after the put", took.Round(100*time.Millisecond))
	out, _, _ := get(centralKey)
	for i, p := range parseCSV(t, out) {
		if p.t != base+int64(i)*int64(time.Second) || p.v != float64(i)+0.25 {
			t.Fatalf("point %d at the centre: (%d, %v)", i, p.t, p.v)
		}
	}
	if _, _, code := get(edgeKey); code == 0 {
		t.Error("the central cluster answered a client with the edge's key: the test proves nothing")
	}
}
