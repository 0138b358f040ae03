package kafkawire

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// conn is one client connection: a request goroutine (readLoop) and a
// response goroutine (writeLoop) joined by queue, which holds one slot per
// request in request order.
type conn struct {
	s      *Server
	nc     net.Conn
	info   *ConnInfo
	ctx    context.Context // handlers' ctx: done when the connection closes
	cancel context.CancelFunc
	queue  chan *slot     // closed by readLoop when it stops reading
	later  sync.WaitGroup // Later functions still running; writeLoop waits for them
}

// slot is the answer to one request, to be written in its turn.
type slot struct {
	key, version int16 // of the response to write (ApiVersions' downgrade: 18, 0)
	corr         int32
	reply        chan Reply // buffered 1: written once, by readLoop or a Later goroutine
}

// startConn starts serving nc, or closes it when the server is closing.
// Called from an accept loop.
func (s *Server) startConn(nc net.Conn) {
	ctx, cancel := context.WithCancel(s.ctx)
	c := &conn{
		s:      s,
		nc:     nc,
		info:   &ConnInfo{ID: s.nextID.Add(1), RemoteAddr: nc.RemoteAddr(), LocalAddr: nc.LocalAddr()},
		ctx:    ctx,
		cancel: cancel,
		queue:  make(chan *slot, s.cfg.MaxInFlight),
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		cancel()
		nc.Close()
		return
	}
	s.conns[c] = struct{}{}
	s.wg.Add(2)
	s.mu.Unlock()
	go c.readLoop()
	go c.writeLoop()
}

// readLoop reads, decodes and dispatches requests until the client closes
// the connection or breaks the protocol. A broken protocol (a frame too
// large, an unknown key, an unsupported version, a malformed request) gets a
// closing slot: the answers to the requests before it are written, then the
// connection closes. A read error or a truncated frame closes it at once.
func (c *conn) readLoop() {
	defer c.s.wg.Done()
	defer close(c.queue)
	br := bufio.NewReaderSize(c.nc, 64<<10)
	for {
		frame, err := c.readFrame(br)
		if err != nil {
			if errors.Is(err, ErrFrameTooLarge) {
				c.enqueueClose(err)
				return
			}
			if !errors.Is(err, io.EOF) {
				c.s.cfg.Logf("kafka connection %d from %v: %v", c.info.ID, c.info.RemoteAddr, err)
			}
			c.cancel()
			c.nc.Close()
			return
		}
		sl, err := c.dispatch(frame)
		if err != nil {
			c.enqueueClose(err)
			return
		}
		select {
		case c.queue <- sl:
		case <-c.ctx.Done():
			return
		}
	}
}

// readFrame reads one size-prefixed frame. A clean end of the connection
// between frames gives io.EOF; one inside a frame gives ErrTruncatedFrame.
// The body buffer grows with the bytes that arrive, so a size prefix alone
// allocates nothing.
func (c *conn) readFrame(br *bufio.Reader) ([]byte, error) {
	var size [4]byte
	if n, err := io.ReadFull(br, size[:]); err != nil {
		if n == 0 && errors.Is(err, io.EOF) {
			return nil, io.EOF
		}
		return nil, fmt.Errorf("%w: %d of 4 size bytes: %v", ErrTruncatedFrame, n, err)
	}
	n := int32(binary.BigEndian.Uint32(size[:]))
	if n < 0 || n > c.s.cfg.MaxRequestBytes {
		return nil, fmt.Errorf("%w: %d bytes, socket.request.max.bytes is %d", ErrFrameTooLarge, n, c.s.cfg.MaxRequestBytes)
	}
	buf := bytes.NewBuffer(make([]byte, 0, min(int(n), 64<<10)))
	if got, err := io.CopyN(buf, br, int64(n)); err != nil {
		return nil, fmt.Errorf("%w: %d of %d bytes: %v", ErrTruncatedFrame, got, n, err)
	}
	return buf.Bytes(), nil
}

