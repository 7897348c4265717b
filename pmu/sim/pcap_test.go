package sim

import (
	"encoding/binary"
	"os"
)

// pcapWriter writes a libpcap file of one TCP conversation between a client and a
// server on port 4712 (and, with datagram, UDP datagrams between them), with Ethernet,
// IPv4 and TCP/UDP headers synthesised around each frame, so that tshark can dissect
// frames without any capture privileges.
type pcapWriter struct {
	f                *os.File
	cliSeq, srvSeq   uint32
	cliPort, srvPort uint16
	ts               uint32
	cliIP, srvIP     [4]byte
}

func newPcap(path string) (*pcapWriter, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	hdr := make([]byte, 24)
	binary.LittleEndian.PutUint32(hdr[0:], 0xa1b2c3d4) // microsecond timestamps
	binary.LittleEndian.PutUint16(hdr[4:], 2)
	binary.LittleEndian.PutUint16(hdr[6:], 4)
	binary.LittleEndian.PutUint32(hdr[16:], 65535) // snaplen
	binary.LittleEndian.PutUint32(hdr[20:], 1)     // LINKTYPE_ETHERNET
	if _, err := f.Write(hdr); err != nil {
		return nil, err
	}
	w := &pcapWriter{f: f, cliSeq: 1000, srvSeq: 5000, cliPort: 50123, srvPort: 4712, ts: 1_700_000_000,
		cliIP: [4]byte{10, 0, 0, 1}, srvIP: [4]byte{10, 0, 0, 2}}
	// The handshake, so the dissector sees a whole conversation.
	w.segment(true, 0x02, nil)  // SYN
	w.segment(false, 0x12, nil) // SYN-ACK
	w.segment(true, 0x10, nil)  // ACK
	return w, nil
}

// segment writes one TCP segment from the client (fromClient) or the server.
func (w *pcapWriter) segment(fromClient bool, flags byte, payload []byte) error {
	src, dst := w.cliIP, w.srvIP
	sport, dport := w.cliPort, w.srvPort
	seq, ack := &w.cliSeq, w.srvSeq
	if !fromClient {
		src, dst, sport, dport = dst, src, dport, sport
		seq, ack = &w.srvSeq, w.cliSeq
	}
	tcp := make([]byte, 20)
	defer func() {
		*seq += uint32(len(payload))
		if flags&0x02 != 0 {
			*seq++ // SYN takes a sequence number
		}
	}()
	binary.BigEndian.PutUint16(tcp[0:], sport)
	binary.BigEndian.PutUint16(tcp[2:], dport)
	binary.BigEndian.PutUint32(tcp[4:], *seq)
	if flags&0x10 != 0 {
		binary.BigEndian.PutUint32(tcp[8:], ack)
	}
	tcp[12] = 5 << 4
	tcp[13] = flags
	binary.BigEndian.PutUint16(tcp[14:], 65535)
	return w.packet(fromClient, 6, src, dst, append(tcp, payload...))
}

// datagram writes one UDP datagram from port sport to dport.
func (w *pcapWriter) datagram(fromClient bool, sport, dport uint16, payload []byte) error {
	src, dst := w.cliIP, w.srvIP
	if !fromClient {
		src, dst = dst, src
	}
	udp := make([]byte, 8, 8+len(payload))
	binary.BigEndian.PutUint16(udp[0:], sport)
	binary.BigEndian.PutUint16(udp[2:], dport)
	binary.BigEndian.PutUint16(udp[4:], uint16(8+len(payload))) // checksum 0: none
	return w.packet(fromClient, 17, src, dst, append(udp, payload...))
}

// packet wraps an IPv4 payload of protocol proto in IPv4 and Ethernet headers.
func (w *pcapWriter) packet(fromClient bool, proto byte, src, dst [4]byte, l4 []byte) error {
	ip := make([]byte, 20)
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], uint16(20+len(l4)))
	ip[8], ip[9] = 64, proto
	copy(ip[12:], src[:])
	copy(ip[16:], dst[:])
	var sum uint32
	for i := 0; i < 20; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(ip[i:]))
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	binary.BigEndian.PutUint16(ip[10:], ^uint16(sum))
	eth := []byte{2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00}
	if !fromClient {
		copy(eth[0:6], []byte{2, 0, 0, 0, 0, 1})
		copy(eth[6:12], []byte{2, 0, 0, 0, 0, 2})
	}
	pkt := append(append(eth, ip...), l4...)
	rec := make([]byte, 16)
	w.ts++
	binary.LittleEndian.PutUint32(rec[0:], w.ts)
	binary.LittleEndian.PutUint32(rec[8:], uint32(len(pkt)))
	binary.LittleEndian.PutUint32(rec[12:], uint32(len(pkt)))
	_, err := w.f.Write(append(rec, pkt...))
	return err
}

func (w *pcapWriter) client(b []byte) error { return w.segment(true, 0x18, b) }
func (w *pcapWriter) server(b []byte) error { return w.segment(false, 0x18, b) }
func (w *pcapWriter) Close() error          { return w.f.Close() }
