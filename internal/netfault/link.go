package netfault

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Mode says which directions of a link carry bytes.
type Mode int32

// The modes of a link. "Forward" is from the side that connects (the
// client) to the target; "back" is the answers.
const (
	Pass      Mode = iota // both directions carry bytes
	Blackhole             // nothing arrives either way (held until the mode changes)
	DropBack              // requests arrive, answers do not
	DropFwd               // requests do not arrive, answers (of earlier requests) do
)

func (m Mode) String() string {
	switch m {
	case Pass:
		return "pass"
	case Blackhole:
		return "blackhole"
	case DropBack:
		return "drop-back"
	case DropFwd:
		return "drop-forward"
	}
	return fmt.Sprintf("mode(%d)", int32(m))
}

// ParseMode is the inverse of Mode.String.
func ParseMode(s string) (Mode, error) {
	for _, m := range []Mode{Pass, Blackhole, DropBack, DropFwd} {
		if m.String() == s {
			return m, nil
		}
	}
	return 0, fmt.Errorf("link mode %q: want pass, blackhole, drop-back or drop-forward", s)
}

// Errors of this package; match them with errors.Is.
var (
	// ErrClosed is returned by a Link's methods after Close.
	ErrClosed = errors.New("netfault: link closed")
	// ErrBadResolve: a Kafka link's Resolver answered something that is
	// not HOST:PORT; the client's connection is closed.
	ErrBadResolve = errors.New("netfault: resolver answer is not HOST:PORT")
)

// Link is a loopback TCP proxy to one target. Its methods are safe for
// concurrent use; SetMode takes effect at once on every open connection.
type Link struct {
	target string
	lis    net.Listener
	log    *slog.Logger
	mode   atomic.Int32
	// delay and jitter, in nanoseconds: each chunk is forwarded after
	// delay ± a uniformly random share of jitter.
	delay, jitter atomic.Int64
	// resolve is set for a Kafka link (ListenKafka); nil for a link
	// that only carries bytes.
	resolve Resolver
	// The counters Stats reports.
	accepted, open      atomic.Int64
	bytesFwd, bytesBack atomic.Int64
	requests, responses atomic.Int64

	mu     sync.Mutex
	conns  map[net.Conn]struct{} // open connections, both sides; guarded by mu
	closed bool
	// modeChanged is closed (and replaced) by every SetMode and by Close,
	// waking pumps that hold bytes. Guarded by mu.
	modeChanged chan struct{}
	wg          sync.WaitGroup
}

// Listen starts a link on a loopback port the kernel picks, forwarding to
// target.
func Listen(target string, logger *slog.Logger) (*Link, error) {
	l, err := listen(target, logger)
	if err != nil {
		return nil, err
	}
	l.start()
	return l, nil
}

// listen binds the link's port; start accepts on it.
func listen(target string, logger *slog.Logger) (*Link, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("netfault: listen: %w", err)
	}
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &Link{target: target, lis: lis, log: logger, conns: map[net.Conn]struct{}{}, modeChanged: make(chan struct{})}, nil
}

func (l *Link) start() {
	l.wg.Add(1)
	go l.accept()
}

// Stats are a link's counters since it started.
type Stats struct {
	// Accepted counts the connections accepted; Open those connected to
	// the target now.
	Accepted, Open int64
	// BytesForward and BytesBack count the bytes delivered each way (to
	// the target, and its answers back), not those held by a cut.
	BytesForward, BytesBack int64
	// Requests and Responses count the whole Kafka frames delivered each
	// way (Kafka links only; 0 on others).
	Requests, Responses int64
}

// Stats returns the link's counters.
func (l *Link) Stats() Stats {
	return Stats{Accepted: l.accepted.Load(), Open: l.open.Load(),
		BytesForward: l.bytesFwd.Load(), BytesBack: l.bytesBack.Load(),
		Requests: l.requests.Load(), Responses: l.responses.Load()}
}

// Kafka reports whether the link rewrites Kafka answers (ListenKafka).
func (l *Link) Kafka() bool { return l.resolve != nil }

// Addr is the address to dial instead of the target.
func (l *Link) Addr() string { return l.lis.Addr().String() }

// Target is where the link forwards to.
func (l *Link) Target() string { return l.target }

// SetMode changes which directions carry bytes. Bytes held while a
// direction was cut flow again, in order, once it carries bytes.
func (l *Link) SetMode(m Mode) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.mode.Store(int32(m))
	close(l.modeChanged)
	l.modeChanged = make(chan struct{})
}

