package ingest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/tsdht/tsdht/pmu/c37118"
)

// session is one TCP connection to the PMU: configuration, then data until an error.
// With Config.DataUDP the data frames come as UDP datagrams on the ingester's socket
// while the TCP connection carries commands (and the PMU's answers to them).
type session struct {
	in   *Ingester
	ctx  context.Context
	conn net.Conn

	wmu sync.Mutex // serialises command writes

	mu         sync.Mutex // guards what follows: frames of TCP and UDP are handled one at a time
	cm         *channelMap
	d          c37118.Data
	lastCfgAsk time.Time
	asm        c37118.Cfg3Assembler
	gaps       gapTracker
	gotData    bool
}

func (s *session) send(cmd uint16) error {
	now := time.Now()
	b, err := c37118.AppendCommand(nil, c37118.Header{IDCode: s.in.cfg.IDCode, SOC: uint32(now.Unix())}, cmd, nil)
	if err != nil {
		return err
	}
	if s.in.pmuUDP != nil {
		_, err := s.in.udp.WriteToUDP(b, s.in.pmuUDP)
		return err
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.conn.SetWriteDeadline(now.Add(s.in.cfg.ReadTimeout))
	_, err = s.conn.Write(b)
	return err
}

// askCfg asks for CFG-2 again, at most every 5 s. Called with mu held.
func (s *session) askCfg() error {
	if time.Since(s.lastCfgAsk) < 5*time.Second {
		return nil
	}
	s.lastCfgAsk = time.Now()
	return s.send(c37118.CmdSendCFG2)
}

// session runs one TCP connection; gotData says whether any data frame was decoded.
func (in *Ingester) session(ctx context.Context, conn net.Conn) (gotData bool, err error) {
	s := &session{in: in, ctx: ctx, conn: conn, asm: c37118.Cfg3Assembler{Limits: in.cfg.Cfg3Limits}}
	stop := context.AfterFunc(ctx, func() {
		conn.SetDeadline(time.Now())
		if in.udp != nil {
			in.udp.SetReadDeadline(time.Now())
		}
	})
	defer stop()
	if err := s.send(c37118.CmdDataOff); err != nil {
		return false, err
	}
	if err := s.send(c37118.CmdSendCFG2); err != nil {
		return false, err
	}
	s.lastCfgAsk = time.Now()
	if in.udp != nil {
		err = s.runUDP(in.pmuUDP == nil)
	} else {
		err = s.runTCP()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gotData, err
}

func (s *session) hasConfig() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cm != nil
}

// readTCP reads frames from the TCP connection and handles them until an error or the
// end of ctx; with deadline > 0 every read must complete within it.
func (s *session) readTCP(ctx context.Context, deadline time.Duration) error {
	in := s.in
	r := c37118.NewReader(s.conn)
	defer func() { in.st.skipped.Add(r.Skipped) }()
	for {
		if deadline > 0 {
			s.conn.SetReadDeadline(time.Now().Add(deadline))
		} else {
			s.conn.SetReadDeadline(time.Time{})
		}
		// Checked after the deadline is set: a cancel that came earlier ends the session
		// here, one that comes later sets its own (past) deadline after ours.
		if ctx.Err() != nil {
			return ctx.Err()
		}
		frame, h, err := r.Next()
		if errors.Is(err, c37118.ErrCRC) || errors.Is(err, c37118.ErrSize) {
			n := in.st.badCRC.Add(1)
			in.logEvery(n, "frame dropped", "err", err, "bad_crc_total", n)
			continue
		}
		if err != nil {
			if !s.hasConfig() && isTimeout(err) && s.ctx.Err() == nil {
				return fmt.Errorf("no CFG-2 within %v (is IDCODE %d right?): %w", in.cfg.ReadTimeout, in.cfg.IDCode, err)
			}
			return err
		}
		s.mu.Lock()
		err = s.handle(frame, h)
		s.mu.Unlock()
		if err != nil {
			return err
		}
	}
}

func (s *session) runTCP() error { return s.readTCP(s.ctx, s.in.cfg.ReadTimeout) }

// runUDP reads the TCP connection in a goroutine when there is one (answers to
// commands: configuration and header frames) and datagrams here. A datagram is read
// into the ingester's one buffer of MaxFrameLen bytes and must be exactly one frame
// (FRAMESIZE = its length, CRC right). Silence for ReadTimeout re-sends "data on";
// silence for another ReadTimeout ends the session (the caller reconnects).
func (s *session) runUDP(withTCP bool) error {
	in := s.in
	var tcpErr chan error // nil without TCP: never ready
	if withTCP {
		tcpErr = make(chan error, 1)
		tctx, cancel := context.WithCancel(s.ctx)
		stop := context.AfterFunc(tctx, func() { s.conn.SetReadDeadline(time.Now()) })
		defer stop()
		go func() {
			err := s.readTCP(tctx, 0)
			tcpErr <- err
			in.udp.SetReadDeadline(time.Now()) // wake the datagram reader
		}()
		defer func() {
			cancel()
			<-tcpErr
		}()
	}
	buf := in.udpBuf
	reasked := false
	for {
		in.udp.SetReadDeadline(time.Now().Add(in.cfg.ReadTimeout))
		if s.ctx.Err() != nil {
			return s.ctx.Err()
		}
		select {
		case err := <-tcpErr:
			tcpErr <- err // for the deferred wait
			return fmt.Errorf("command connection: %w", err)
		default:
		}
		n, from, err := in.udp.ReadFromUDPAddrPort(buf) // allocates nothing
		if err != nil {
			if !isTimeout(err) {
				return fmt.Errorf("UDP data socket: %w", err)
			}
			if s.ctx.Err() != nil {
				return s.ctx.Err()
			}
			select {
			case err := <-tcpErr:
				tcpErr <- err
				return fmt.Errorf("command connection: %w", err)
			default:
			}
			if !s.hasConfig() {
				return fmt.Errorf("no CFG-2 within %v (is IDCODE %d right?)", in.cfg.ReadTimeout, in.cfg.IDCode)
			}
			if reasked {
				return fmt.Errorf("no data frame on UDP %s for %v after asking again", in.udp.LocalAddr(), 2*in.cfg.ReadTimeout)
			}
			in.log.Warn("no data frame on UDP; asking for data again", "listen", in.udp.LocalAddr().String(), "silent_for", in.cfg.ReadTimeout)
			reasked = true
			if err := s.send(c37118.CmdDataOn); err != nil {
				return err
			}
			continue
		}
		frame := buf[:n]
		h, err := c37118.ParseHeader(frame)
		if err != nil {
			var c int64
			if errors.Is(err, c37118.ErrCRC) {
				c = in.st.badCRC.Add(1)
			} else {
				c = in.st.badFrames.Add(1)
			}
			in.logEvery(c, "datagram dropped", "from", from.String(), "bytes", n, "err", err, "count", c)
			continue
		}
		s.mu.Lock()
		err = s.handle(frame, h)
		s.mu.Unlock()
		if err != nil {
			return err
		}
		reasked = false
	}
}

// handle acts on one validated frame. Called with mu held.
func (s *session) handle(frame []byte, h c37118.Header) error {
	in, ctx := s.in, s.ctx
	switch h.Type {
	case c37118.TypeCfg2:
		cfg, err := c37118.ParseConfig(frame)
		if err != nil {
			in.st.badFrames.Add(1)
			in.log.Error("CFG-2 frame refused", "err", err)
			return nil
		}
		first := s.cm == nil
		if first || !sameConfig(s.cm.cfg, cfg) {
			m, err := mapChannels(cfg, in.cfg.Prefix)
			if err != nil {
				return err
			}
			s.cm = m
			s.gaps = gapTracker{rate: cfg.DataRate}
			in.applyConfig(ctx, m)
		}
		if first {
			// CFG-3 and the header are metadata; devices that lack them just stay silent.
			for _, cmd := range []uint16{c37118.CmdSendHDR, c37118.CmdSendCFG3, c37118.CmdDataOn} {
				if err := s.send(cmd); err != nil {
					return err
				}
			}
		}
	case c37118.TypeCfg3:
		discarded := s.asm.Discarded
		cfg, err := s.asm.Add(frame, time.Now())
		if s.asm.Discarded > discarded {
			n := in.st.cfg3Errors.Add(1)
			in.log.Warn("unfinished CFG-3 discarded", "why", s.asm.LastDiscard, "cfg3_errors_total", n)
		}
		if err != nil {
			n := in.st.cfg3Errors.Add(1)
			in.log.Warn("CFG-3 not used", "err", err, "cfg3_errors_total", n)
			return nil
		}
		if cfg == nil {
			return nil // more fragments to come
		}
		in.mu.Lock()
		in.stream.Config3 = cfg
		in.mu.Unlock()
		in.describe(ctx)
	case c37118.TypeHeader:
		_, text, _ := c37118.ParseHeaderFrame(frame)
		in.mu.Lock()
		changed := in.stream.Header != text
		in.stream.Header = text
		in.mu.Unlock()
		if changed {
			in.describe(ctx)
		}
	case c37118.TypeData:
		cm := s.cm
		if cm == nil {
			return nil // data before the configuration: cannot be decoded
		}
		if h.IDCode != cm.cfg.IDCode {
			n := in.st.badFrames.Add(1)
			in.logEvery(n, "data frame of another stream dropped", "idcode", h.IDCode, "want", cm.cfg.IDCode, "bad_frames_total", n)
			return nil
		}
		if err := cm.cfg.DecodeData(frame, &s.d); err != nil {
			n := in.st.badFrames.Add(1)
			in.logEvery(n, "data frame dropped; asking for the configuration again", "err", err, "bad_frames_total", n)
			return s.askCfg()
		}
		s.gotData = true
		in.st.dataFrames.Add(1)
		missed, late, dup := s.gaps.add(h.SOC, int64(h.FracSec)*1_000_000_000/int64(max(cm.cfg.TimeBase, 1)))
		in.st.missed.Add(missed)
		if late {
			in.st.late.Add(1)
		}
		if dup {
			in.st.dups.Add(1)
		}
		for i := range s.d.PMUs {
			if s.d.PMUs[i].Stat&c37118.StatConfigChange != 0 {
				if err := s.askCfg(); err != nil {
					return err
				}
				break
			}
		}
		in.addSamples(cm, &s.d)
	}
	return nil
}

// udpOnlyConn stands for the TCP connection in UDP-only mode: there is none.
type udpOnlyConn struct{ net.Conn }

func (udpOnlyConn) Close() error                       { return nil }
func (udpOnlyConn) SetDeadline(t time.Time) error      { return nil }
func (udpOnlyConn) SetReadDeadline(t time.Time) error  { return nil }
func (udpOnlyConn) SetWriteDeadline(t time.Time) error { return nil }
