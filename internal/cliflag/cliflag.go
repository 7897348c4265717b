// Package cliflag holds the command-line flags and flag parsing that tsdht and
// tsdht-bench share, so that both binaries take them alike.
package cliflag

import (
	"strings"
	"time"

	"github.com/urfave/cli/v2"
)

// Timeout bounds one request to the cluster.
var Timeout = &cli.DurationFlag{
	Name:  "timeout",
	Value: 30 * time.Second,
	Usage: "how long one request to the cluster may take",
}

// SplitAddrs splits a comma-separated list (of HOST:PORT addresses, formats, …),
// trimming spaces and dropping empty items.
func SplitAddrs(s string) []string {
	var out []string
	for _, a := range strings.Split(s, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}
