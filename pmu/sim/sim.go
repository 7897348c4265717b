// Package sim is a simulated PMU, or PDC when it has several stations: it serves IEEE
// C37.118.2 over TCP the way port 4712 does (command frames in, configuration, header and
// data frames out), at a configured rate, with every data format. Optionally it sends
// data as UDP datagrams (UDPData) or speaks UDP only (UDPOnly), with a lossy network's
// drops, reordering and duplicates on demand, and CFG-3 in fragments. Its signals are a
// pure function of the frame index (Sample), so a test can compute what must have been
// stored.
package sim

import (
	"errors"
	"fmt"
	"math"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tsdht/tsdht/pmu/c37118"
)

// Station configures one PMU of the stream.
type Station struct {
	// Name is the station name (STN), at most 16 bytes.
	Name string
	// IDCode is the PMU's ID; 0 means the stream's IDCode plus the station's index + 1.
	IDCode uint16
	// Format says how data frames encode channels (polar/rectangular, int16/float32).
	Format c37118.Format
	// Phasors, Analogs and Digitals are the channel counts.
	Phasors, Analogs, Digitals int
	// NominalHz is 50 or 60; 0 means 60.
	NominalHz int
}

// Config configures a simulator. The zero value of every field is a usable default.
type Config struct {
	// Listen is the TCP address to serve; "" means 127.0.0.1:0 (a free port).
	Listen string
	// IDCode is the data stream's ID (the PDC's, or the PMU's when there is one station); 0 means 1.
	IDCode uint16
	// Stations are the PMUs of the stream; none means one station with 4 polar float
	// phasors, 1 analog and 1 digital word at 60 Hz.
	Stations []Station
	// Rate is frames per second; 0 means 60.
	Rate int
	// TimeBase is TIME_BASE; 0 means 1,000,000.
	TimeBase uint32
	// Version is the frames' version (c37118.Version2005 or Version2011); 0 means 2011.
	Version uint8
	// Header is the header frame's text; "" means a short description.
	Header string
	// Start is the time of frame 0, truncated to whole seconds; zero means now.
	Start time.Time
	// CorruptEvery > 0 sends every CorruptEvery-th data frame with a wrong CRC (such
	// frames are not in Runs; Corrupted counts them).
	CorruptEvery int
	// UDPOnly serves commands over UDP on Listen (a UDP address) instead of TCP: the
	// answers and the data frames go as datagrams to where the last command came from
	// (C37.118.2's UDP-only mode). One client at a time.
	UDPOnly bool
	// UDPData, when set, sends data frames as UDP datagrams (one frame each) to this
	// address instead of over the TCP connection that turned data on; commands are
	// still answered over TCP (C37.118.2's TCP-commands/UDP-data mode). A host left
	// empty (":4713") means the TCP peer's host.
	UDPData string
	// DropEvery > 0 (UDP only) never sends every DropEvery-th data frame, as a lossy
	// network would; such frames are not in Runs, Dropped counts them.
	DropEvery int
	// ReorderEvery > 0 (UDP only) holds every ReorderEvery-th data frame back and sends
	// it after the next one; DuplicateEvery > 0 sends every DuplicateEvery-th twice.
	ReorderEvery, DuplicateEvery int
	// Cfg3Fragment > 0 sends CFG-3 in fragments of at most this many bytes each
	// (CONT_IDX 1, 2, …, 0xFFFF), as a PMU does with a CFG-3 too large for one frame.
	Cfg3Fragment int
	// Cfg3Names, when set, names phasors in CFG-3 (which allows 255 bytes) with this
	// prefix before the CFG-2 name, so a CFG-3 can be made as large as a test needs.
	Cfg3Names string
}

func (c Config) withDefaults() Config {
	if c.Listen == "" {
		c.Listen = "127.0.0.1:0"
	}
	if c.IDCode == 0 {
		c.IDCode = 1
	}
	if len(c.Stations) == 0 {
		c.Stations = []Station{{Name: "PMU1", Format: c37118.FormatPolar | c37118.FormatPhasorFloat | c37118.FormatFreqFloat | c37118.FormatAnalogFloat, Phasors: 4, Analogs: 1, Digitals: 1}}
	}
	st := make([]Station, len(c.Stations))
	copy(st, c.Stations)
	for i := range st {
		if st[i].IDCode == 0 {
			st[i].IDCode = c.IDCode + uint16(i) + 1
		}
		if st[i].NominalHz == 0 {
			st[i].NominalHz = 60
		}
	}
	c.Stations = st
	if c.Rate == 0 {
		c.Rate = 60
	}
	if c.TimeBase == 0 {
		c.TimeBase = 1_000_000
	}
	if c.Version == 0 {
		c.Version = c37118.Version2011
	}
	if c.Header == "" {
		c.Header = fmt.Sprintf("tsdht simulated PDC, %d station(s), %d frames/s", len(c.Stations), c.Rate)
	}
	if c.Start.IsZero() {
		c.Start = time.Now()
	}
	c.Start = c.Start.Truncate(time.Second)
	return c
}

