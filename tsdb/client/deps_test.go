package client

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDependencies keeps the thin client thin: an application that only reads and
// writes series must not link the storage engine, the gossip layer or libp2p.
func TestDependencies(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list -deps listed only %d packages: %q", len(deps), deps)
	}
	for _, d := range deps {
		for _, banned := range []string{"cockroachdb/pebble", "hashicorp/memberlist", "libp2p", "tsdht/dht", "tsdht/tsdb/store"} {
			if strings.Contains(d, banned) {
				t.Errorf("the client depends on %s (matches %q)", d, banned)
			}
		}
		if d == "github.com/tsdht/tsdht/tsdb" {
			t.Errorf("the client depends on the node package %s", d)
		}
	}
}
