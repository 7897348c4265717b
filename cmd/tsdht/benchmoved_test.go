package main

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// `tsdht bench …` names the binary the benchmarks moved to, with the same arguments,
// exits 2 and is not listed in the help.
func TestBenchSaysWhereItMoved(t *testing.T) {
	var help bytes.Buffer
	app := &cli.App{Name: "tsdht", Commands: []*cli.Command{benchMovedCommand(), versionCommand()},
		Writer: &help, ErrWriter: io.Discard,
		ExitErrHandler: func(*cli.Context, error) {}} // exitStatus below decides, not os.Exit
	if err := app.Run([]string{"tsdht", "--help"}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(help.String(), "bench") {
		t.Errorf("tsdht --help lists bench:\n%s", help.String())
	}
	err := app.Run([]string{"tsdht", "bench", "write", "--local", "3", "--json"})
	var stderr bytes.Buffer
	if code := exitStatus(&stderr, err); code != exitUsage {
		t.Errorf("exit status %d, want %d", code, exitUsage)
	}
	if want := "go run ./cmd/tsdht-bench write --local 3 --json"; !strings.Contains(stderr.String(), want) {
		t.Errorf("stderr %q does not name %q", stderr.String(), want)
	}
}
