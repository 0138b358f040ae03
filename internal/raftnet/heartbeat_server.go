package raftnet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	raftv1 "github.com/tapes-dev/tapes/internal/gen/tapes/raft/v1"
)

// This file is the inbound side of the heartbeat stream (see heartbeat.go).

// heartbeatAnswerWait is how long the answers to one message wait for the
// calls of that message raft has not answered yet, so that they travel
// together: idle, raft answers every call within microseconds and a
// message gets one message of answers. After it, the answers ready leave,
// and each later one leaves as soon as raft gives it; and if a heartbeat
// handler has not returned (it writes a new term to disk), another worker
// takes the heartbeats nobody has started on.
const heartbeatAnswerWait = 2 * time.Millisecond

// HeartbeatStream serves the heartbeat stream of one peer connection. Each
// message is answered by an hbJob of its own, so that a call raft is slow to
// answer holds back neither the calls after it nor the next messages. The
// stream ends when the peer ends it or its connection breaks; calls still
// unanswered then are dropped (the peer has failed them).
func (s *server) HeartbeatStream(stream raftv1.RaftService_HeartbeatStreamServer) error {
	out := &hbOut{stream: stream, nudge: s.mux.nudge}
	out.idle.L = &out.mu
	defer out.close()
	ctx := stream.Context()
	for {
		in, err := stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		s.answer(ctx, out, in.GetCalls())
	}
}

// hbOut sends the answers of one stream. Whoever posts answers while no
// send is in progress sends them, and then whatever others posted
// meanwhile, in one message; gRPC allows one sender at a time. Before it
// sends, it nudges the Mux's batchers, so that heartbeats waiting to leave
// for this peer (or another) go in the same burst as the answers.
type hbOut struct {
	stream raftv1.RaftService_HeartbeatStreamServer
	nudge  func()

	mu      sync.Mutex
	queue   []*raftv1.HeartbeatAnswer
	sending bool
	closed  bool      // the handler returned, or a send failed
	idle    sync.Cond // on mu: broadcast when sending ends
}

func (o *hbOut) post(answers ...*raftv1.HeartbeatAnswer) {
	o.mu.Lock()
	if o.closed {
		o.mu.Unlock()
		return
	}
	o.queue = append(o.queue, answers...)
	if o.sending {
		o.mu.Unlock()
		return
	}
	o.sending = true
	if o.nudge != nil {
		o.mu.Unlock()
		o.nudge()
		o.mu.Lock()
	}
	for len(o.queue) > 0 && !o.closed {
		msg := &raftv1.HeartbeatStreamResponse{Answers: o.queue}
		o.queue = nil
		o.mu.Unlock()
		err := o.stream.Send(msg)
		o.mu.Lock()
		if err != nil {
			o.closed = true
		}
	}
	o.queue = nil
	o.sending = false
	o.idle.Broadcast()
	o.mu.Unlock()
}

// close drops later answers and waits for a send in progress: gRPC forbids
// sending once the handler has returned.
func (o *hbOut) close() {
	o.mu.Lock()
	o.closed = true
	for o.sending {
		o.idle.Wait()
	}
	o.mu.Unlock()
}

// hbItem is one call of a message, for a group open here.
type hbItem struct {
	id       uint64
	t        *Transport
	req      *raft.AppendEntriesRequest
	deadline time.Time
}

// hbJob answers the calls of one message. Heartbeats of groups whose raft
// has set a heartbeat handler are answered in turn by a worker through that
// handler, which returns within microseconds unless it writes a new term to
// disk: a goroutine per heartbeat (a spawn and a wake-up each) cost more
// than raft's handler itself. When the worker is not done after
// heartbeatAnswerWait, another one starts on the heartbeats nobody has
// claimed. Every other call (an AppendEntries without entries, or a
// heartbeat for a raft that has set no handler yet) goes through raft's
// consumer channel, on a goroutine of its own.
type hbJob struct {
	ctx   context.Context // the stream's
	out   *hbOut
	fast  []hbItem     // answered through the heartbeat handler
	next  atomic.Int64 // index into fast of the next item to claim
	timer *time.Timer  // heartbeatAnswerWait

	mu      sync.Mutex
	left    int  // calls not answered yet
	sealed  bool // the answers ready have been posted; later ones go alone
	answers []*raftv1.HeartbeatAnswer
}

// answer starts answering calls, a message of the stream.
func (s *server) answer(ctx context.Context, out *hbOut, calls []*raftv1.HeartbeatCall) {
	now := time.Now()
	j := &hbJob{ctx: ctx, out: out}
	var slow []hbItem
	for _, c := range calls {
		group := c.GetGroup()
		t := s.mux.lookup(group)
		switch {
		case t == nil:
			j.answers = append(j.answers, heartbeatError(c.GetId(), raftv1.HeartbeatErrorKind_HEARTBEAT_ERROR_KIND_UNKNOWN_GROUP,
				"unknown raft group "+group))
		case c.GetTimeoutMicros() <= 0:
			j.answers = append(j.answers, heartbeatError(c.GetId(), raftv1.HeartbeatErrorKind_HEARTBEAT_ERROR_KIND_NOT_ANSWERED,
				"raft group "+group+": the call's time was up when it arrived"))
		default:
			it := hbItem{
				id:       c.GetId(),
				t:        t,
				req:      requestFromHeartbeatCall(c),
				deadline: now.Add(time.Duration(c.GetTimeoutMicros()) * time.Microsecond),
			}
			if isHeartbeat(it.req) && t.heartbeatFn.Load() != nil {
				j.fast = append(j.fast, it)
			} else {
				slow = append(slow, it)
			}
		}
	}
	j.left = len(j.fast) + len(slow)
	if j.left == 0 {
		out.post(j.answers...)
		return
	}
	j.mu.Lock() // tick may run before the assignment is done otherwise
	j.timer = time.AfterFunc(heartbeatAnswerWait, j.tick)
	j.mu.Unlock()
	for i := range slow {
		go func() { j.finish(slow[i].answer(ctx, false)) }()
	}
	if len(j.fast) > 0 {
		go j.work()
	}
}