// Validate reports a configuration the simulator cannot serve.
func (c Config) Validate() error {
	c = c.withDefaults()
	if c.Rate < 1 || c.Rate > 1000 {
		return fmt.Errorf("sim: rate %d frames/s outside 1..1000", c.Rate)
	}
	if c.TimeBase > 0xFFFFFF {
		return fmt.Errorf("sim: TIME_BASE %d does not fit 24 bits", c.TimeBase)
	}
	for i, s := range c.Stations {
		if len(s.Name) > 16 {
			return fmt.Errorf("sim: station %d name %q longer than 16 bytes", i, s.Name)
		}
		if s.NominalHz != 50 && s.NominalHz != 60 {
			return fmt.Errorf("sim: station %q nominal frequency %d Hz; 50 or 60", s.Name, s.NominalHz)
		}
	}
	if c.UDPData != "" {
		if _, _, err := net.SplitHostPort(c.UDPData); err != nil {
			return fmt.Errorf("sim: UDP data address %q: want HOST:PORT or :PORT (%v)", c.UDPData, err)
		}
		if c.UDPOnly {
			return fmt.Errorf("sim: UDPData and UDPOnly are two modes; pick one")
		}
	} else if !c.UDPOnly && (c.DropEvery > 0 || c.ReorderEvery > 0 || c.DuplicateEvery > 0) {
		return fmt.Errorf("sim: dropping, reordering or duplicating frames needs UDPData or UDPOnly")
	}
	if c.Cfg3Fragment != 0 && c.Cfg3Fragment < c37118.MinFrameLen+3 {
		return fmt.Errorf("sim: CFG-3 fragments of %d bytes: at least %d", c.Cfg3Fragment, c37118.MinFrameLen+3)
	}
	if len(c.Cfg3Names)+16 > 255 {
		return fmt.Errorf("sim: CFG-3 name prefix of %d bytes: at most 239", len(c.Cfg3Names))
	}
	return nil
}

// Run is a contiguous run of data frames written to one connection: frame indexes
// First..Last inclusive.
type Run struct{ First, Last int64 }

// Sim is a running simulator.
type Sim struct {
	cfg Config
	ln  net.Listener
	pc  *net.UDPConn // UDPOnly's socket

	mu        sync.Mutex
	sendMu    sync.Mutex     // held while a data frame is written and recorded
	cfgFrame  *c37118.Config // CFG-2 in force
	cfgCnt    uint16
	runs      []Run
	corrupted int64
	dropped   int64
	paused    bool
	conns     map[net.Conn]struct{}
	closed    bool
	wg        sync.WaitGroup
}

// Start listens and serves until Close.
func Start(cfg Config) (*Sim, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	s := &Sim{cfg: cfg, conns: map[net.Conn]struct{}{}}
	s.cfgFrame = s.Config(c37118.TypeCfg2)
	if cfg.UDPOnly {
		la, err := net.ResolveUDPAddr("udp", cfg.Listen)
		if err != nil {
			return nil, err
		}
		if s.pc, err = net.ListenUDP("udp", la); err != nil {
			return nil, err
		}
		s.wg.Add(1)
		go s.serveUDP()
		return s, nil
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, err
	}
	s.ln = ln
	s.wg.Add(1)
	go s.accept()
	return s, nil
}

// Addr is the address the simulator serves.
func (s *Sim) Addr() string {
	if s.pc != nil {
		return s.pc.LocalAddr().String()
	}
	return s.ln.Addr().String()
}

// Settings returns the configuration with defaults filled in.
func (s *Sim) Settings() Config { return s.cfg }

// Close stops serving and closes every connection.
func (s *Sim) Close() error {
	s.mu.Lock()
	s.closed = true
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	var err error
	if s.pc != nil {
		err = s.pc.Close()
	} else {
		err = s.ln.Close()
	}
	s.wg.Wait()
	return err
}

