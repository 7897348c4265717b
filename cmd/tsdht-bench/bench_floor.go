package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/tsdht/tsdht/rpc"
)

// The floor of a write is what its network round alone costs: one bare request and
// response over the same persistent, multiplexed TCP connections (package rpc) to as
// many peers as the write has remote replicas, in parallel, with no DHT and no store
// behind them. A write cannot be cheaper than its floor; how close it comes says how
// much the database itself costs.

// echoMethod is the one method an echo server serves: it answers with the request.
const echoMethod = "bench.echo"

// floorPayload is about the size of a single-point write request on the wire.
var floorPayload = make([]byte, 96)

// startEcho serves echoMethod on addr until the returned server is closed.
func startEcho(addr string) (*rpc.Server, string, error) {
	srv := rpc.NewServer(rpc.NewTCPTransport(), rpc.DefaultConfig())
	srv.Handle(echoMethod, func(_ context.Context, req []byte) ([]byte, error) { return req, nil })
	a, err := srv.Listen(addr)
	if err != nil {
		srv.Close()
		return nil, "", err
	}
	return srv, a.String(), nil
}

// benchEchoCommand runs a bare echo server, the floor's peer, for benches against a
// --cluster on other hosts or network namespaces (scripts/netns-cluster starts one
// beside every node).
func benchEchoCommand() *cli.Command {
	return &cli.Command{
		Name:  "echo",
		Usage: "serve a bare RPC echo (no DHT, no store): the peer of `tsdht-bench write --floor-addrs`",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "listen", Required: true, Usage: "HOST:PORT to serve on"},
		},
		Action: func(c *cli.Context) error {
			srv, addr, err := startEcho(c.String("listen"))
			if err != nil {
				return err
			}
			fmt.Fprintf(c.App.ErrWriter, "tsdht-bench echo: serving on %s\n", addr)
			sig := make(chan os.Signal, 1)
			signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
			select {
			case <-sig:
			case <-c.Context.Done():
			}
			return srv.Close()
		},
	}
}

// floorProber measures floor rounds against a set of echo servers.
type floorProber struct {
	cli     *rpc.Client
	addrs   []string
	servers []*rpc.Server // started by newLocalFloor; closed by Close
	timeout time.Duration
}

// newLocalFloor starts n echo servers on loopback, as the --local nodes are.
func newLocalFloor(n int, timeout time.Duration) (*floorProber, error) {
	fp := &floorProber{cli: rpc.NewClient(rpc.NewTCPTransport(), rpc.DefaultConfig()), timeout: timeout}
	for range n {
		srv, addr, err := startEcho("127.0.0.1:0")
		if err != nil {
			fp.Close()
			return nil, err
		}
		fp.servers = append(fp.servers, srv)
		fp.addrs = append(fp.addrs, addr)
	}
	return fp, nil
}

// newRemoteFloor probes echo servers already running (`tsdht-bench echo`).
func newRemoteFloor(addrs []string, timeout time.Duration) *floorProber {
	return &floorProber{cli: rpc.NewClient(rpc.NewTCPTransport(), rpc.DefaultConfig()), addrs: addrs, timeout: timeout}
}

// round sends one echo to each of the first k servers in parallel and returns when
// all have answered. k = 0 is a write that stays on the writer: no network, no cost.
func (fp *floorProber) round(ctx context.Context, k int) (time.Duration, error) {
	if k == 0 {
		return 0, nil
	}
	if k > len(fp.addrs) {
		return 0, fmt.Errorf("floor of %d peers: only %d echo servers", k, len(fp.addrs))
	}
	ctx, cancel := context.WithTimeout(ctx, fp.timeout)
	defer cancel()
	errs := make([]error, k)
	t0 := time.Now()
	var wg sync.WaitGroup
	for i, addr := range fp.addrs[:k] {
		wg.Add(1)
		go func() { // as the coordinator does: one goroutine per replica
			defer wg.Done()
			_, errs[i] = fp.cli.Call(ctx, addr, echoMethod, floorPayload)
		}()
	}
	wg.Wait()
	d := time.Since(t0)
	for _, err := range errs {
		if err != nil {
			return 0, fmt.Errorf("floor: %w", err)
		}
	}
	return d, nil
}

func (fp *floorProber) Close() {
	fp.cli.Close()
	for _, s := range fp.servers {
		s.Close()
	}
}

// The bare floor is the physical limit under a write on this machine: one 16-byte
// request to each of the write's remote replicas over persistent loopback TCP to plain
// Go echo servers (a goroutine per connection copying the bytes back), the writer
// writing to every connection and then reading every answer on its own goroutine, with
// no framing, no multiplexing, no codec (rpc's BenchmarkFanOut7/bare in a bench run).

// barePayload is the bare floor's request and answer.
const barePayload = 16

// bareFloor is a set of bare echo servers and one connection to each.
type bareFloor struct {
	lns   []net.Listener
	conns []net.Conn
	buf   []byte
}

// newBareFloor starts n bare echo servers on loopback and connects to each.
func newBareFloor(n int) (*bareFloor, error) {
	bf := &bareFloor{buf: make([]byte, barePayload)}
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			bf.Close()
			return nil, err
		}
		bf.lns = append(bf.lns, ln)
		go func() {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
			buf := make([]byte, barePayload)
			for {
				if _, err := io.ReadFull(c, buf); err != nil {
					return
				}
				if _, err := c.Write(buf); err != nil {
					return
				}
			}
		}()
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			bf.Close()
			return nil, err
		}
		bf.conns = append(bf.conns, c)
	}
	return bf, nil
}

// round sends to the first k servers and reads their k answers; each connection's
// answer is awaited for timeout at most.
func (bf *bareFloor) round(k int, timeout time.Duration) (time.Duration, error) {
	if k == 0 {
		return 0, nil
	}
	if k > len(bf.conns) {
		return 0, fmt.Errorf("bare floor of %d peers: only %d echo servers", k, len(bf.conns))
	}
	deadline := time.Now().Add(timeout)
	for _, c := range bf.conns[:k] {
		c.SetReadDeadline(deadline) // outside the measurement
	}
	t0 := time.Now()
	for _, c := range bf.conns[:k] {
		if _, err := c.Write(bf.buf); err != nil {
			return 0, fmt.Errorf("bare floor: %w", err)
		}
	}
	for _, c := range bf.conns[:k] {
		if _, err := io.ReadFull(c, bf.buf); err != nil {
			return 0, fmt.Errorf("bare floor: %w", err)
		}
	}
	return time.Since(t0), nil
}

func (bf *bareFloor) Close() {
	for _, c := range bf.conns {
		c.Close()
	}
	for _, ln := range bf.lns {
		ln.Close()
	}
}
