package raftnet

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"

	raftv1 "github.com/tapes-dev/tapes/internal/gen/tapes/raft/v1"
)

// This file coalesces heartbeats, and the AppendEntries that carry no
// entries, on one stream per peer. Idle, hashicorp/raft sends every
// follower of every group a heartbeat each HeartbeatTimeout/10 to
// 2*HeartbeatTimeout/10, and an AppendEntries without entries each
// CommitTimeout to 2*CommitTimeout; with a hundred groups per broker pair
// that is hundreds of calls a second, and what an idle broker spends is
// mostly the fixed cost of each message: a gRPC call (HTTP/2 headers and
// trailers, a stream, a handler), and above all the wake-ups and syscalls of
// both processes. So these calls to one peer are queued in the peer
// connection's hbBatcher, which sends what came within HeartbeatLinger as
// one message on a long-lived HeartbeatStream; the peer answers each call
// by its number, a message's answers together (see heartbeat_server.go).
//
// Only small calls go this way: heartbeats (see isHeartbeat) and
// AppendEntries without entries. The latter still go through the peer
// raft's consumer channel and are still reported to the AppendObserver;
// their send time is taken before the linger, so that a follower never
// looks more caught up than it is. Only raft's idle CommitTimeout round
// lingers (see Transport.appendLingers): raft replicates to a follower one
// AppendEntries at a time, and a new leader's first entries wait on the
// probe it sends each follower first. AppendEntries with entries are calls
// of their own (no linger, and no head-of-line blocking of heartbeats
// behind a large message).
//
// Every message costs a wake-up of the process that receives it, and the
// wake-ups, more than the bytes, are what an idle broker spends. So
// whenever a Mux sends anyway (a batch is due, or it answers a peer's
// message), its other batches that have waited half their linger leave in
// the same burst (see Mux.nudge): a peer then gets its answers and this
// broker's heartbeats together, and the traffic of a broker settles into a
// few bursts per linger.

const (
	// maxHeartbeatBatch bounds the calls of one message (about 50 bytes
	// each); a full queue leaves at once.
	maxHeartbeatBatch = 1024
)

var (
	// errBatcherClosed fails calls queued on, or sent over, a connection
	// that was closed because its peer moved or the Mux closed; raft retries
	// them on the new one.
	errBatcherClosed = status.Error(codes.Unavailable, "raftnet: connection to peer closed")
	// errStreamEnded fails the calls a peer ended its heartbeat stream
	// without answering (it is shutting down).
	errStreamEnded = status.Error(codes.Unavailable, "raftnet: peer ended the heartbeat stream")
	// errConnLost fails the calls on a stream whose connection is going
	// away (the peer sent GOAWAY, or the connection broke).
	errConnLost = status.Error(codes.Unavailable, "raftnet: connection to peer lost")
)

// hbCall is one call waiting in an hbBatcher, and its answer.
type hbCall struct {
	// msg is what goes on the wire: the caller sets the request; the
	// batcher sets Id and TimeoutMicros when it sends the call (under its
	// mu).
	msg      raftv1.HeartbeatCall
	deadline time.Time
	// gone is done once the caller stopped waiting for reasons of its own
	// (its Transport closed); such calls are left out of the batch.
	gone <-chan struct{}
	// done receives at most one result (none when the call was left out or
	// forgotten); buffered, so that the batcher never waits for a caller
	// that left.
	done chan hbResult
	// st is the stream the call was sent on until it is answered or
	// failed; guarded by the batcher's mu.
	st *hbStream
}

type hbResult struct {
	answer *raftv1.HeartbeatAnswer // with no error
	err    error
}