// Pause stops (true) or resumes (false) sending data frames on every connection;
// connections stay open. Frames falling due while paused are never sent. Pause returns
// after a frame being written has been recorded in Runs.
func (s *Sim) Pause(p bool) {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	s.mu.Lock()
	s.paused = p
	s.mu.Unlock()
}

// Runs returns the runs of data frames written so far, over all connections, in order.
func (s *Sim) Runs() []Run {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Run(nil), s.runs...)
}

// Corrupted returns how many data frames were sent with a bad CRC (a duplicated one
// counts twice).
func (s *Sim) Corrupted() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.corrupted
}

// Dropped returns how many data frames DropEvery kept from being sent, or a UDP
// send failed for.
func (s *Sim) Dropped() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dropped
}

// Sent returns how many valid data frames were written.
func (s *Sim) Sent() int64 {
	var n int64
	for _, r := range s.Runs() {
		n += r.Last - r.First + 1
	}
	return n
}

// BumpConfig increments every station's CFGCNT, as a PMU does when its configuration
// changes. Data frames carry the STAT configuration-change bit from then on.
func (s *Sim) BumpConfig() {
	s.mu.Lock()
	s.cfgCnt++
	s.cfgFrame = s.configLocked(c37118.TypeCfg2)
	s.mu.Unlock()
}

// Config returns the configuration frame of the given type (CFG-1, CFG-2 or CFG-3).
func (s *Sim) Config(typ c37118.FrameType) *c37118.Config {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.configLocked(typ)
}

func (s *Sim) configLocked(typ c37118.FrameType) *c37118.Config {
	c := &c37118.Config{
		Header:   c37118.Header{Type: typ, Version: s.cfg.Version, IDCode: s.cfg.IDCode, SOC: uint32(time.Now().Unix())},
		TimeBase: s.cfg.TimeBase,
		DataRate: int16(s.cfg.Rate),
	}
	for i, st := range s.cfg.Stations {
		p := c37118.PMU{Station: st.Name, IDCode: st.IDCode, Format: st.Format, NominalHz: st.NominalHz, CfgCnt: s.cfgCnt}
		for j := 0; j < st.Phasors; j++ {
			ph := c37118.Phasor{Name: fmt.Sprintf("PH%d %s", j+1, []string{"V", "I"}[j%2]), Kind: uint8(j % 2)}
			// A scale that makes ±32767 cover the signal: 10⁻⁵ V (A) per bit × factor.
			ph.Scale = uint32(amplitude(i, j)*1.3/32767*1e5) + 1
			ph.Mag3 = float32(float64(ph.Scale) * 1e-5)
			if typ == c37118.TypeCfg3 {
				ph.Name = s.cfg.Cfg3Names + ph.Name
			}
			p.Phasors = append(p.Phasors, ph)
		}
		for j := 0; j < st.Analogs; j++ {
			p.Analogs = append(p.Analogs, c37118.Analog{Name: fmt.Sprintf("AN%d", j+1), Kind: 1, Scale: 10, Mag3: 10})
		}
		for j := 0; j < st.Digitals; j++ {
			var d c37118.Digital
			for b := range d.Names {
				d.Names[b] = fmt.Sprintf("D%d.%d", j+1, b)
			}
			d.ValidMask = 0xFFFF
			p.Digital = append(p.Digital, d)
		}
		c.PMUs = append(c.PMUs, p)
	}
	return c
}

func amplitude(station, phasor int) float64 {
	if phasor%2 == 1 {
		return 400 + 50*float64(station) // amperes
	}
	return 7200 + 100*float64(station) // volts
}

// FrameTime returns the SOC and FRACSEC of data frame k.
func (s *Sim) FrameTime(k int64) (soc, fracsec uint32) {
	r := int64(s.cfg.Rate)
	soc = uint32(s.cfg.Start.Unix() + k/r)
	fracsec = uint32(k % r * int64(s.cfg.TimeBase) / r)
	return
}

