package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/tsdht/tsdht/clusterkey"
)

func keygenCommand() *cli.Command {
	return &cli.Command{
		Name:  "keygen",
		Usage: "write a new random cluster key to a file (mode 0600) for --cluster-key-file",
		Description: "The file holds one key: 32 random bytes in hex. Copy it to every node and client; to rotate,\n" +
			"append the new key's line to every node's file, then move it first, then remove the old one\n" +
			"(docs/security.md).",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "out", Required: true, Usage: "the file to create; an existing file is never overwritten"},
		},
		Action: func(c *cli.Context) error {
			path := c.String("out")
			if err := clusterkey.WriteNew(path); err != nil {
				return fmt.Errorf("--out: %w", err)
			}
			ring, err := clusterkey.Load(path)
			if err != nil {
				return err
			}
			fmt.Fprintf(c.App.Writer, "wrote a new cluster key to %s (key ID %s)\n", path, ring.Primary().ID())
			return nil
		},
	}
}
