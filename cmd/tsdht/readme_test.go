package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tsdht/tsdht/internal/testutil"
	"github.com/tsdht/tsdht/pmu/sim"
)

// TestREADME runs every command example of the README against real node processes and
// checks that each prints what the README shows.
//
// An example is a fenced block tagged sh whose lines start with "$ ": each such line is a
// command, run by bash with this package's tsdht first on PATH, and the lines up to the
// next "$ " or the end of the block are what it prints, stdout and stderr together as a
// terminal shows them (none: it prints nothing). A block with no "$ " line (the set-up-free
// commands at the top) is not an example. A command ending in " &" runs in the background
// until the test ends: a `tsdht node` joins the test's cluster (after its block the test
// waits for every node to be alive), any other (tsdht pmu) is stopped at the end.
//
// In commands and output, every 127.0.0.1:PORT stands for a free port the test picks (the
// same README port is the same free port throughout), /tmp/ for a directory of the test,
// and the PMU at 127.0.0.1:4712 is a simulated one (package pmu/sim) sending stream 17 of
// station PMU17. In output, runs of spaces compare equal whatever their length (a table's
// columns widen with its ports), trailing spaces are ignored, and these placeholders stand
// for what varies from run to run:
//
//	<id>    40 lowercase hex digits: a node or shard ID
//	<n>     an integer
//	<x>     a decimal number
//	<size>  a size as status prints it: "1004 B", "3.5 KiB"
//
// A command whose output differs is run again until it matches or 30 s have passed, so an
// example may show what the cluster settles on (a PMU's first frames arriving); every
// README command is safe to repeat.
func TestREADME(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster of real processes; skipped with -short")
	}
	text, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := readmeExamples(string(text))
	if len(blocks) == 0 {
		t.Fatal("README has no examples (```sh blocks with \"$ \" lines)")
	}
	c := newE2ECluster(t, 0)
	env := readmeEnv{t: t, c: c, ports: map[string]string{}, tmp: t.TempDir() + "/"}
	pmu, err := sim.Start(sim.Config{Listen: env.subst("127.0.0.1:4712"), IDCode: 17, Stations: []sim.Station{{Name: "PMU17"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer pmu.Close()
	for _, b := range blocks {
		nodes := len(c.Nodes)
		for _, ex := range b {
			env.run(ex)
		}
		if len(c.Nodes) > nodes {
			c.WaitAlive(len(c.Nodes), 30*time.Second)
		}
	}
}

// readmeExample is one "$ " command of the README and the output shown below it.
type readmeExample struct {
	line int // in README.md, for messages
	cmd  string
	want []string
}

// readmeExamples returns the examples of text, block by block.
func readmeExamples(text string) [][]readmeExample {
	var blocks [][]readmeExample
	var cur []readmeExample
	in := false
	sc := bufio.NewScanner(strings.NewReader(text))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case !in && strings.TrimSpace(line) == "```sh":
			in, cur = true, nil
		case in && strings.TrimSpace(line) == "```":
			in = false
			if len(cur) > 0 {
				blocks = append(blocks, cur)
			}
		case in && strings.HasPrefix(line, "$ "):
			cur = append(cur, readmeExample{line: n, cmd: strings.TrimPrefix(line, "$ ")})
		case in && len(cur) > 0:
			cur[len(cur)-1].want = append(cur[len(cur)-1].want, line)
		}
	}
	return blocks
}

type readmeEnv struct {
	t     *testing.T
	c     *e2eCluster
	ports map[string]string // README's 127.0.0.1:PORT → the test's
	tmp   string
}

var readmeAddr = regexp.MustCompile(`127\.0\.0\.1:[0-9]+`)

// subst puts the test's ports and directory in place of the README's.
func (e *readmeEnv) subst(s string) string {
	s = readmeAddr.ReplaceAllStringFunc(s, func(a string) string {
		if _, ok := e.ports[a]; !ok {
			e.ports[a] = testutil.FreeAddr(e.t)
		}
		return e.ports[a]
	})
	return strings.ReplaceAll(s, "/tmp/", e.tmp)
}

func (e *readmeEnv) run(ex readmeExample) {
	t := e.t
	t.Helper()
	cmd := e.subst(ex.cmd)
	if bg, ok := strings.CutSuffix(cmd, " &"); ok {
		if len(ex.want) > 0 {
			t.Fatalf("README.md:%d: a background command shows output", ex.line)
		}
		e.background(ex, bg)
		return
	}
	want := readmeOutput(e.subst(strings.Join(ex.want, "\n")))
	var out bytes.Buffer
	if !testutil.Poll(30*time.Second, func() bool {
		sh := exec.Command("bash", "-c", cmd)
		sh.Env = append(os.Environ(), "PATH="+filepath.Dir(e.c.Bin)+string(os.PathListSeparator)+os.Getenv("PATH"))
		out.Reset()
		sh.Stdout, sh.Stderr = &out, &out
		if err := sh.Run(); err != nil {
			if _, ok := err.(*exec.ExitError); !ok {
				t.Fatalf("README.md:%d: %v", ex.line, err)
			}
		}
		return want.MatchString(readmeNormalize(out.String()))
	}) {
		t.Fatalf("README.md:%d: $ %s\nprints:\n%s\nREADME shows:\n%s", ex.line, ex.cmd, out.String(), strings.Join(ex.want, "\n"))
	}
}

// background starts a command ending in " &": a node joins the cluster, anything else
// runs until the test ends.
func (e *readmeEnv) background(ex readmeExample, cmd string) {
	t := e.t
	args := strings.Fields(cmd)
	if len(args) > 1 && args[0] == "tsdht" && args[1] == "node" {
		flag := func(name string) string {
			for i, a := range args[:len(args)-1] {
				if a == name {
					return args[i+1]
				}
			}
			t.Fatalf("README.md:%d: a node without %s", ex.line, name)
			return ""
		}
		e.c.StartCmd(flag("--rpc"), flag("--gossip"), args[1:]...)
		return
	}
	if args[0] != "tsdht" {
		t.Fatalf("README.md:%d: only tsdht runs in the background here", ex.line)
	}
	testutil.StartLogged(t, fmt.Sprintf("README.md:%d: $ %s", ex.line, ex.cmd), exec.Command(e.c.Bin, args[1:]...))
}

// readmePlaceholders are what the README's output may show in place of what varies.
var readmePlaceholders = strings.NewReplacer(
	regexp.QuoteMeta("<id>"), `[0-9a-f]{40}`,
	regexp.QuoteMeta("<n>"), `-?[0-9]+`,
	regexp.QuoteMeta("<x>"), `-?[0-9]+(\.[0-9]+)?(e[-+]?[0-9]+)?`,
	regexp.QuoteMeta("<size>"), `[0-9]+(\.[0-9])? [KMGTPE]?i?B`,
)

// readmeOutput returns a pattern matching what the README shows, once normalized.
func readmeOutput(shown string) *regexp.Regexp {
	return regexp.MustCompile(`\A` + readmePlaceholders.Replace(regexp.QuoteMeta(readmeNormalize(shown))) + `\z`)
}

var spaces = regexp.MustCompile(`[ \t]+`)

// readmeNormalize collapses runs of spaces and drops trailing ones and trailing newlines.
func readmeNormalize(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(spaces.ReplaceAllString(l, " "), " ")
	}
	return strings.Join(lines, "\n")
}