// Sample returns data frame k in engineering units, before quantisation: the same
// numbers for the same k, on every call.
func (s *Sim) Sample(k int64) *c37118.Data {
	soc, fs := s.FrameTime(k)
	d := &c37118.Data{Header: c37118.Header{Version: s.cfg.Version, SOC: soc, FracSec: fs}}
	t := float64(k) / float64(s.cfg.Rate)
	for i, st := range s.cfg.Stations {
		var p c37118.PMUData
		devHz := 0.05 * math.Sin(2*math.Pi*t/7+float64(i))
		for j := 0; j < st.Phasors; j++ {
			m := amplitude(i, j) * (1 + 0.01*math.Sin(2*math.Pi*t/3+float64(j)))
			a := math.Remainder(2*math.Pi*devHz*t-float64(j%3)*2*math.Pi/3+float64(i)*0.1, 2*math.Pi)
			if st.Format&c37118.FormatPolar != 0 {
				p.Phasors = append(p.Phasors, [2]float64{m, a})
			} else {
				p.Phasors = append(p.Phasors, [2]float64{m * math.Cos(a), m * math.Sin(a)})
			}
		}
		p.Freq = float64(st.NominalHz) + devHz
		p.DFreq = 0.05 * 2 * math.Pi / 7 * math.Cos(2*math.Pi*t/7+float64(i))
		for j := 0; j < st.Analogs; j++ {
			p.Analogs = append(p.Analogs, 1000+100*math.Sin(2*math.Pi*t/11+float64(j)))
		}
		for j := 0; j < st.Digitals; j++ {
			p.Digital = append(p.Digital, uint16(k>>uint(j))&0xFFFF)
		}
		d.PMUs = append(d.PMUs, p)
	}
	return d
}

// DataFrame returns the encoded data frame k under the configuration in force.
func (s *Sim) DataFrame(k int64) ([]byte, error) {
	s.mu.Lock()
	cfg, cnt := s.cfgFrame, s.cfgCnt
	s.mu.Unlock()
	d := s.Sample(k)
	if cnt > 0 {
		for i := range d.PMUs {
			d.PMUs[i].Stat |= c37118.StatConfigChange
		}
	}
	return cfg.AppendData(nil, d)
}

// HeaderFrame returns the header frame.
func (s *Sim) HeaderFrame() ([]byte, error) {
	return c37118.AppendHeaderFrame(nil, c37118.Header{Version: s.cfg.Version, IDCode: s.cfg.IDCode, SOC: uint32(time.Now().Unix())}, s.cfg.Header)
}

func (s *Sim) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return
		}
		s.conns[c] = struct{}{}
		s.mu.Unlock()
		s.wg.Add(1)
		go s.serve(c)
	}
}

// serve answers commands on one connection and streams data while it is on.
func (s *Sim) serve(c net.Conn) {
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		c.Close()
	}()
	var wmu sync.Mutex
	write := func(b []byte) error {
		wmu.Lock()
		defer wmu.Unlock()
		c.SetWriteDeadline(time.Now().Add(10 * time.Second))
		_, err := c.Write(b)
		return err
	}
	data := write
	if s.cfg.UDPData != "" {
		host, port, _ := net.SplitHostPort(s.cfg.UDPData)
		if host == "" {
			host, _, _ = net.SplitHostPort(c.RemoteAddr().String())
		}
		u, err := net.Dial("udp", net.JoinHostPort(host, port))
		if err != nil {
			return
		}
		defer u.Close()
		data = func(b []byte) error {
			// A datagram that cannot be sent is lost, as on a network: the stream goes on.
			if _, err := u.Write(b); err != nil {
				return errUDPLost
			}
			return nil
		}
	}
	dataOn := make(chan bool, 8)
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.stream(dataOn, data)
	}()
	defer func() { close(dataOn); <-done }()
	r := c37118.NewReader(c)
	for {
		frame, h, err := r.Next()
		if err != nil {
			if errors.Is(err, c37118.ErrCRC) {
				continue
			}
			return
		}
		_, cmd, err := c37118.ParseCommand(frame)
		if err != nil || h.IDCode != s.cfg.IDCode {
			continue
		}
		if err := s.answer(cmd, write, dataOn); err != nil {
			return
		}
	}
}

// answer acts on one command: data on/off, or a configuration or header frame written
// with write.
func (s *Sim) answer(cmd uint16, write func([]byte) error, dataOn chan<- bool) error {
	var out []byte
	var err error
	switch cmd {
	case c37118.CmdDataOff:
		dataOn <- false
	case c37118.CmdDataOn:
		dataOn <- true
	case c37118.CmdSendHDR:
		out, err = s.HeaderFrame()
	case c37118.CmdSendCFG1:
		out, err = s.Config(c37118.TypeCfg1).Append(nil)
	case c37118.CmdSendCFG2:
		s.mu.Lock()
		cfg := s.cfgFrame
		s.mu.Unlock()
		out, err = cfg.Append(nil)
	case c37118.CmdSendCFG3:
		cfg := s.Config(c37118.TypeCfg3)
		if s.cfg.Cfg3Fragment == 0 {
			out, err = cfg.Append(nil)
			break
		}
		var frags [][]byte
		if frags, err = cfg.AppendFragments(s.cfg.Cfg3Fragment); err == nil {
			for _, f := range frags {
				if err = write(f); err != nil {
					break
				}
			}
		}
	}
	if err == nil && out != nil {
		err = write(out)
	}
	return err
}

