package raftnet

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	raftv1 "github.com/tapes-dev/tapes/internal/gen/tapes/raft/v1"
)

// This file coalesces heartbeats. Idle, hashicorp/raft sends every follower
// of every group a heartbeat each HeartbeatTimeout/10 to 2*HeartbeatTimeout/10;
// with a hundred groups per broker pair that is hundreds of calls a second,
// and the fixed cost of a gRPC call (HTTP/2 frames, a stream, a handler
// goroutine, syscalls on both sides) dominated the idle CPU of a broker.
// Heartbeats to one peer are therefore queued in the peer connection's
// hbBatcher and carried by one Heartbeat RPC; the peer answers each one
// through its group's heartbeat fast path, concurrently, and returns the
// answers in order.

const (
	// maxHeartbeatBatch bounds the heartbeats of one Heartbeat RPC (about
	// 40 bytes each); a full queue leaves at once.
	maxHeartbeatBatch = 1024

	// heartbeatStragglerWait bounds how long the receiving side holds the
	// answers of a Heartbeat call back for a heartbeat raft has not answered:
	// one delivered on the consumer channel (raft has not set its
	// heartbeat handler yet, e.g. while it restores a snapshot in NewRaft)
	// or one whose handler blocks (a term change written to disk). Those get
	// HEARTBEAT_ERROR_KIND_NOT_ANSWERED and the caller's raft retries them;
	// the other heartbeats of the call are answered in time. 50 ms is the
	// shortest heartbeat interval of tapes' Raft timing (500 ms / 10), and
	// a tenth of the follower's timeout: a heartbeat that shares a call with
	// a straggler comes back late, never too late.
	heartbeatStragglerWait = 50 * time.Millisecond
)

// errBatcherClosed fails heartbeats queued on a connection that was closed
// because its peer moved; raft retries them on the new one.
var errBatcherClosed = status.Error(codes.Unavailable, "raftnet: connection to peer closed")

// hbCall is one heartbeat waiting in an hbBatcher, and its answer.
type hbCall struct {
	req      *raftv1.AppendEntriesRequest
	deadline time.Time
	// gone is done once the caller stopped waiting for reasons of its own
	// (its Transport closed); such calls are left out of the batch.
	gone <-chan struct{}
	// done receives at most one result (none when the call was left out);
	// buffered, so the batcher never waits for a caller that left.
	done chan hbResult
}

type hbResult struct {
	resp *raftv1.AppendEntriesResponse
	err  error
}

// hbBatcher queues the heartbeats of every group of a Mux to one dial
// target and sends them in Heartbeat RPCs. A heartbeat leaves at the latest
// linger after it was queued: the first heartbeat of a batch starts the
// linger timer, and when it fires everything queued leaves in one call. A
// full batch (maxHeartbeatBatch) leaves at once. With no linger, a
// heartbeat leaves at once when no call is in flight, and otherwise with
// everything queued as soon as that call ends.
//
// Calls are made by the batcher's goroutine (run), whose stack has grown to
// gRPC's depth once and for all; a goroutine started per call spent more on
// growing its stack than on the call. While run is in a call (normally some
// hundred microseconds, but up to the heartbeat timeout when the peer does
// not answer), the next batch is timed by a fallback timer that sends on a
// goroutine of its own if run has not taken the batch over by then, so that
// a peer that does not answer delays no heartbeat beyond linger. Every call
// is bounded by the latest deadline of its heartbeats and fails at once when
// the connection closes.
type hbBatcher struct {
	client raftv1.RaftServiceClient
	linger time.Duration

	// timer wakes run when the batch queued is due; fallback sends it
	// itself (fire) when run is in a call. Both are stopped, never
	// drained: a timer that fires for a batch already gone finds an empty
	// queue, or sends a later one early.
	timer    *time.Timer
	fallback *time.Timer
	stop     chan struct{} // closed by close; run returns

	mu      sync.Mutex
	queue   []*hbCall
	firstAt time.Time // when the first heartbeat of queue came
	armed   hbArm     // which timer is due to send queue
	busy    bool      // run is in a call
	closed  bool
}

// hbArm says which timer, if any, will send the queued batch.
type hbArm uint8

const (
	armNone hbArm = iota
	armRun
	armFallback
)

