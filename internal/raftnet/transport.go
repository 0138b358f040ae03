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
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	raftv1 "github.com/tapes-dev/tapes/internal/gen/tapes/raft/v1"
)

// AppendObserver is told about every AppendEntries that carried log state
// (every one but heartbeats) and got an answer from the peer: the request as
// sent, the peer's response, and when the call started. With resp.Success,
// the peer's log matches the leader's up to
// req.PrevLogEntry + len(req.Entries).
//
// It is called synchronously by the Transport, on the goroutine of
// hashicorp/raft that replicates to that peer, after the RPC returned and
// before raft sees the response. It must be cheap and must not block; it must
// not keep or modify req or resp.
type AppendObserver func(peer raft.ServerID, req *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse, sentAt time.Time)

// Transport is the raft.Transport of one Raft group on a Mux. Outbound RPCs
// go over the Mux's shared connections; inbound RPCs for the group arrive on
// Consumer (or the heartbeat handler). A Transport is used by exactly one
// raft.Raft.
type Transport struct {
	mux   *Mux
	name  string
	local raft.ServerAddress

	// consumeCh is unbuffered: an inbound RPC waits until raft's run
	// goroutine takes it, or until its caller's deadline or Close.
	consumeCh chan raft.RPC

	// heartbeatFn is set by raft (SetHeartbeatHandler) and called on the
	// gRPC handler goroutine for heartbeats, bypassing consumeCh.
	heartbeatFn atomic.Pointer[func(raft.RPC)]
	// observer is set by SetAppendObserver; nil means none.
	observer atomic.Pointer[AppendObserver]

	// ctx is the parent of every outbound call; cancel (Close) makes calls in
	// flight fail at once, and its Done channel releases inbound handlers
	// and snapshot readers. Once done, the Transport is not in mux.groups.
	ctx    context.Context
	cancel context.CancelFunc

	// appends holds, per follower, the term and end of the last
	// AppendEntries (heartbeats aside) sent to it (see appendLingers).
	appendsMu sync.Mutex
	appends   map[raft.ServerAddress]appendMark

	// throttle limits what goes to the peers SetThrottle names; received
	// counts, per peer, the bytes of entries and snapshot data it answered
	// for (under appendsMu).
	throttle throttles
	received map[raft.ServerAddress]uint64
}

// appendMark is the term and end time of an AppendEntries call.
type appendMark struct {
	term uint64
	at   time.Time
}

// appendIdleGap is how long after the previous AppendEntries to a
// follower, in lingers, an AppendEntries without entries must come to be
// taken for raft's idle CommitTimeout round (which comes CommitTimeout to
// twice that after the previous one, 1 s or more in tapes) rather than a
// probe raft sends right after another one.
const appendIdleGap = 5

var (
	_ raft.Transport   = (*Transport)(nil)
	_ raft.WithClose   = (*Transport)(nil)
	_ raft.WithPreVote = (*Transport)(nil)
)

func newTransport(m *Mux, name string) *Transport {
	ctx, cancel := context.WithCancel(context.Background())
	return &Transport{
		mux:       m,
		name:      name,
		local:     raft.ServerAddress(m.cfg.LocalID),
		consumeCh: make(chan raft.RPC),
		ctx:       ctx,
		cancel:    cancel,
		appends:   make(map[raft.ServerAddress]appendMark),
		received:  make(map[raft.ServerAddress]uint64),
	}
}

// SetThrottle limits what the Transport sends to target to bytesPerSec
// (a token bucket holding one second of it, at least one 256 KiB snapshot
// chunk): every AppendEntries that carries entries first waits for its
// encoded size, an InstallSnapshot for each chunk. 0 (or less) removes the
// throttle. Heartbeats and other calls are never throttled. The partition
// leader sets it for a reassignment's joining replicas until their
// promotion. Safe for concurrent use; a new rate applies to the next send.
func (t *Transport) SetThrottle(target raft.ServerAddress, bytesPerSec int64) {
	t.throttle.set(target, bytesPerSec)
}

// Throttle returns target's throttle in bytes per second (0: none).
func (t *Transport) Throttle(target raft.ServerAddress) int64 { return t.throttle.rate(target) }

// BytesReceived returns the bytes of log entries (their data and
// extensions) and of snapshot data target has answered for since the
// Transport opened.
func (t *Transport) BytesReceived(target raft.ServerAddress) uint64 {
	t.appendsMu.Lock()
	defer t.appendsMu.Unlock()
	return t.received[target]
}