// serveUDP is UDPOnly's server: commands in as datagrams, everything out as datagrams to
// the last command's sender.
func (s *Sim) serveUDP() {
	defer s.wg.Done()
	var peer atomic.Pointer[net.UDPAddr]
	write := func(b []byte) error {
		p := peer.Load()
		if p == nil {
			return errUDPLost
		}
		if _, err := s.pc.WriteToUDP(b, p); err != nil {
			if errors.Is(err, net.ErrClosed) {
				return err
			}
			return errUDPLost
		}
		return nil
	}
	dataOn := make(chan bool, 8)
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.stream(dataOn, write)
	}()
	defer func() { close(dataOn); <-done }()
	buf := make([]byte, c37118.MaxFrameLen)
	for {
		n, from, err := s.pc.ReadFromUDP(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		h, cmd, err := c37118.ParseCommand(buf[:n])
		if err != nil || h.IDCode != s.cfg.IDCode {
			continue
		}
		peer.Store(from)
		if err := s.answer(cmd, write, dataOn); err != nil && !errors.Is(err, errUDPLost) {
			return
		}
	}
}

// stream writes data frames at the configured rate while data is on.
func (s *Sim) stream(dataOn <-chan bool, write func([]byte) error) {
	rate := int64(s.cfg.Rate)
	start := s.cfg.Start.UnixNano()
	on := false
	var timer *time.Timer
	var tick <-chan time.Time
	next := int64(0)
	var held *heldFrame
	for {
		if on {
			now := time.Now().UnixNano()
			if next == 0 || (now-start)*rate/1e9 > next+rate {
				next = (now-start)*rate/1e9 + 1 // (re)start at the next frame due
			}
			due := start + (next*1e9+rate-1)/rate
			if timer == nil {
				timer = time.NewTimer(time.Duration(due - now))
			} else {
				timer.Reset(time.Duration(due - now))
			}
			tick = timer.C
		}
		select {
		case v, ok := <-dataOn:
			if !ok {
				return
			}
			if v != on {
				on, next = v, 0
				if !on && timer != nil {
					timer.Stop()
					tick = nil
				}
			}
			continue
		case <-tick:
		}
		s.sendMu.Lock()
		s.mu.Lock()
		paused := s.paused
		s.mu.Unlock()
		if !paused {
			if err := s.sendFrame(next, &held, write); err != nil {
				s.sendMu.Unlock()
				return
			}
		}
		s.sendMu.Unlock()
		next++
	}
}

var errUDPLost = errors.New("sim: UDP datagram not sent")

type heldFrame struct {
	k int64
	b []byte
}

func every(n int, k int64) bool { return n > 0 && k%int64(n) == int64(n)-1 }

