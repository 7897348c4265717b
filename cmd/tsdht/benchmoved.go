package main

import (
	"strings"

	"github.com/urfave/cli/v2"
)

// benchMovedCommand answers `tsdht bench …`: the benchmarks are a binary of their own,
// tsdht-bench, so that the node binary on the boards carries none of their code. It
// is hidden and fails with the command to run instead.
func benchMovedCommand() *cli.Command {
	return &cli.Command{
		Name:            "bench",
		Hidden:          true,
		SkipFlagParsing: true,
		Action: func(c *cli.Context) error {
			args := strings.Join(c.Args().Slice(), " ")
			if args == "" {
				args = "…"
			}
			return cli.Exit("tsdht: benchmarks moved to tsdht-bench: run `go run ./cmd/tsdht-bench "+args+
				"` (or build it: make build puts it in bin/tsdht-bench)", exitUsage)
		},
	}
}