// work claims and answers heartbeats until none is left to claim or the
// stream ends.
func (j *hbJob) work() {
	for j.ctx.Err() == nil {
		k := int(j.next.Add(1)) - 1
		if k >= len(j.fast) {
			return
		}
		j.finish(j.fast[k].answer(j.ctx, true))
	}
}

// finish records the answer to one call (nil: the stream ended first); the
// last one posts them all, or, once the job is sealed, each posts its own.
func (j *hbJob) finish(a *raftv1.HeartbeatAnswer) {
	j.mu.Lock()
	j.left--
	if j.sealed {
		j.mu.Unlock()
		if a != nil {
			j.out.post(a)
		}
		return
	}
	if a != nil {
		j.answers = append(j.answers, a)
	}
	if j.left > 0 {
		j.mu.Unlock()
		return
	}
	j.sealed = true
	answers := j.answers
	j.answers = nil
	j.mu.Unlock()
	j.timer.Stop()
	j.out.post(answers...)
}

// tick runs heartbeatAnswerWait after the message came, and again as long
// as heartbeats are left unclaimed: it posts the answers ready, and starts
// another worker when one is stuck in raft's heartbeat handler.
func (j *hbJob) tick() {
	j.mu.Lock()
	var answers []*raftv1.HeartbeatAnswer
	if !j.sealed {
		j.sealed = true
		answers = j.answers
		j.answers = nil
	}
	timer := j.timer
	j.mu.Unlock()
	if len(answers) > 0 {
		j.out.post(answers...)
	}
	if int(j.next.Load()) < len(j.fast) && j.ctx.Err() == nil {
		go j.work()
		timer.Reset(heartbeatAnswerWait)
	}
}

// answer hands the call to raft and returns its answer: through raft's
// heartbeat handler (fast), which answers on this goroutine (or, shutting
// down, not at all), or through the consumer channel. It gives up when the
// call's deadline passes, the Transport closes or the stream ends (ctx).
func (it *hbItem) answer(ctx context.Context, fast bool) *raftv1.HeartbeatAnswer {
	if !time.Now().Before(it.deadline) {
		// Held up behind a stuck handler: raft gets no stale heartbeat.
		return heartbeatNotAnswered(it.id, it.t.name)
	}
	respCh := make(chan raft.RPCResponse, 1)
	rpc := raft.RPC{Command: it.req, RespChan: respCh}
	var r raft.RPCResponse
	fn := it.t.heartbeatFn.Load()
	if fast && fn != nil {
		(*fn)(rpc)
		select {
		case r = <-respCh:
			return answerOf(it.id, r)
		default:
		}
	}
	timer := time.NewTimer(time.Until(it.deadline))
	defer timer.Stop()
	if !fast || fn == nil {
		select {
		case it.t.consumeCh <- rpc:
		case <-timer.C:
			return heartbeatNotAnswered(it.id, it.t.name)
		case <-it.t.ctx.Done():
			return heartbeatError(it.id, raftv1.HeartbeatErrorKind_HEARTBEAT_ERROR_KIND_UNKNOWN_GROUP, "unknown raft group "+it.t.name)
		case <-ctx.Done():
			return nil
		}
	}
	select {
	case r = <-respCh:
		return answerOf(it.id, r)
	case <-timer.C:
		return heartbeatNotAnswered(it.id, it.t.name)
	case <-it.t.ctx.Done():
		return heartbeatError(it.id, raftv1.HeartbeatErrorKind_HEARTBEAT_ERROR_KIND_UNKNOWN_GROUP, "unknown raft group "+it.t.name)
	case <-ctx.Done():
		return nil
	}
}

func answerOf(id uint64, r raft.RPCResponse) *raftv1.HeartbeatAnswer {
	if r.Error != nil {
		return heartbeatError(id, raftv1.HeartbeatErrorKind_HEARTBEAT_ERROR_KIND_RAFT, r.Error.Error())
	}
	resp, ok := r.Response.(*raft.AppendEntriesResponse)
	if !ok {
		return heartbeatError(id, raftv1.HeartbeatErrorKind_HEARTBEAT_ERROR_KIND_RAFT, fmt.Sprintf("raft answered with %T", r.Response))
	}
	return heartbeatAnswerFromResponse(id, resp)
}

func heartbeatNotAnswered(id uint64, group string) *raftv1.HeartbeatAnswer {
	return heartbeatError(id, raftv1.HeartbeatErrorKind_HEARTBEAT_ERROR_KIND_NOT_ANSWERED,
		"raft group "+group+" did not answer in time")
}

func heartbeatError(id uint64, kind raftv1.HeartbeatErrorKind, msg string) *raftv1.HeartbeatAnswer {
	return &raftv1.HeartbeatAnswer{Id: id, Error: &raftv1.HeartbeatError{Kind: kind, Message: msg}}
}
