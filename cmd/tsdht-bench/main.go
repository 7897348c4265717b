// Command tsdht-bench measures a tsdht cluster: the paper's Tables I and II (write,
// read), sustained ingest, the network floor under a write (echo), and renders the
// results (report). See docs/bench/README.md.
package main

import (
	"fmt"
	"os"
)

func main() {
	if err := newApp().Run(os.Args); err != nil {
		fmt.Fprintf(os.Stderr, "tsdht-bench: %v\n", err)
		os.Exit(1)
	}
}
