package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/urfave/cli/v2"
)

// version is stamped by `make build` and `make arm`:
// -ldflags "-X main.version=$(git describe --tags --always --dirty)". Unstamped builds
// (go run, go build) report "devel" and the VCS revision Go recorded, if any.
var version = ""

// versionString is what `tsdht version` and `tsdht --version` print.
func versionString() string {
	v := version
	if v == "" {
		v = "devel"
		if bi, ok := debug.ReadBuildInfo(); ok {
			var rev, dirty, when string
			for _, s := range bi.Settings {
				switch s.Key {
				case "vcs.revision":
					rev = s.Value
				case "vcs.modified":
					if s.Value == "true" {
						dirty = "-dirty"
					}
				case "vcs.time":
					when = s.Value
				}
			}
			if rev != "" {
				if len(rev) > 12 {
					rev = rev[:12]
				}
				v += " " + rev + dirty
				if when != "" {
					v += " " + when
				}
			}
		}
	}
	return fmt.Sprintf("%s (%s, %s/%s)", v, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

func versionCommand() *cli.Command {
	return &cli.Command{
		Name:  "version",
		Usage: "print the version of this binary (also --version)",
		Action: func(c *cli.Context) error {
			fmt.Fprintln(c.App.Writer, "tsdht", versionString())
			return nil
		},
	}
}
