// Command tsdht runs a tsdht node and drives a cluster: put, get, status, locate, demo.
package main

import (
	"fmt"
	"os"

	"github.com/urfave/cli/v2"
)

func main() {
	app := newApp()
	cli.VersionPrinter = func(c *cli.Context) { fmt.Fprintln(c.App.Writer, "tsdht", versionString()) }
	forgive(app)
	os.Exit(exitStatus(os.Stderr, app.Run(os.Args)))
}

// newApp returns the command line's commands and flags.
func newApp() *cli.App {
	return &cli.App{
		Name:  "tsdht",
		Usage: "an edge time-series database on a Kademlia-style DHT",
		Description: "Every node of a cluster runs `tsdht node`; together they store time series cut into\n" +
			"(series, time quantum) shards on the rf XOR-closest live nodes. Any node coordinates reads\n" +
			"and writes for thin clients (`put`, `get`).\n\n" + exitCodesHelp,
		Version: versionString(),
		Commands: []*cli.Command{
			nodeCommand(),
			putCommand(),
			getCommand(),
			aggCommand(),
			latestCommand(),
			watchCommand(),
			completenessCommand(),
			seriesCommand(),
			metaCommand(),
			deleteCommand(),
			backupCommand(),
			restoreCommand(),
			statusCommand(),
			locateCommand(),
			fsckCommand(),
			decommissionCommand(),
			keygenCommand(),
			tokenCommand(),
			exportCommand(),
			importCommand(),
			demoCommand(),
			benchMovedCommand(),
			pmuCommand(),
			versionCommand(),
		},
		EnableBashCompletion: true,
	}
}