// hbBatcher queues the heartbeats (and AppendEntries without entries) of
// every group of a Mux to one dial target and sends them on one
// HeartbeatStream. A call leaves at the latest linger after it was queued:
// the first call of a batch starts the linger timer, and when it fires
// everything queued leaves in one message. A full batch (maxHeartbeatBatch)
// leaves at once. With no linger, a call leaves at once when no call on
// the stream awaits an answer, and otherwise with everything queued as
// soon as those are answered (or have failed, or their callers gave up).
//
// Messages are sent by the batcher's goroutine (run); sending does not wait
// for answers, so a peer that is slow to answer delays no later batch. The
// stream is opened when a batch is due and none is open; while the peer is
// down, opening waits for it up to the latest deadline of the batch (see
// waitForPeer), and the batches queued meanwhile leave once it is back;
// recv reads the stream's answers and hands each to its caller. When the stream breaks, the calls it has not answered fail at once
// and the next batch opens a new stream; when the connection stops being
// ready (the peer sent GOAWAY, e.g. a graceful stop, or the connection
// broke), watch ends the stream, so that the peer's graceful stop does not
// wait for it. A caller that gives up (its deadline, or its Transport's
// Close) forgets its call, so that nothing is left behind when a peer never
// answers.
type hbBatcher struct {
	client raftv1.RaftServiceClient
	linger time.Duration
	// sent, when set, is called when a batch leaves because it is due (not
	// because it was nudged): the Mux then nudges its other batchers.
	sent func()

	// ctx is the parent of every stream; close cancels it.
	ctx    context.Context
	cancel context.CancelFunc
	// timer wakes run when the queued batch is due. It is stopped, never
	// drained: a timer that fires for a batch already gone finds an empty
	// queue, or sends a later one early.
	timer *time.Timer
	stop  chan struct{} // closed by close; run returns

	mu      sync.Mutex
	queue   []*hbCall
	firstAt time.Time // when the first call of queue came
	armed   bool      // timer is due to send queue
	nudged  bool      // queue leaves early, with other traffic
	closed  bool      // by close
	stream  *hbStream // the open stream, if any
	nextID  uint64    // last call id used
}

// hbStream is one HeartbeatStream and the calls sent on it that await an
// answer.
type hbStream struct {
	s      raftv1.RaftService_HeartbeatStreamClient
	cancel context.CancelFunc
	// pending holds the calls awaiting an answer, by id; nil once the
	// stream ended. Guarded by the batcher's mu, as is err.
	pending map[uint64]*hbCall
	err     error // why the stream ended
}

// newHBBatcher starts a batcher sending over client. cc, when not nil, is
// the connection under client: the batcher ends its stream when cc stops
// being ready.
func newHBBatcher(client raftv1.RaftServiceClient, cc *grpc.ClientConn, linger time.Duration, sent func()) *hbBatcher {
	ctx, cancel := context.WithCancel(context.Background())
	b := &hbBatcher{
		client: client,
		linger: linger,
		sent:   sent,
		ctx:    ctx,
		cancel: cancel,
		timer:  time.NewTimer(time.Hour),
		stop:   make(chan struct{}),
	}
	b.timer.Stop()
	go b.run()
	if cc != nil {
		go b.watch(cc)
	}
	return b
}

// enqueue queues c; unless linger, the queue leaves at once. It fails only
// when the batcher is closed.
func (b *hbBatcher) enqueue(c *hbCall, linger bool) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return errBatcherClosed
	}
	b.queue = append(b.queue, c)
	if len(b.queue) == 1 {
		b.firstAt = time.Now()
	}
	switch {
	case len(b.queue) >= maxHeartbeatBatch || !linger:
		b.armed = true
		b.timer.Reset(0)
	case b.armed:
	case b.linger > 0:
		b.armed = true
		b.timer.Reset(b.linger)
	case b.stream == nil || len(b.stream.pending) == 0:
		b.armed = true
		b.timer.Reset(0)
	default:
		// No linger and calls on the wire: the queue leaves once they
		// are answered (see armIdleLocked).
	}
	return nil
}

// armIdleLocked sends the queue now if the batcher has no linger, nothing
// is due to send it, and no call of st awaits an answer any more. b.mu is
// held.
func (b *hbBatcher) armIdleLocked(st *hbStream) {
	if b.linger == 0 && !b.armed && len(b.queue) > 0 && len(st.pending) == 0 {
		b.armed = true
		b.timer.Reset(0)
	}
}

// nudge sends the queued batch now if its first call has waited at least
// half the linger: the process is sending to some peer anyway (see
// Mux.nudge), and a batch that leaves in the same burst costs no wake-up of
// its own, here or, when it goes with answers, at the peer.
func (b *hbBatcher) nudge(now time.Time) {
	b.mu.Lock()
	if !b.closed && len(b.queue) > 0 && !b.nudged && now.Sub(b.firstAt) >= b.linger/2 {
		b.nudged = true
		b.armed = true
		b.timer.Reset(0)
	}
	b.mu.Unlock()
}

// forget drops c, whose caller stopped waiting, from the calls awaiting an
// answer; a call still queued is left out when its batch leaves.
func (b *hbBatcher) forget(c *hbCall) {
	b.mu.Lock()
	if st := c.st; st != nil && st.pending != nil {
		delete(st.pending, c.msg.Id)
		b.armIdleLocked(st)
	}
	c.st = nil
	b.mu.Unlock()
}