// wait returns a channel closed at the next mode change or Close.
func (l *Link) wait() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.modeChanged
}

// Mode returns the current mode.
func (l *Link) Mode() Mode { return Mode(l.mode.Load()) }

// SetDelay delays every chunk of bytes by d in both directions (0: none).
func (l *Link) SetDelay(d time.Duration) { l.delay.Store(int64(d)) }

// SetJitter varies the delay of each chunk by up to ±j (never below 0).
func (l *Link) SetJitter(j time.Duration) { l.jitter.Store(int64(j)) }

// Delay returns the delay and jitter.
func (l *Link) Delay() (delay, jitter time.Duration) {
	return time.Duration(l.delay.Load()), time.Duration(l.jitter.Load())
}

// Close stops accepting, closes every connection and waits for the
// forwarding goroutines.
func (l *Link) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return ErrClosed
	}
	l.closed = true
	for c := range l.conns {
		c.Close()
	}
	close(l.modeChanged)
	l.modeChanged = make(chan struct{})
	l.mu.Unlock()
	err := l.lis.Close()
	l.wg.Wait()
	return err
}

func (l *Link) track(c net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	l.conns[c] = struct{}{}
	return true
}

func (l *Link) untrack(c net.Conn) {
	l.mu.Lock()
	delete(l.conns, c)
	l.mu.Unlock()
	c.Close()
}

func (l *Link) accept() {
	defer l.wg.Done()
	for {
		in, err := l.lis.Accept()
		if err != nil {
			return
		}
		if !l.track(in) {
			in.Close()
			return
		}
		l.accepted.Add(1)
		l.wg.Add(1)
		go l.serve(in)
	}
}

// serve connects one accepted connection to the target. A connection
// accepted while the forward direction drops is still connected (the SYN
// got through, as a TCP handshake does through a route that later drops),
// but nothing it sends arrives.
func (l *Link) serve(in net.Conn) {
	defer l.wg.Done()
	out, err := net.DialTimeout("tcp", l.target, 5*time.Second)
	if err != nil {
		l.log.Debug("link: target unreachable", "target", l.target, "err", err)
		l.untrack(in) // the target refuses: so does the link
		return
	}
	if !l.track(out) {
		out.Close()
		l.untrack(in)
		return
	}
	var fwd, back stream = passStream{}, passStream{}
	if l.resolve != nil {
		kc := newKafkaConn(l.resolve, l.log)
		fwd, back = &requestStream{kc: kc}, &responseStream{kc: kc}
	}
	l.open.Add(1)
	defer l.open.Add(-1)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); l.pump(out, in, DropFwd, fwd, &l.bytesFwd, &l.requests); l.untrack(out) }()
	go func() { defer wg.Done(); l.pump(in, out, DropBack, back, &l.bytesBack, &l.responses); l.untrack(in) }()
	wg.Wait()
}

// passStream delivers what it reads as it is.
type passStream struct{}

func (passStream) feed(in []byte) ([]byte, int, error) { return in, 0, nil }

// pump copies src to dst. While the mode cuts this direction (Blackhole,
// or cut), it holds what it read and reads no more, so the sender's
// buffers fill and its writes stall, as TCP over a route that lost every
// packet: nothing arrives, and when the route is back everything sent
// arrives in order. (Discarding bytes instead would corrupt the byte
// stream of a connection that outlives the cut, which no real network
// does to TCP.)
//
// s sees every chunk as it is read (a Kafka link rewrites answers there);
// what it returns is what is held and delivered. bytes and msgs count
// what was delivered.
func (l *Link) pump(dst, src net.Conn, cut Mode, s stream, bytes, msgs *atomic.Int64) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			out, m, ferr := s.feed(buf[:n])
			if ferr != nil {
				l.log.Warn("link: closing a connection", "target", l.target, "err", ferr)
				return
			}
			d, j := l.Delay()
			if j > 0 {
				d += time.Duration(rand.Int64N(int64(2*j)+1)) - j
			}
			if d > 0 {
				time.Sleep(d)
			}
			for {
				changed := l.wait()
				if m := l.Mode(); m != Blackhole && m != cut {
					break
				}
				<-changed
				if l.isClosed() {
					return
				}
			}
			if _, werr := dst.Write(out); werr != nil {
				return
			}
			bytes.Add(int64(len(out)))
			msgs.Add(int64(m))
		}
		if err != nil {
			return
		}
	}
}

func (l *Link) isClosed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed
}