func newHBBatcher(client raftv1.RaftServiceClient, linger time.Duration) *hbBatcher {
	b := &hbBatcher{
		client: client,
		linger: linger,
		timer:  time.NewTimer(time.Hour),
		stop:   make(chan struct{}),
	}
	b.timer.Stop()
	b.fallback = time.AfterFunc(time.Hour, b.fire)
	b.fallback.Stop()
	go b.run()
	return b
}

// enqueue queues c. It fails only when the batcher is closed.
func (b *hbBatcher) enqueue(c *hbCall) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return errBatcherClosed
	}
	b.queue = append(b.queue, c)
	switch {
	case len(b.queue) >= maxHeartbeatBatch:
		go b.send(b.takeLocked())
	case b.armed != armNone:
	case b.busy && b.linger == 0:
		// run takes the queue when its call ends.
	case b.busy:
		b.firstAt = time.Now()
		b.armed = armFallback
		b.fallback.Reset(b.linger)
	default:
		b.firstAt = time.Now()
		b.armed = armRun
		b.timer.Reset(b.linger)
	}
	return nil
}

// takeLocked removes the queue for sending. b.mu is held.
func (b *hbBatcher) takeLocked() []*hbCall {
	batch := b.queue
	b.queue = nil
	b.armed = armNone
	return batch
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
		for !b.closed && len(b.queue) > 0 {
			batch := b.takeLocked()
			b.busy = true
			b.mu.Unlock()
			b.send(batch)
			b.mu.Lock()
			b.busy = false
			if len(b.queue) == 0 || b.linger == 0 {
				continue // nothing queued, or due now
			}
			// Heartbeats came during the call, timed by the fallback:
			// take them over unless it is firing already.
			if b.armed == armFallback && b.fallback.Stop() {
				b.armed = armRun
				b.timer.Reset(b.linger - time.Since(b.firstAt))
			}
			break
		}
		b.mu.Unlock()
	}
}

// fire is the fallback timer: the batch is due and run is in a call.
func (b *hbBatcher) fire() {
	b.mu.Lock()
	if b.closed || len(b.queue) == 0 {
		b.mu.Unlock()
		return
	}
	batch := b.takeLocked()
	b.mu.Unlock()
	b.send(batch)
}

// send makes one Heartbeat call for batch and answers every heartbeat of it.
func (b *hbBatcher) send(batch []*hbCall) {
	now := time.Now()
	calls := batch[:0:0]
	var deadline time.Time
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
		if c.deadline.After(deadline) {
			deadline = c.deadline
		}
	}
	if len(calls) == 0 {
		return
	}
	req := &raftv1.HeartbeatRequest{Heartbeats: make([]*raftv1.AppendEntriesRequest, len(calls))}
	for i, c := range calls {
		req.Heartbeats[i] = c.req
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	out, err := b.client.Heartbeat(ctx, req, waitForPeer)
	cancel()
	if err == nil && len(out.GetResults()) != len(calls) {
		err = status.Errorf(codes.Internal, "raftnet: %d answers to %d heartbeats", len(out.GetResults()), len(calls))
	}
	for i, c := range calls {
		if err != nil {
			c.done <- hbResult{err: err}
			continue
		}
		c.done <- heartbeatResultFromProto(c.req.GetGroup(), out.GetResults()[i])
	}
}

// close fails the queued heartbeats, stops the timers and ends run; calls in
// flight end with their RPC (the connection is closed next). Idempotent.
func (b *hbBatcher) close() {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return
	}
	b.closed = true
	b.timer.Stop()
	b.fallback.Stop()
	close(b.stop)
	queue := b.takeLocked()
	b.mu.Unlock()
	for _, c := range queue {
		c.done <- hbResult{err: errBatcherClosed}
	}
}

// heartbeat sends a heartbeat through the batcher of target's connection
// and waits for its answer, its deadline (HeartbeatTimeout) or the
// Transport's Close, whichever comes first.
func (t *Transport) heartbeat(target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	pc, err := t.peer(target)
	if err != nil {
		return t.fail("heartbeat", target, err)
	}
	timeout := t.mux.cfg.HeartbeatTimeout
	c := &hbCall{
		req:      appendEntriesRequestToProto(t.name, args),
		deadline: time.Now().Add(timeout),
		gone:     t.ctx.Done(),
		done:     make(chan hbResult, 1),
	}
	if err := pc.hb.enqueue(c); err != nil {
		return t.fail("heartbeat", target, err)
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case r := <-c.done:
		if r.err != nil {
			return t.fail("heartbeat", target, r.err)
		}
		// Written here, on raft's goroutine, never by the batcher: once
		// this call returned, raft reuses resp.
		appendEntriesResponseFromProto(r.resp, resp)
		return nil
	case <-timer.C:
		return t.fail("heartbeat", target, status.Error(codes.DeadlineExceeded, "raftnet: heartbeat timed out"))
	case <-t.ctx.Done():
		return raft.ErrTransportShutdown
	}
}

