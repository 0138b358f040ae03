package kafkawire

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Config is a Server's configuration; the zero value serves with Kafka's
// defaults.
type Config struct {
	// MaxRequestBytes is Kafka's socket.request.max.bytes: a frame whose
	// size prefix is larger closes the connection. 0 means 100 MiB.
	MaxRequestBytes int32
	// MaxInFlight bounds the requests of one connection that are read but
	// not yet answered; the request goroutine stops reading (TCP pushes
	// back) until the oldest is written. 0 means 64.
	MaxInFlight int
	// Logf receives one line per closed connection that broke the
	// protocol, and per handler failure. nil discards them. Called from
	// connection goroutines, concurrently.
	Logf func(format string, args ...any)
}

// DefaultMaxRequestBytes is Kafka's default socket.request.max.bytes.
const DefaultMaxRequestBytes = 100 << 20

const defaultMaxInFlight = 64

// Request is one decoded request, as a handler receives it.
type Request struct {
	Conn   *ConnInfo
	Header Header
	// Msg is the request body at Header.Version, e.g.
	// *kmsg.MetadataRequest; its ResponseKind is the response to fill.
	Msg kmsg.Request
}

// ConnInfo describes the connection a request came on. It is shared by every
// request of the connection.
type ConnInfo struct {
	ID         uint64 // unique within the Server, from 1
	RemoteAddr net.Addr
	LocalAddr  net.Addr

	software atomic.Pointer[[2]string] // KIP-511 name and version, set by ApiVersions v3+

	localMu sync.Mutex
	local   map[any]any // Local's values
}

// Local returns the connection's value for key, made by mk on the first
// call for key: state a handler keeps per connection (the broker's
// Produce keeps each partition's last proposal there), forgotten with the
// connection. Safe from any goroutine; mk runs at most once per key.
func (c *ConnInfo) Local(key any, mk func() any) any {
	c.localMu.Lock()
	defer c.localMu.Unlock()
	v, ok := c.local[key]
	if !ok {
		if c.local == nil {
			c.local = map[any]any{}
		}
		v = mk()
		c.local[key] = v
	}
	return v
}

// ClientSoftware returns the client software name and version the client
// sent in ApiVersions v3+ (KIP-511), or "", "" before that or for older
// clients. Safe from any goroutine.
func (c *ConnInfo) ClientSoftware() (name, version string) {
	if p := c.software.Load(); p != nil {
		return p[0], p[1]
	}
	return "", ""
}

// Reply is a handler's answer to one request. Build one with Respond,
// NoResponse, Later or Close; the zero Reply is a handler bug and closes the
// connection.
type Reply struct {
	resp  kmsg.Response
	none  bool
	later func() Reply
	close error
}

// Respond answers with resp, which must be the response kind of the request's
// key (the server sets its version to the request's).
func Respond(resp kmsg.Response) Reply { return Reply{resp: resp} }

// NoResponse sends nothing back, e.g. to a Produce with acks=0: the client
// expects no response and the next request's response follows directly.
func NoResponse() Reply { return Reply{none: true} }

// Later finishes the answer on a goroutine of its own: the request goroutine
// goes on to the connection's next request at once, and fn's Reply (Respond,
// NoResponse or Close; not Later again) is still written in request order.
// Use it for whatever may block: a long-poll Fetch, a Produce waiting for
// acks=all. fn must return once the handler's ctx is done.
func Later(fn func() Reply) Reply { return Reply{later: fn} }

// Close answers by closing the connection, as Kafka does for a request it
// cannot serve at all; err is logged.
func Close(err error) Reply {
	if err == nil {
		err = errors.New("closed by handler")
	}
	return Reply{close: err}
}

// HandlerFunc serves one API key.
//
// Who calls it: the connection's request goroutine, in request order, one
// request at a time per connection (different connections call it
// concurrently). So what a handler does before it returns (appending a
// Produce's batches, say) happens in the order the client sent the requests.
// It must not block for long: it holds up the connection's next requests,
// though never another connection's. Work that may block goes in Later,
// whose function runs concurrently with the connection's later requests;
// responses are written in request order all the same.
//
// ctx is done when the connection closes or the server is closed. req.Msg is
// owned by the handler; the server does not touch it after the call.
// A panic in the handler or its Later function closes the connection (and
// is logged); the server and its other connections go on.
type HandlerFunc func(ctx context.Context, req *Request) Reply

