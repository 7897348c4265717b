package main

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/tsdht/tsdht/internal/testutil"
)

// freeText are flags every value of which is valid (keys, prefixes, names, paths of
// files the command creates): no bad value to give them.
var freeText = map[string]bool{
	"series": true, "prefix": true, "unit": true, "description": true, "db": true,
	"series-prefix": true, "columns": true, "out": true, "data": true, "spool": true,
	"node": true, "metrics": true,
	"restore/from": true, "backup/to": true, // directories
}

// badValues returns values of flag f its command must refuse.
func badValues(cmd string, f cli.Flag) []string {
	name := f.Names()[0]
	switch {
	case freeText[name] || freeText[cmd+"/"+name]:
		return nil
	case name == "cluster-key-file":
		return []string{"/nonexistent/key"}
	case name == "match" || name == "tag":
		return []string{"novalue"}
	case name == "cluster" || name == "connect" || name == "http" || name == "join" || name == "rpc" || name == "gossip" || name == "udp-data":
		return []string{"no-port"}
	}
	switch f.(type) {
	case *cli.BoolFlag:
		return nil // --flag=bogus is a parse error too, but a bool is given bare
	case *cli.IntFlag, *cli.Int64Flag, *cli.Float64Flag:
		return []string{"bogus", "-5"}
	case *cli.DurationFlag:
		return []string{"bogus", "-5s"}
	}
	return []string{"bogus"}
}

// goodArgs are values of the required flags that a command accepts: a cluster that is
// not there, so that a command that did not check a flag before dialing fails with 1.
func goodArgs(t *testing.T, cmd *cli.Command, skip string) []string {
	var args []string
	hasSeries := false
	for _, f := range cmd.Flags {
		hasSeries = hasSeries || f.Names()[0] == "series"
	}
	good := map[string]string{
		"cluster": "127.0.0.1:1", "series": "x", "from": "-1h", "to": "now", "every": "1m",
		"rpc": "127.0.0.1:0", "gossip": "127.0.0.1:0", "data": filepath.Join(t.TempDir(), "d"),
		"at": "now", "node": "ab",
		"out": filepath.Join(t.TempDir(), "key"), "connect": "127.0.0.1:1", "idcode": "1",
		"restore/from": t.TempDir(), "backup/to": t.TempDir(), // directories
	}
	for _, f := range cmd.Flags {
		name := f.Names()[0]
		if r, ok := f.(cli.RequiredFlag); ok && r.IsRequired() && name != skip {
			v, ok := good[cmd.Name+"/"+name]
			if !ok {
				v = good[name]
			}
			args = append(args, "--"+name, v)
		} else if name == "cluster" && skip != "cluster" {
			args = append(args, "--cluster", good["cluster"]) // restore and locate need it for what is tested
		}
		// --series, or --match / --prefix, selects what get, agg and export read.
		if name == "match" && hasSeries && skip != "match" && skip != "series" && skip != "prefix" {
			args = append(args, "--series", "x")
		}
	}
	return args
}

// TestEveryBadFlagValueExits2 walks every flag of every command and gives it a value it
// cannot take: the command exits 2 with a message naming the flag, before doing
// anything else (a node does not start, a client does not dial).
func TestEveryBadFlagValueExits2(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary once per flag; skipped with -short")
	}
	bin := testutil.Binary(t)
	for _, cmd := range newApp().Commands {
		for _, f := range cmd.Flags {
			for _, bad := range badValues(cmd.Name, f) {
				name := f.Names()[0]
				t.Run(cmd.Name+"/"+name+"="+bad, func(t *testing.T) {
					t.Parallel()
					args := append([]string{cmd.Name}, goodArgs(t, cmd, name)...)
					args = append(args, "--"+name, bad)
					ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
					defer cancel()
					c := exec.CommandContext(ctx, bin, args...)
					var stderr strings.Builder
					c.Stderr = &stderr
					err := c.Run()
					code := c.ProcessState.ExitCode()
					if ctx.Err() != nil {
						t.Fatalf("tsdht %s: still running after 20s: the bad value was not refused", strings.Join(args, " "))
					}
					if code != exitUsage || !strings.Contains(stderr.String(), name) {
						t.Errorf("tsdht %s: exit %d (%v), want 2 and a message naming --%s:\n%s", strings.Join(args, " "), code, err, name, stderr.String())
					}
				})
			}
		}
	}
}