// heartbeatResultFromProto turns the answer to one heartbeat of a batch into
// what a single AppendEntries call would have returned.
func heartbeatResultFromProto(group string, r *raftv1.HeartbeatResult) hbResult {
	if resp := r.GetResponse(); resp != nil {
		return hbResult{resp: resp}
	}
	e := r.GetError()
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

// Heartbeat answers a batch of heartbeats, each through its group's
// heartbeat handler (or consumer channel when raft has set no handler),
// concurrently (see hbJob). A heartbeat for a group that is not open is
// answered at once; one raft does not answer within heartbeatStragglerWait
// is answered NOT_ANSWERED, so that it does not hold back the others. The
// call as a whole fails only when its context ends first.
func (s *server) Heartbeat(ctx context.Context, in *raftv1.HeartbeatRequest) (*raftv1.HeartbeatResponse, error) {
	items := in.GetHeartbeats()
	out := &raftv1.HeartbeatResponse{Results: make([]*raftv1.HeartbeatResult, len(items))}
	j := &hbJob{
		items:   items,
		groups:  make([]*Transport, len(items)),
		results: make([]*raftv1.HeartbeatResult, len(items)),
		done:    make(chan struct{}),
	}
	for i, hb := range items {
		t := s.mux.lookup(hb.GetGroup())
		if t == nil {
			out.Results[i] = heartbeatError(raftv1.HeartbeatErrorKind_HEARTBEAT_ERROR_KIND_UNKNOWN_GROUP,
				"unknown raft group "+hb.GetGroup())
			continue
		}
		j.groups[i] = t
		j.todo = append(j.todo, i)
	}
	if len(j.todo) == 0 {
		return out, nil
	}
	wait, cancel := context.WithTimeout(ctx, heartbeatStragglerWait)
	defer cancel()
	j.ctx = wait
	j.left.Store(int64(len(j.todo)))
	go j.work()

	stall := time.NewTimer(heartbeatStallWait)
	defer stall.Stop()
	progress := j.left.Load()
wait:
	for {
		select {
		case <-j.done:
			break wait
		case <-stall.C:
			// A worker is stuck in raft's heartbeat handler: another one
			// takes the heartbeats nobody has started on.
			if left := j.left.Load(); left == progress && int(j.next.Load()) < len(j.todo) {
				go j.work()
			} else {
				progress = left
			}
			stall.Reset(heartbeatStallWait)
		case <-wait.Done():
			if err := ctx.Err(); err != nil {
				return nil, status.FromContextError(err).Err()
			}
			break wait
		}
	}
	j.mu.Lock()
	j.sealed = true
	for _, i := range j.todo {
		if r := j.results[i]; r != nil {
			out.Results[i] = r
		} else {
			out.Results[i] = heartbeatError(raftv1.HeartbeatErrorKind_HEARTBEAT_ERROR_KIND_NOT_ANSWERED,
				fmt.Sprintf("raft group %s did not answer the heartbeat within %v", items[i].GetGroup(), heartbeatStragglerWait))
		}
	}
	j.mu.Unlock()
	return out, nil
}

// heartbeatStallWait is how long the worker of a Heartbeat call may take
// over one heartbeat (normally some microseconds) before another worker
// starts on the heartbeats after it.
const heartbeatStallWait = 2 * time.Millisecond

// hbJob is the inbound side of one Heartbeat call. Its heartbeats are
// answered concurrently, but not with a goroutine each: a worker answers
// them in turn through raft's heartbeat handler, which returns within
// microseconds unless it writes a new term to disk; when a worker is stuck
// longer than heartbeatStallWait, the handler starts another on the
// heartbeats nobody has claimed. A heartbeat that must go through the
// consumer channel (raft has set no heartbeat handler) waits on a goroutine
// of its own. A goroutine per heartbeat (one spawn and one wake-up each)
// cost more than raft's handler itself.
type hbJob struct {
	ctx    context.Context // the cut-off
	items  []*raftv1.AppendEntriesRequest
	groups []*Transport // by item; nil for unknown groups
	todo   []int        // items with a group, in order
	next   atomic.Int64 // index into todo of the next item to claim
	left   atomic.Int64 // items of todo not answered yet
	done   chan struct{}

	mu      sync.Mutex
	sealed  bool // the handler has answered; later results are dropped
	results []*raftv1.HeartbeatResult
}

// work claims and answers items until none is left to claim, or the call
// has been answered without them (a worker that was stuck past the
// cut-off does not hand raft heartbeats that are stale by now).
func (j *hbJob) work() {
	for j.ctx.Err() == nil {
		k := int(j.next.Add(1)) - 1
		if k >= len(j.todo) {
			return
		}
		i := j.todo[k]
		t := j.groups[i]
		req := appendEntriesRequestFromProto(j.items[i])
		if t.heartbeatFn.Load() == nil || !isHeartbeat(req) {
			go func() { j.finish(i, t.answerHeartbeat(j.ctx, req)) }()
			continue
		}
		j.finish(i, t.answerHeartbeat(j.ctx, req))
	}
}

func (j *hbJob) finish(i int, r *raftv1.HeartbeatResult) {
	j.mu.Lock()
	if !j.sealed {
		j.results[i] = r
	}
	j.mu.Unlock()
	if j.left.Add(-1) == 0 {
		close(j.done)
	}
}

// answerHeartbeat hands one heartbeat of a batch to raft and returns its
// answer, like deliver: through raft's heartbeat handler, which answers on
// this goroutine (or, shutting down, not at all), or through the consumer
// channel when raft has set no handler. It gives up when ctx (the batch's
// cut-off) ends or the Transport closes.
func (t *Transport) answerHeartbeat(ctx context.Context, req *raft.AppendEntriesRequest) *raftv1.HeartbeatResult {
	respCh := make(chan raft.RPCResponse, 1)
	rpc := raft.RPC{Command: req, RespChan: respCh}
	if fn := t.heartbeatFn.Load(); fn != nil && isHeartbeat(req) {
		(*fn)(rpc)
	} else {
		select {
		case t.consumeCh <- rpc:
		case <-ctx.Done():
			return heartbeatNotAnswered(ctx, t.name)
		case <-t.ctx.Done():
			return heartbeatError(raftv1.HeartbeatErrorKind_HEARTBEAT_ERROR_KIND_UNKNOWN_GROUP, "unknown raft group "+t.name)
		}
	}
	var r raft.RPCResponse
	select {
	case r = <-respCh:
	case <-ctx.Done():
		return heartbeatNotAnswered(ctx, t.name)
	case <-t.ctx.Done():
		return heartbeatError(raftv1.HeartbeatErrorKind_HEARTBEAT_ERROR_KIND_UNKNOWN_GROUP, "unknown raft group "+t.name)
	}
	if r.Error != nil {
		return heartbeatError(raftv1.HeartbeatErrorKind_HEARTBEAT_ERROR_KIND_RAFT, r.Error.Error())
	}
	resp, ok := r.Response.(*raft.AppendEntriesResponse)
	if !ok {
		return heartbeatError(raftv1.HeartbeatErrorKind_HEARTBEAT_ERROR_KIND_RAFT, fmt.Sprintf("raft answered with %T", r.Response))
	}
	return &raftv1.HeartbeatResult{Result: &raftv1.HeartbeatResult_Response{Response: appendEntriesResponseToProto(resp)}}
}

func heartbeatNotAnswered(ctx context.Context, group string) *raftv1.HeartbeatResult {
	msg := "raft group " + group + " did not answer the heartbeat"
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		msg += " in time"
	}
	return heartbeatError(raftv1.HeartbeatErrorKind_HEARTBEAT_ERROR_KIND_NOT_ANSWERED, msg)
}

func heartbeatError(kind raftv1.HeartbeatErrorKind, msg string) *raftv1.HeartbeatResult {
	return &raftv1.HeartbeatResult{Result: &raftv1.HeartbeatResult_Error{Error: &raftv1.HeartbeatError{Kind: kind, Message: msg}}}
}