// countReceived adds n bytes to target's BytesReceived.
func (t *Transport) countReceived(target raft.ServerAddress, n uint64) {
	t.appendsMu.Lock()
	t.received[target] += n
	t.appendsMu.Unlock()
}

// entryBytes is the data and extensions the entries carry.
func entryBytes(entries []*raft.Log) uint64 {
	var n uint64
	for _, e := range entries {
		n += uint64(len(e.Data) + len(e.Extensions))
	}
	return n
}

// Name returns the Raft group the Transport carries.
func (t *Transport) Name() string { return t.name }

// SetAppendObserver sets (or, with nil, removes) the observer of answered
// AppendEntries. It may be called at any time.
func (t *Transport) SetAppendObserver(fn AppendObserver) {
	if fn == nil {
		t.observer.Store(nil)
		return
	}
	t.observer.Store(&fn)
}

// Consumer implements raft.Transport.
func (t *Transport) Consumer() <-chan raft.RPC { return t.consumeCh }

// LocalAddr implements raft.Transport: the broker id, as the ServerID.
func (t *Transport) LocalAddr() raft.ServerAddress { return t.local }

// AppendEntriesPipeline implements raft.Transport. Pipelining is not
// supported; raft then replicates with one AppendEntries at a time.
func (t *Transport) AppendEntriesPipeline(raft.ServerID, raft.ServerAddress) (raft.AppendPipeline, error) {
	return nil, raft.ErrPipelineReplicationNotSupported
}

// EncodePeer implements raft.Transport. Addresses are broker ids and are
// carried as they are.
func (t *Transport) EncodePeer(_ raft.ServerID, addr raft.ServerAddress) []byte {
	return []byte(addr)
}

// DecodePeer implements raft.Transport.
func (t *Transport) DecodePeer(buf []byte) raft.ServerAddress { return raft.ServerAddress(buf) }

// SetHeartbeatHandler implements raft.Transport. raft calls it once, when it
// starts; cb is then called for each inbound heartbeat on the gRPC handler
// goroutine, so that heartbeats do not queue behind a long AppendEntries.
func (t *Transport) SetHeartbeatHandler(cb func(rpc raft.RPC)) {
	if cb == nil {
		t.heartbeatFn.Store(nil)
		return
	}
	t.heartbeatFn.Store(&cb)
}

// Close implements raft.WithClose. Outbound calls in flight and later ones
// fail with raft.ErrTransportShutdown, inbound calls waiting for raft are
// answered "unknown raft group", and the group leaves the Mux, so that it may
// be opened again. Close never blocks; close the Transport before waiting on
// raft's Shutdown. It is idempotent and always returns nil.
func (t *Transport) Close() error {
	t.cancel()
	t.mux.unregister(t)
	return nil
}

// AppendEntries implements raft.Transport. A heartbeat (see isHeartbeat),
// with the Mux's HeartbeatTimeout as deadline, and an AppendEntries that
// carries no entries, with RPCTimeout, go on the peer's heartbeat stream
// (see hbBatcher): heartbeats and raft's idle CommitTimeout rounds wait
// there for the calls of other groups to the same peer, any other
// AppendEntries without entries leaves at once (see appendLingers). An
// AppendEntries with entries is an RPC of its own with RPCTimeout. Every
// answered request but heartbeats is reported to the AppendObserver, with
// the time raft handed it to the Transport.
func (t *Transport) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	if isHeartbeat(args) {
		return t.viaBatcher("heartbeat", target, args, resp, t.mux.cfg.HeartbeatTimeout, true)
	}
	sentAt := time.Now()
	defer t.appendDone(target, args.Term)
	if len(args.Entries) == 0 {
		linger := t.appendLingers(target, args.Term, sentAt)
		if err := t.viaBatcher("append entries", target, args, resp, t.mux.cfg.RPCTimeout, linger); err != nil {
			return err
		}
		if fn := t.observer.Load(); fn != nil {
			(*fn)(id, args, resp, sentAt)
		}
		return nil
	}
	c, err := t.client(target)
	if err != nil {
		return t.fail("append entries", target, err)
	}
	msg := appendEntriesRequestToProto(t.name, args)
	if b := t.throttle.of(target); b != nil {
		if err := b.wait(t.ctx, proto.Size(msg)); err != nil {
			return t.fail("append entries", target, err)
		}
	}
	ctx, cancel := context.WithTimeout(t.ctx, t.mux.cfg.RPCTimeout)
	defer cancel()
	out, err := c.AppendEntries(ctx, msg, waitForPeer)
	if err != nil {
		return t.fail("append entries", target, err)
	}
	appendEntriesResponseFromProto(out, resp)
	t.countReceived(target, entryBytes(args.Entries))
	if fn := t.observer.Load(); fn != nil {
		(*fn)(id, args, resp, sentAt)
	}
	return nil
}