// sendFrame sends data frame k (and a frame held back for reordering after it) and
// records what was sent in Runs. Called with sendMu held.
func (s *Sim) sendFrame(k int64, held **heldFrame, write func([]byte) error) error {
	b, err := s.DataFrame(k)
	if err != nil {
		return err
	}
	corrupt := every(s.cfg.CorruptEvery, k)
	if corrupt {
		b[len(b)-1] ^= 0x5A // a CRC that no longer matches
	}
	lost, badSent := 0, 0
	var sent []int64 // valid frames that left, in the order sent
	send := func(k int64, b []byte, times int) error {
		var err error
		for i := 0; i < times; i++ {
			err = write(b)
		}
		switch {
		case errors.Is(err, errUDPLost):
			lost++
			return nil
		case err == nil && corrupt:
			badSent += times
		case err == nil:
			sent = append(sent, k)
		}
		return err
	}
	switch {
	case every(s.cfg.DropEvery, k):
		lost++
	case every(s.cfg.ReorderEvery, k) && !corrupt && *held == nil:
		*held = &heldFrame{k, b}
		return nil
	default:
		times := 1
		if every(s.cfg.DuplicateEvery, k) {
			times = 2
		}
		err = send(k, b, times)
		corrupt = false // the held frame is a valid one
	}
	if h := *held; h != nil && err == nil {
		*held = nil
		err = send(h.k, h.b, 1)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dropped += int64(lost)
	s.corrupted += int64(badSent)
	// Runs record what was sent by frame index: a frame sent late extends its run.
	for _, k := range sortedInts(sent) {
		if n := len(s.runs); n > 0 && s.runs[n-1].Last == k-1 {
			s.runs[n-1].Last = k
		} else {
			s.runs = append(s.runs, Run{First: k, Last: k})
		}
	}
	return err
}

func sortedInts(v []int64) []int64 {
	if len(v) == 2 && v[0] > v[1] {
		v[0], v[1] = v[1], v[0]
	}
	return v
}

// Expected returns what a PDC client must store for data frame k, by series key under
// prefix as DESIGN.md names PMU series, computed from Sample and the wire formats'
// quantisation independently of any decoder: float32 channels as float64(float32(v)),
// int16 phasors as raw × PHUNIT × 10⁻⁵ (angles raw / 10⁴), int16 FREQ as nominal +
// raw/1000 Hz, DFREQ raw/100 Hz/s, int16 analogs raw × ANUNIT. Integer series (digital
// words, STAT, time quality) are returned as float64. The time is Time(k).
func (s *Sim) Expected(k int64, prefix string) map[string]float64 {
	s.mu.Lock()
	cfg, cnt := s.cfgFrame, s.cfgCnt
	s.mu.Unlock()
	d := s.Sample(k)
	out := map[string]float64{}
	f32 := func(v float64) float64 { return float64(float32(v)) }
	clean := func(n string) string {
		return strings.Map(func(r rune) rune {
			if strings.ContainsRune("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-", r) {
				return r
			}
			return '_'
		}, strings.TrimSpace(n))
	}
	for i, st := range s.cfg.Stations {
		p, cp := d.PMUs[i], cfg.PMUs[i]
		base := prefix + clean(st.Name) + "/"
		for j, ph := range p.Phasors {
			name := base + clean(cp.Phasors[j].Name) + "/"
			a, b := "re", "im"
			if st.Format&c37118.FormatPolar != 0 {
				a, b = "mag", "ang"
			}
			switch {
			case st.Format&c37118.FormatPhasorFloat != 0:
				out[name+a], out[name+b] = f32(ph[0]), f32(ph[1])
			case st.Format&c37118.FormatPolar != 0:
				sc := float64(cp.Phasors[j].Scale)
				out[name+a] = math.Round(ph[0]/(sc*1e-5)) * sc * 1e-5
				out[name+b] = math.Round(ph[1]*1e4) / 1e4
			default:
				sc := float64(cp.Phasors[j].Scale)
				out[name+a] = math.Round(ph[0]/(sc*1e-5)) * sc * 1e-5
				out[name+b] = math.Round(ph[1]/(sc*1e-5)) * sc * 1e-5
			}
		}
		if st.Format&c37118.FormatFreqFloat != 0 {
			out[base+"freq"], out[base+"dfreq"] = f32(p.Freq), f32(p.DFreq)
		} else {
			out[base+"freq"] = float64(st.NominalHz) + float64(int16(math.Round((p.Freq-float64(st.NominalHz))*1000)))/1000
			out[base+"dfreq"] = float64(int16(math.Round(p.DFreq*100))) / 100
		}
		for j, v := range p.Analogs {
			if st.Format&c37118.FormatAnalogFloat != 0 {
				out[base+clean(cp.Analogs[j].Name)] = f32(v)
			} else {
				sc := float64(cp.Analogs[j].Scale)
				out[base+clean(cp.Analogs[j].Name)] = float64(int16(math.Round(v/sc))) * sc
			}
		}
		for j, w := range p.Digital {
			out[base+"digital"+strconv.Itoa(j)] = float64(w)
		}
		stat := p.Stat
		if cnt > 0 {
			stat |= c37118.StatConfigChange
		}
		out[base+"stat"] = float64(stat)
		out[base+"timequality"] = 0
	}
	return out
}

// Time returns the timestamp of data frame k in ns: SOC + FRACSEC / TIME_BASE.
func (s *Sim) Time(k int64) int64 {
	soc, fs := s.FrameTime(k)
	return int64(soc)*1e9 + int64(fs)*1e9/int64(s.cfg.TimeBase)
}

// DropConnections closes every open connection (the listener stays): clients must
// reconnect.
func (s *Sim) DropConnections() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		c.Close()
	}
}
