package sim

import (
	"encoding/binary"
	"encoding/hex"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tsdht/tsdht/pmu/c37118"
)

// TestWiresharkDecodesUDPDataAndCFG3Fragments runs the simulator in its TCP-commands,
// UDP-data mode, captures the datagrams it really sends (a UDP socket of the test) and
// has tshark dissect them as C37.118 on that port (-d udp.port==PORT,synphasor): one
// frame per datagram, every field as sent. Wireshark ties data frames to the
// configuration of their own conversation, so the CFG-2 (which the simulator answers
// over TCP) is put in the capture as a datagram of the same conversation first. Then
// the simulator's CFG-3 in fragments, as it writes them on TCP: tshark must read each as
// a valid frame with CONT_IDX 1, 2, … and 0xFFFF on the last.
func TestWiresharkDecodesUDPDataAndCFG3Fragments(t *testing.T) {
	tshark := ensureTshark(t)
	u, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	floatPolar := c37118.FormatPolar | c37118.FormatPhasorFloat | c37118.FormatFreqFloat | c37118.FormatAnalogFloat
	s, err := Start(Config{IDCode: 21, Rate: 50, UDPData: u.LocalAddr().String(), Cfg3Fragment: 120, Cfg3Names: "a long CFG-3 name: ",
		Stations: []Station{
			{Name: "UDP A", Format: floatPolar, Phasors: 2, Analogs: 1, Digitals: 1},
			{Name: "UDP B", Format: c37118.FormatPolar, Phasors: 2, Analogs: 1, NominalHz: 50}}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	set := s.Settings()
	conn, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(20 * time.Second))
	cmd := func(c uint16) {
		b, _ := c37118.AppendCommand(nil, c37118.Header{IDCode: set.IDCode}, c, nil)
		if _, err := conn.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	// CFG-2, then CFG-3 (in fragments) over TCP.
	cmd(c37118.CmdSendCFG2)
	cmd(c37118.CmdSendCFG3)
	r := c37118.NewReader(conn)
	var cfg2 []byte
	var frags [][]byte
	for len(frags) == 0 || binary.BigEndian.Uint16(frags[len(frags)-1][c37118.HeaderLen:]) != c37118.ContLast {
		f, h, err := r.Next()
		if err != nil {
			t.Fatal(err)
		}
		switch h.Type {
		case c37118.TypeCfg2:
			cfg2 = append([]byte(nil), f...)
		case c37118.TypeCfg3:
			frags = append(frags, append([]byte(nil), f...))
		}
	}
	if cfg2 == nil || len(frags) < 3 {
		t.Fatalf("CFG-2 %d bytes, CFG-3 in %d fragments", len(cfg2), len(frags))
	}
	cfg, err := c37118.ParseConfig(cfg2)
	if err != nil {
		t.Fatal(err)
	}
	// Data over UDP: what the simulator sends to our socket.
	cmd(c37118.CmdDataOn)
	var data [][]byte
	buf := make([]byte, c37118.MaxFrameLen)
	u.SetReadDeadline(time.Now().Add(20 * time.Second))
	for len(data) < 8 {
		n, _, err := u.ReadFrom(buf)
		if err != nil {
			t.Fatal(err)
		}
		data = append(data, append([]byte(nil), buf[:n]...))
	}
	cmd(c37118.CmdDataOff)

	const port = 47130 // not 4713: the -d option must be what makes tshark dissect it
	path := filepath.Join(t.TempDir(), "udp.pcap")
	w, err := newPcap(path)
	if err != nil {
		t.Fatal(err)
	}
	w.datagram(false, port, 50200, cfg2)
	for _, d := range data {
		w.datagram(false, port, 50200, d)
	}
	for _, f := range frags {
		w.server(f)
	}
	w.Close()
	pkts := dissect(t, tshark, path, "udp.port=="+strconv.Itoa(port)+",synphasor", "tcp.port==4712,synphasor")
	if want := 1 + len(data) + len(frags); len(pkts) != want {
		t.Fatalf("tshark dissected %d C37.118 frames, want %d", len(pkts), want)
	}
	checkConfig(t, &pkts[0], cfg, c37118.TypeCfg2)
	for i, d := range data {
		h, err := c37118.ParseHeader(d)
		if err != nil {
			t.Fatalf("datagram %d: %v", i, err)
		}
		// The frame index from its time: SOC and FRACSEC at 50 frames/s.
		k := (int64(h.SOC)-set.Start.Unix())*int64(set.Rate) + int64(h.FracSec)*int64(set.Rate)/int64(set.TimeBase)
		if soc, fs := s.FrameTime(k); soc != h.SOC || fs != h.FracSec {
			t.Fatalf("datagram %d: time %d.%d is no frame's", i, h.SOC, h.FracSec)
		}
		checkData(t, &pkts[1+i], s, cfg, k)
	}
	for i := range frags {
		p := &pkts[1+len(data)+i]
		want := strconv.Itoa(i + 1)
		if i == len(frags)-1 {
			want = strconv.Itoa(int(c37118.ContLast))
		}
		// Wireshark 4.0 recognises a fragment ("CFG-3 Fragmented Frame (Not Supported)")
		// and shows its body raw, CONT_IDX first; later versions name the field.
		got := ""
		if fs := p.get("synphasor.conf.contindx"); len(fs) == 1 {
			got = fs[0].Show
		} else if d := p.one(t, "synphasor.data"); strings.Contains(d.Showname, "Fragmented") {
			if b, err := hex.DecodeString(d.Value); err == nil && len(b) >= 2 {
				got = strconv.Itoa(int(binary.BigEndian.Uint16(b)))
			}
		}
		if got != want {
			t.Fatalf("CFG-3 fragment %d: tshark reads CONT_IDX %q, want %s (%s)", i, got, want, p.summary)
		}
		if st := p.one(t, "synphasor.checksum.status"); !strings.Contains(st.Showname, "Good") {
			t.Fatalf("CFG-3 fragment %d: checksum status %q", i, st.Showname)
		}
	}
	t.Logf("tshark decoded %d UDP data frames and %d CFG-3 fragments as sent", len(data), len(frags))
}