// api is one registered API key.
type api struct {
	key, min, max int16
	h             HandlerFunc
}

// Server serves Kafka's protocol on any number of listeners.
type Server struct {
	cfg Config

	mu     sync.Mutex
	apis   map[int16]api // written by Register before Serve; read-only after
	lns    map[net.Listener]struct{}
	conns  map[*conn]struct{}
	closed bool // guarded by mu; once true, Serve and new connections are refused

	serving atomic.Bool // set by the first Serve; Register panics after it
	nextID  atomic.Uint64
	ctx     context.Context // done at Close: every connection's ctx derives from it
	cancel  context.CancelFunc
	wg      sync.WaitGroup // connection goroutines
}

// NewServer returns a server that serves ApiVersions (key 18, v0-v4) and
// nothing else until Register adds keys.
func NewServer(cfg Config) *Server {
	if cfg.MaxRequestBytes <= 0 {
		cfg.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = defaultMaxInFlight
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{
		cfg:    cfg,
		apis:   map[int16]api{},
		lns:    map[net.Listener]struct{}{},
		conns:  map[*conn]struct{}{},
		ctx:    ctx,
		cancel: cancel,
	}
	s.registerAPIVersions()
	return s
}

// Register serves key at versions min..max with h, and advertises that range
// in ApiVersions. It must be called before the first Serve, from one
// goroutine. It panics on a key kmsg does not know, a range kmsg cannot
// encode, or a key registered twice: all programming errors.
func (s *Server) Register(key, min, max int16, h HandlerFunc) {
	if s.serving.Load() {
		panic("kafkawire: Register after Serve")
	}
	req := kmsg.RequestForKey(key)
	switch {
	case req == nil:
		panic(fmt.Sprintf("kafkawire: Register of unknown API key %d", key))
	case min < 0 || max < min || max > req.MaxVersion():
		panic(fmt.Sprintf("kafkawire: Register %s v%d-v%d: kmsg encodes v0-v%d", kmsg.NameForKey(key), min, max, req.MaxVersion()))
	case h == nil:
		panic(fmt.Sprintf("kafkawire: Register %s with a nil handler", kmsg.NameForKey(key)))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, dup := s.apis[key]; dup {
		panic(fmt.Sprintf("kafkawire: %s registered twice", kmsg.NameForKey(key)))
	}
	s.apis[key] = api{key: key, min: min, max: max, h: h}
}

// advertised is the ApiVersions list: every registered key with its range,
// by key.
func (s *Server) advertised() []kmsg.ApiVersionsResponseApiKey {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]kmsg.ApiVersionsResponseApiKey, 0, len(s.apis))
	for _, a := range s.apis {
		k := kmsg.NewApiVersionsResponseApiKey()
		k.ApiKey, k.MinVersion, k.MaxVersion = a.key, a.min, a.max
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ApiKey < out[j].ApiKey })
	return out
}

// lookup returns the registration of key. Called from request goroutines;
// apis no longer changes once serving.
func (s *Server) lookup(key int16) (api, bool) {
	a, ok := s.apis[key]
	return a, ok
}

// Serve accepts connections on ln until Close (or until ln fails) and serves
// each on goroutines of its own. It returns ErrServerClosed after Close.
// Serve may be called for several listeners at once.
func (s *Server) Serve(ln net.Listener) error {
	s.serving.Store(true)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		ln.Close()
		return ErrServerClosed
	}
	s.lns[ln] = struct{}{}
	s.mu.Unlock()
	for {
		nc, err := ln.Accept()
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			delete(s.lns, ln)
			s.mu.Unlock()
			if closed {
				return ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return err
		}
		s.startConn(nc)
	}
}

// Close stops every listener, closes every connection (their handlers' ctx
// is done) and waits for the connection goroutines, Later functions
// included, to return.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	for ln := range s.lns {
		ln.Close()
	}
	for c := range s.conns {
		c.nc.Close()
	}
	s.mu.Unlock()
	s.cancel()
	s.wg.Wait()
	return nil
}
