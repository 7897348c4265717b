package dht

import (
	"bytes"
	"io"
	"log"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/tsdht/tsdht/internal/testutil"
)

func newTestGossip(t *testing.T) *gossipTransport {
	t.Helper()
	g, err := newGossipTransport(net.ParseIP("127.0.0.1"), 0, log.New(io.Discard, "", 0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Shutdown() })
	return g
}

func gossipAddrOf(g *gossipTransport) string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(g.Port()))
}

func recvPacket(t *testing.T, g *gossipTransport) *memberlist.Packet {
	t.Helper()
	select {
	case p := <-g.PacketCh():
		return p
	case <-time.After(10 * time.Second):
		t.Fatal("no packet within 10 s")
		return nil
	}
}

// Over real UDP: each packet arrives whole, in a buffer of its own size that a later
// packet does not overwrite, from the sender's port.
func TestGossipTransportPackets(t *testing.T) {
	a, b := newTestGossip(t), newTestGossip(t)
	small := []byte("alive: a few hundred bytes of gossip")
	big := bytes.Repeat([]byte{0xa5, 0x5a, 0x01}, 20000) // 60,000 bytes: one datagram, not cut
	if _, err := a.WriteTo(small, gossipAddrOf(b)); err != nil {
		t.Fatal(err)
	}
	first := recvPacket(t, b)
	if _, err := a.WriteToAddress(big, memberlist.Address{Addr: gossipAddrOf(b), Name: "b"}); err != nil {
		t.Fatal(err)
	}
	second := recvPacket(t, b)
	if !bytes.Equal(first.Buf, small) {
		t.Errorf("first packet = %q after the second arrived, want %q", first.Buf, small)
	}
	if cap(first.Buf) != len(small) {
		t.Errorf("first packet's buffer holds %d bytes for a %d-byte packet: want a copy of its own size", cap(first.Buf), len(small))
	}
	if !bytes.Equal(second.Buf, big) {
		t.Errorf("second packet: %d bytes, want the %d sent", len(second.Buf), len(big))
	}
	from, ok := first.From.(*net.UDPAddr)
	if !ok || from.Port != a.Port() || !from.IP.Equal(net.ParseIP("127.0.0.1")) {
		t.Errorf("packet from %v, want 127.0.0.1:%d", first.From, a.Port())
	}
	if first.Timestamp.IsZero() {
		t.Error("packet has no timestamp")
	}
	// A host name is resolved, as memberlist's own transport does.
	if _, err := a.WriteTo(small, net.JoinHostPort("localhost", strconv.Itoa(b.Port()))); err != nil {
		t.Fatalf("write to localhost: %v", err)
	}
	if p := recvPacket(t, b); !bytes.Equal(p.Buf, small) {
		t.Errorf("packet through a host name = %q", p.Buf)
	}
	if _, err := a.WriteTo(small, "no port here"); err == nil {
		t.Error("write to an address without a port succeeded")
	}
}

// Over real TCP: a dialed stream reaches the other transport's StreamCh, both ways.
func TestGossipTransportStreams(t *testing.T) {
	a, b := newTestGossip(t), newTestGossip(t)
	c, err := a.DialAddressTimeout(memberlist.Address{Addr: gossipAddrOf(b)}, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var s net.Conn
	select {
	case s = <-b.StreamCh():
	case <-time.After(10 * time.Second):
		t.Fatal("no stream within 10 s")
	}
	defer s.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	s.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte("push-pull")); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 9)
	if _, err := io.ReadFull(s, got); err != nil || string(got) != "push-pull" {
		t.Fatalf("stream read %q, %v", got, err)
	}
	if _, err := s.Write([]byte("ok")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, got[:2]); err != nil || string(got[:2]) != "ok" {
		t.Fatalf("answer %q, %v", got[:2], err)
	}
}

// Shutdown returns while a packet and a stream wait for a memberlist that no longer
// reads them, and a second Shutdown is harmless; the port is free afterwards.
func TestGossipTransportShutdown(t *testing.T) {
	a, b := newTestGossip(t), newTestGossip(t)
	if _, err := a.WriteTo([]byte("x"), gossipAddrOf(b)); err != nil {
		t.Fatal(err)
	}
	c, err := a.DialTimeout(gossipAddrOf(b), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	done := make(chan struct{})
	go func() {
		b.Shutdown()
		b.Shutdown()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Shutdown did not return within 10 s")
	}
	port := b.Port()
	again, err := newGossipTransport(net.ParseIP("127.0.0.1"), port, log.New(io.Discard, "", 0))
	if err != nil {
		t.Fatalf("rebinding port %d after Shutdown: %v", port, err)
	}
	again.Shutdown()
}

// The advertised address is the one configured, or the one bound.
func TestGossipTransportAdvertise(t *testing.T) {
	g := newTestGossip(t)
	ip, port, err := g.FinalAdvertiseAddr("", 0)
	if err != nil || !ip.Equal(net.ParseIP("127.0.0.1")) || port != g.Port() {
		t.Errorf("FinalAdvertiseAddr(\"\", 0) = %v, %d, %v; want 127.0.0.1, %d", ip, port, err, g.Port())
	}
	ip, port, err = g.FinalAdvertiseAddr("10.1.2.3", 7946)
	if err != nil || ip.String() != "10.1.2.3" || len(ip) != net.IPv4len || port != 7946 {
		t.Errorf("FinalAdvertiseAddr(10.1.2.3, 7946) = %v, %d, %v", ip, port, err)
	}
	if _, _, err := g.FinalAdvertiseAddr("not-an-ip", 1); err == nil {
		t.Error("FinalAdvertiseAddr accepted a host name")
	}
}

// Three memberlists on the transport, over real UDP and TCP, see each other.
func TestGossipTransportMemberlist(t *testing.T) {
	var lists []*memberlist.Memberlist
	for i := range 3 {
		g := newTestGossip(t)
		c := memberlist.DefaultLocalConfig()
		c.Name = "m" + strconv.Itoa(i)
		c.Transport = g
		c.BindAddr, c.BindPort = "127.0.0.1", g.Port()
		c.AdvertiseAddr, c.AdvertisePort = "127.0.0.1", g.Port()
		c.Logger = log.New(io.Discard, "", 0)
		m, err := memberlist.Create(c)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Shutdown()
		if i > 0 {
			if _, err := m.Join([]string{lists[0].LocalNode().Address()}); err != nil {
				t.Fatal(err)
			}
		}
		lists = append(lists, m)
	}
	for _, m := range lists {
		testutil.WaitFor(t, 20*time.Second, func() bool { return m.NumMembers() == 3 }, "%s to see 3 members", m.LocalNode().Name)
	}
}