// dispatch decodes one frame, checks it against the registry and calls its
// handler, returning the slot of its answer. An error means the request
// cannot be served and the connection must close.
func (c *conn) dispatch(frame []byte) (*slot, error) {
	h, req, body, err := decodeHeader(frame)
	if err != nil {
		return nil, err
	}
	a, ok := c.s.lookup(h.Key)
	if !ok {
		return nil, fmt.Errorf("%w: %d (%s) is not served", ErrUnknownAPIKey, h.Key, kmsg.NameForKey(h.Key))
	}
	sl := &slot{key: h.Key, version: h.Version, corr: h.CorrelationID, reply: make(chan Reply, 1)}
	if h.Key == apiVersionsKey && h.Version > a.max {
		// KIP-511: a client newer than the broker learns the range of
		// ApiVersions from a v0 answer and retries at a version both know.
		sl.version = 0
		sl.reply <- Respond(c.s.unsupportedAPIVersions(a))
		return sl, nil
	}
	if h.Version < a.min || h.Version > a.max {
		return nil, fmt.Errorf("%w: %s version %d, served are v%d-v%d", ErrUnsupportedVersion, kmsg.NameForKey(h.Key), h.Version, a.min, a.max)
	}
	if err := decodeBody(h, req, body); err != nil {
		return nil, err
	}
	name := kmsg.NameForKey(h.Key)
	r := guard(name, func() Reply { return a.h(c.ctx, &Request{Conn: c.info, Header: h, Msg: req}) })
	if r.later == nil {
		sl.reply <- r
		return sl, nil
	}
	c.later.Add(1)
	go func() {
		defer c.later.Done()
		r := guard(name, r.later)
		if r.later != nil {
			r = Close(fmt.Errorf("%w: %s handler returned Later from Later", ErrBadReply, kmsg.NameForKey(h.Key)))
		}
		sl.reply <- r
	}()
	return sl, nil
}

// guard calls fn; a panic closes the connection (with the panic logged)
// instead of the broker, as Kafka answers an exception in a handler without
// stopping.
func guard(name string, fn func() Reply) (r Reply) {
	defer func() {
		if p := recover(); p != nil {
			r = Close(fmt.Errorf("%w: %s handler panicked: %v", ErrBadReply, name, p))
		}
	}()
	return fn()
}

// enqueueClose queues a slot that closes the connection once the answers
// before it are written.
func (c *conn) enqueueClose(err error) {
	sl := &slot{reply: make(chan Reply, 1)}
	sl.reply <- Close(err)
	select {
	case c.queue <- sl:
	case <-c.ctx.Done():
	}
}

// writeLoop writes the answers in request order. It closes the connection
// when a slot says so, on a write error, or once readLoop has stopped and
// every answer is written; then it waits for the Later functions still
// running (their ctx is done) and forgets the connection.
func (c *conn) writeLoop() {
	defer c.s.wg.Done()
	defer func() {
		c.cancel()
		c.nc.Close()
		c.later.Wait()
		c.s.mu.Lock()
		delete(c.s.conns, c)
		c.s.mu.Unlock()
	}()
	var buf []byte
	for sl := range c.queue {
		var r Reply
		select {
		case r = <-sl.reply:
		case <-c.ctx.Done():
			return
		}
		var err error
		buf, err = c.encode(buf[:0], sl, r)
		if err != nil {
			c.s.cfg.Logf("kafka connection %d from %v closed: %v", c.info.ID, c.info.RemoteAddr, err)
			return
		}
		if len(buf) == 0 {
			continue // NoResponse
		}
		if _, err := c.nc.Write(buf); err != nil {
			return
		}
	}
}

// encode appends the response frame of r to dst: size, correlation id, the
// response header's tagged fields when the response is flexible (never for
// ApiVersions: its response header is always v0, so that any client can read
// it), then the body. NoResponse appends nothing; Close and unusable replies
// give an error.
func (c *conn) encode(dst []byte, sl *slot, r Reply) ([]byte, error) {
	switch {
	case r.close != nil:
		return dst, r.close
	case r.none:
		return dst, nil
	case r.resp == nil:
		return dst, fmt.Errorf("%w: %s handler returned the zero Reply", ErrBadReply, kmsg.NameForKey(sl.key))
	case r.resp.Key() != sl.key:
		return dst, fmt.Errorf("%w: %s handler answered with a %s response", ErrBadReply, kmsg.NameForKey(sl.key), kmsg.NameForKey(r.resp.Key()))
	}
	r.resp.SetVersion(sl.version)
	dst = append(dst, 0, 0, 0, 0)
	dst = binary.BigEndian.AppendUint32(dst, uint32(sl.corr))
	if r.resp.IsFlexible() && sl.key != apiVersionsKey {
		dst = append(dst, 0) // no tagged fields in the response header
	}
	dst = r.resp.AppendTo(dst)
	binary.BigEndian.PutUint32(dst, uint32(len(dst)-4))
	return dst, nil
}