// appendLingers reports whether an AppendEntries without entries, of term,
// to target may wait on the heartbeat stream for the calls of other groups.
// Only raft's idle CommitTimeout round may: raft replicates to a follower
// one AppendEntries at a time, so whatever follows waits on this one. It
// is taken for that round when the previous AppendEntries to target was of
// the same term and ended appendIdleGap lingers ago or more. A new leader's
// first AppendEntries to a follower (sent before its no-op entry is
// appended), or one sent when raft was woken for entries it had sent
// already, leaves at once.
func (t *Transport) appendLingers(target raft.ServerAddress, term uint64, now time.Time) bool {
	t.appendsMu.Lock()
	last, ok := t.appends[target]
	t.appendsMu.Unlock()
	return ok && last.term == term && now.Sub(last.at) >= appendIdleGap*t.mux.cfg.HeartbeatLinger
}

// appendDone records the end of an AppendEntries of term to target.
func (t *Transport) appendDone(target raft.ServerAddress, term uint64) {
	t.appendsMu.Lock()
	t.appends[target] = appendMark{term: term, at: time.Now()}
	t.appendsMu.Unlock()
}

// RequestVote implements raft.Transport.
func (t *Transport) RequestVote(_ raft.ServerID, target raft.ServerAddress, args *raft.RequestVoteRequest, resp *raft.RequestVoteResponse) error {
	out, err := callUnary(t, "request vote", target, func(ctx context.Context, c raftv1.RaftServiceClient) (*raftv1.RequestVoteResponse, error) {
		return c.RequestVote(ctx, requestVoteRequestToProto(t.name, args))
	})
	if err != nil {
		return err
	}
	requestVoteResponseFromProto(out, resp)
	return nil
}

// RequestPreVote implements raft.WithPreVote, which makes hashicorp/raft
// run a pre-vote round before every election that is not a leadership
// transfer (unless Config.PreVoteDisabled): a candidate raises its term only
// once a majority would vote for it, and a peer that has a leader refuses,
// so a server that was away (paused, cut off) cannot depose a leader the
// others still follow. Like RequestVote it does not wait for a peer that is
// down, and a peer that does not serve the group refuses (ErrUnknownGroup).
// A peer whose RaftService lacks the method (an older broker) answers
// codes.Unimplemented: the error then wraps ErrPreVoteUnsupported, whose
// text raft reads as "peer without pre-vote" and counts as a granted
// pre-vote, so that the real election decides.
func (t *Transport) RequestPreVote(_ raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	out, err := callUnary(t, "request pre-vote", target, func(ctx context.Context, c raftv1.RaftServiceClient) (*raftv1.RequestPreVoteResponse, error) {
		out, err := c.RequestPreVote(ctx, requestPreVoteRequestToProto(t.name, args))
		if status.Code(err) == codes.Unimplemented {
			err = fmt.Errorf("%w: %w", ErrPreVoteUnsupported, err)
		}
		return out, err
	})
	if err != nil {
		return err
	}
	requestPreVoteResponseFromProto(out, resp)
	return nil
}

// TimeoutNow implements raft.Transport.
func (t *Transport) TimeoutNow(_ raft.ServerID, target raft.ServerAddress, args *raft.TimeoutNowRequest, resp *raft.TimeoutNowResponse) error {
	out, err := callUnary(t, "timeout now", target, func(ctx context.Context, c raftv1.RaftServiceClient) (*raftv1.TimeoutNowResponse, error) {
		return c.TimeoutNow(ctx, timeoutNowRequestToProto(t.name, args))
	})
	if err != nil {
		return err
	}
	timeoutNowResponseFromProto(out, resp)
	return nil
}

// callUnary makes call, one of the unary RPCs that do not wait for a peer
// that is down (votes, pre-votes, TimeoutNow), to target with RPCTimeout,
// and wraps its error as t.fail does. It runs on raft's goroutine that
// asked.
func callUnary[Out any](t *Transport, op string, target raft.ServerAddress, call func(context.Context, raftv1.RaftServiceClient) (Out, error)) (Out, error) {
	var zero Out
	c, err := t.client(target)
	if err != nil {
		return zero, t.fail(op, target, err)
	}
	ctx, cancel := context.WithTimeout(t.ctx, t.mux.cfg.RPCTimeout)
	defer cancel()
	out, err := call(ctx, c)
	if err != nil {
		return zero, t.fail(op, target, err)
	}
	return out, nil
}