// run sends the batches its timer makes due, until close.
func (b *hbBatcher) run() {
	for {
		select {
		case <-b.timer.C:
		case <-b.stop:
			return
		}
		b.mu.Lock()
		batch := b.queue
		due := len(batch) > 0 && !b.nudged
		b.queue = nil
		b.armed = false
		b.nudged = false
		if len(batch) > maxHeartbeatBatch {
			// More came while a batch was being sent (or a stream
			// opened): the rest leaves right after this one.
			b.queue = append([]*hbCall(nil), batch[maxHeartbeatBatch:]...)
			batch = batch[:maxHeartbeatBatch]
			b.armed = true
			b.timer.Reset(0)
		}
		b.mu.Unlock()
		if due && b.sent != nil {
			b.sent()
		}
		if len(batch) > 0 {
			b.send(batch)
		}
	}
}

// send sends batch as one message on the stream, opening one if needed.
// Every call of it gets one result, from recv or from a failure, except the
// calls whose caller has given up.
func (b *hbBatcher) send(batch []*hbCall) {
	now := time.Now()
	calls := batch[:0]
	var last time.Time
	for _, c := range batch {
		if !now.Before(c.deadline) {
			continue // its caller has timed out
		}
		select {
		case <-c.gone:
			continue
		default:
		}
		calls = append(calls, c)
		if c.deadline.After(last) {
			last = c.deadline
		}
	}
	if len(calls) == 0 {
		return
	}
	st, err := b.openStream(last)
	if err != nil {
		for _, c := range calls {
			c.done <- hbResult{err: err}
		}
		return
	}
	// Opening may have waited for the peer: calls whose caller has timed
	// out meanwhile stay behind, the others carry what is left of their
	// time.
	now = time.Now()
	live := calls[:0]
	for _, c := range calls {
		if now.Before(c.deadline) {
			live = append(live, c)
		}
	}
	if len(live) == 0 {
		return
	}
	msg := &raftv1.HeartbeatStreamRequest{Calls: make([]*raftv1.HeartbeatCall, len(live))}
	b.mu.Lock()
	if st.pending == nil { // ended since it was opened
		err := st.err
		b.mu.Unlock()
		for _, c := range live {
			c.done <- hbResult{err: err}
		}
		return
	}
	for i, c := range live {
		b.nextID++
		c.msg.Id = b.nextID
		c.msg.TimeoutMicros = max(c.deadline.Sub(now).Microseconds(), 1)
		c.st = st
		st.pending[c.msg.Id] = c
		msg.Calls[i] = &c.msg
	}
	b.mu.Unlock()
	if err := st.s.Send(msg); err != nil {
		b.endStream(st, err)
	}
}

// openStream returns the open stream, or opens one. Opening waits for the
// peer while it is down or connecting (see waitForPeer), until deadline at
// the latest (the calls of the batch have given up by then).
func (b *hbBatcher) openStream(deadline time.Time) (*hbStream, error) {
	b.mu.Lock()
	st, closed := b.stream, b.closed
	b.mu.Unlock()
	if closed {
		return nil, errBatcherClosed
	}
	if st != nil {
		return st, nil
	}
	ctx, cancel := context.WithCancel(b.ctx)
	expire := time.AfterFunc(time.Until(deadline), cancel)
	s, err := b.client.HeartbeatStream(ctx, waitForPeer)
	if !expire.Stop() {
		cancel()
		err = status.Error(codes.DeadlineExceeded, "raftnet: heartbeat stream to peer not opened in time")
	}
	if b.ctx.Err() != nil {
		err = errBatcherClosed
	}
	if err != nil {
		cancel()
		return nil, err
	}
	st = &hbStream{s: s, cancel: cancel, pending: make(map[uint64]*hbCall)}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		cancel()
		return nil, errBatcherClosed
	}
	b.stream = st
	b.mu.Unlock()
	go b.recv(st)
	return st, nil
}

// recv hands the answers of st to their callers until st ends.
func (b *hbBatcher) recv(st *hbStream) {
	type answered struct {
		c *hbCall
		a *raftv1.HeartbeatAnswer
	}
	var ready []answered
	for {
		in, err := st.s.Recv()
		if err != nil {
			b.endStream(st, err)
			return
		}
		b.mu.Lock()
		for _, a := range in.GetAnswers() {
			if c := st.pending[a.GetId()]; c != nil {
				delete(st.pending, a.GetId())
				c.st = nil
				ready = append(ready, answered{c, a})
			}
		}
		b.armIdleLocked(st)
		b.mu.Unlock()
		for _, r := range ready {
			r.c.done <- heartbeatResultFromProto(r.c.msg.GetGroup(), r.a)
		}
		clear(ready)
		ready = ready[:0]
	}
}