// InstallSnapshot implements raft.Transport: one client stream whose first
// message carries args and whose next ones carry data in chunks of up to
// 256 KiB, until data is exhausted; to a throttled target (SetThrottle) each
// chunk first waits for its size. The deadline is SnapshotTimeout plus one
// second per MiB of args.Size, and, when target is throttled, the time its
// throttle takes to let args.Size through.
func (t *Transport) InstallSnapshot(_ raft.ServerID, target raft.ServerAddress, args *raft.InstallSnapshotRequest, resp *raft.InstallSnapshotResponse, data io.Reader) error {
	c, err := t.client(target)
	if err != nil {
		return t.fail("install snapshot", target, err)
	}
	deadline := t.mux.snapshotDeadline(args.Size)
	if rate := t.throttle.rate(target); rate > 0 {
		deadline += time.Duration(float64(args.Size) / float64(rate) * float64(time.Second))
	}
	ctx, cancel := context.WithTimeout(t.ctx, deadline)
	defer cancel()
	stream, err := c.InstallSnapshot(ctx, waitForPeer)
	if err != nil {
		return t.fail("install snapshot", target, err)
	}
	err = stream.Send(&raftv1.InstallSnapshotRequest{Meta: installSnapshotMetaToProto(t.name, args)})
	switch {
	case err == nil:
		err = sendSnapshotData(stream, data, args.Size, func(n int) error {
			if err := t.throttle.wait(ctx, target, n); err != nil {
				return err
			}
			t.countReceived(target, uint64(n))
			return nil
		})
	case errors.Is(err, io.EOF):
		// The peer ended the stream already; CloseAndRecv returns why.
		err = nil
	}
	if err != nil {
		return t.fail("install snapshot", target, err)
	}
	out, err := stream.CloseAndRecv()
	if err != nil {
		return t.fail("install snapshot", target, err)
	}
	installSnapshotResponseFromProto(out, resp)
	return nil
}

// sendSnapshotData streams data in chunks, calling before(n) ahead of each
// chunk of n bytes (the throttle's wait; an error ends the stream). A Send
// returning io.EOF means the peer has answered already (it read Size bytes,
// or refused the snapshot): the caller's CloseAndRecv then returns that
// answer.
func sendSnapshotData(stream raftv1.RaftService_InstallSnapshotClient, data io.Reader, size int64, before func(n int) error) error {
	remaining := size
	for {
		// A new buffer per message: gRPC does not promise that a sent
		// message is no longer referenced once Send returns.
		n := int64(snapshotChunkSize)
		if remaining > 0 && remaining < n {
			n = remaining
		}
		buf := make([]byte, n)
		read, rerr := io.ReadFull(data, buf)
		if read > 0 {
			if err := before(read); err != nil {
				return err
			}
			remaining -= int64(read)
			if err := stream.Send(&raftv1.InstallSnapshotRequest{Data: buf[:read]}); err != nil {
				if errors.Is(err, io.EOF) {
					return nil
				}
				return err
			}
		}
		switch {
		case rerr == nil:
		case errors.Is(rerr, io.EOF), errors.Is(rerr, io.ErrUnexpectedEOF):
			return nil
		default:
			return fmt.Errorf("read snapshot: %w", rerr)
		}
	}
}

// client returns the stub for target, or raft.ErrTransportShutdown once the
// Transport is closed.
func (t *Transport) client(target raft.ServerAddress) (raftv1.RaftServiceClient, error) {
	pc, err := t.peer(target)
	if err != nil {
		return nil, err
	}
	return pc.client, nil
}

// peer returns the connection to target, or raft.ErrTransportShutdown once
// the Transport is closed.
func (t *Transport) peer(target raft.ServerAddress) (*peerConn, error) {
	if t.ctx.Err() != nil {
		return nil, raft.ErrTransportShutdown
	}
	return t.mux.peer(target)
}

// fail wraps the error of an outbound call. Once the Transport is closed
// every failure is raft.ErrTransportShutdown, whatever the call saw.
func (t *Transport) fail(op string, target raft.ServerAddress, err error) error {
	if t.ctx.Err() != nil || errors.Is(err, raft.ErrTransportShutdown) {
		return raft.ErrTransportShutdown
	}
	return fmt.Errorf("raftnet: group %s: %s to %s: %w", t.name, op, target, remoteError(err))
}