// endStream ends st, if it has not ended yet: it is no longer used for new
// batches, and the calls it has not answered fail with the reason.
func (b *hbBatcher) endStream(st *hbStream, reason error) {
	b.mu.Lock()
	if b.stream == st {
		b.stream = nil
	}
	pending := st.pending
	if pending != nil {
		st.pending = nil
		switch {
		case b.closed:
			st.err = errBatcherClosed
		case errors.Is(reason, io.EOF):
			st.err = errStreamEnded
		default:
			st.err = reason
		}
	}
	err := st.err
	b.armIdleLocked(st)
	b.mu.Unlock()
	st.cancel()
	for _, c := range pending {
		c.done <- hbResult{err: err}
	}
}

// watch ends the stream whenever cc leaves the ready state: after a GOAWAY
// (the peer stops gracefully, and waits for its streams to end) or a broken
// connection. The next batch opens a new stream.
func (b *hbBatcher) watch(cc *grpc.ClientConn) {
	state := cc.GetState()
	for cc.WaitForStateChange(b.ctx, state) {
		state = cc.GetState()
		if state == connectivity.Ready {
			continue
		}
		b.mu.Lock()
		st := b.stream
		b.mu.Unlock()
		if st != nil {
			b.endStream(st, errConnLost)
		}
	}
}

// close fails the queued calls and those awaiting an answer, ends the
// stream and the batcher's goroutines. Idempotent.
func (b *hbBatcher) close() {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return
	}
	b.closed = true
	b.timer.Stop()
	close(b.stop)
	queue := b.queue
	b.queue = nil
	st := b.stream
	b.mu.Unlock()
	b.cancel()
	if st != nil {
		b.endStream(st, errBatcherClosed)
	}
	for _, c := range queue {
		c.done <- hbResult{err: errBatcherClosed}
	}
}

// viaBatcher sends args, a heartbeat or an AppendEntries without entries,
// through the batcher of target's connection (at once, with whatever is
// queued, unless linger) and waits for its answer, its timeout or the
// Transport's Close, whichever comes first.
func (t *Transport) viaBatcher(op string, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse, timeout time.Duration, linger bool) error {
	pc, err := t.peer(target)
	if err != nil {
		return t.fail(op, target, err)
	}
	c := &hbCall{
		deadline: time.Now().Add(timeout),
		gone:     t.ctx.Done(),
		done:     make(chan hbResult, 1),
	}
	heartbeatCallFromRequest(&c.msg, t.name, args)
	if err := pc.hb.enqueue(c, linger); err != nil {
		return t.fail(op, target, err)
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case r := <-c.done:
		if r.err != nil {
			return t.fail(op, target, r.err)
		}
		// Written here, on raft's goroutine, never by the batcher: once
		// this call returned, raft reuses resp.
		responseFromHeartbeatAnswer(r.answer, resp)
		return nil
	case <-timer.C:
		pc.hb.forget(c)
		return t.fail(op, target, status.Error(codes.DeadlineExceeded, "raftnet: "+op+" timed out"))
	case <-t.ctx.Done():
		pc.hb.forget(c)
		return raft.ErrTransportShutdown
	}
}

// heartbeatResultFromProto turns the answer to one call of the stream into
// what a single AppendEntries call would have returned.
func heartbeatResultFromProto(group string, a *raftv1.HeartbeatAnswer) hbResult {
	e := a.GetError()
	if e == nil {
		return hbResult{answer: a}
	}
	switch e.GetKind() {
	case raftv1.HeartbeatErrorKind_HEARTBEAT_ERROR_KIND_UNKNOWN_GROUP:
		return hbResult{err: unknownGroupStatus(group)}
	case raftv1.HeartbeatErrorKind_HEARTBEAT_ERROR_KIND_RAFT:
		return hbResult{err: status.Error(codes.Unknown, e.GetMessage())}
	case raftv1.HeartbeatErrorKind_HEARTBEAT_ERROR_KIND_NOT_ANSWERED:
		return hbResult{err: status.Error(codes.DeadlineExceeded, e.GetMessage())}
	default:
		return hbResult{err: status.Errorf(codes.Internal, "raftnet: heartbeat answer of kind %v: %s", e.GetKind(), e.GetMessage())}
	}
}
