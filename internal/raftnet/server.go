package raftnet

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	raftv1 "github.com/tapes-dev/tapes/internal/gen/tapes/raft/v1"
)

// server is the inbound side of a Mux: the RaftService handlers. Each looks
// up the request's group and hands the request to that group's raft, then
// waits for raft's answer, the caller's deadline, or the Transport's Close.
// A request for a group that is not open is answered at once with
// unknownGroupStatus. An error raft answers with is returned as
// codes.Unknown carrying raft's message.
type server struct {
	raftv1.UnimplementedRaftServiceServer
	mux *Mux
}

func (s *server) AppendEntries(ctx context.Context, in *raftv1.AppendEntriesRequest) (*raftv1.AppendEntriesResponse, error) {
	t := s.mux.lookup(in.GetGroup())
	if t == nil {
		return nil, unknownGroupStatus(in.GetGroup())
	}
	req := appendEntriesRequestFromProto(in)
	resp, err := t.deliver(ctx, req, isHeartbeat(req))
	if err != nil {
		return nil, err
	}
	out, ok := resp.(*raft.AppendEntriesResponse)
	if !ok {
		return nil, unexpectedResponse(resp)
	}
	return appendEntriesResponseToProto(out), nil
}

func (s *server) RequestVote(ctx context.Context, in *raftv1.RequestVoteRequest) (*raftv1.RequestVoteResponse, error) {
	return serveUnary(ctx, s, in.GetGroup(), requestVoteRequestFromProto(in), requestVoteResponseToProto)
}

func (s *server) RequestPreVote(ctx context.Context, in *raftv1.RequestPreVoteRequest) (*raftv1.RequestPreVoteResponse, error) {
	return serveUnary(ctx, s, in.GetGroup(), requestPreVoteRequestFromProto(in), requestPreVoteResponseToProto)
}

func (s *server) TimeoutNow(ctx context.Context, in *raftv1.TimeoutNowRequest) (*raftv1.TimeoutNowResponse, error) {
	return serveUnary(ctx, s, in.GetGroup(), timeoutNowRequestFromProto(in), timeoutNowResponseToProto)
}

// serveUnary hands cmd to the raft of group through its consumer channel
// and converts raft's answer, a *Resp, with toProto: the inbound side of
// the RPCs whose answer raft gives on its run goroutine (votes, pre-votes,
// TimeoutNow).
func serveUnary[Resp, Out any](ctx context.Context, s *server, group string, cmd any, toProto func(*Resp) Out) (Out, error) {
	var zero Out
	t := s.mux.lookup(group)
	if t == nil {
		return zero, unknownGroupStatus(group)
	}
	resp, err := t.deliver(ctx, cmd, false)
	if err != nil {
		return zero, err
	}
	out, ok := resp.(*Resp)
	if !ok {
		return zero, unexpectedResponse(resp)
	}
	return toProto(out), nil
}

// InstallSnapshot receives the stream on the handler goroutine, the only one
// that touches it, and passes the data to raft's run goroutine (which reads
// the snapshot while handling the RPC) through a snapshotReader. When the
// handler returns for any reason the reader fails, so raft never waits on a
// stream that is gone.
func (s *server) InstallSnapshot(stream raftv1.RaftService_InstallSnapshotServer) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	meta := first.GetMeta()
	if meta == nil {
		return status.Error(codes.InvalidArgument, "first InstallSnapshot message carries no meta")
	}
	t := s.mux.lookup(meta.GetGroup())
	if t == nil {
		return unknownGroupStatus(meta.GetGroup())
	}
	ctx := stream.Context()
	req := installSnapshotRequestFromProto(meta)

	chunks := make(chan []byte)
	aborted := make(chan struct{})
	defer close(aborted)
	reader := &snapshotReader{
		buf:     first.GetData(),
		chunks:  chunks,
		aborted: aborted,
		closed:  t.ctx.Done(),
	}
	respCh := make(chan raft.RPCResponse, 1)
	rpc := raft.RPC{Command: req, Reader: io.LimitReader(reader, req.Size), RespChan: respCh}
	select {
	case t.consumeCh <- rpc:
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	case <-t.ctx.Done():
		return unknownGroupStatus(t.name)
	}

	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			close(chunks)
			break
		}
		if err != nil {
			return err
		}
		data := msg.GetData()
		if len(data) == 0 {
			continue
		}
		select {
		case chunks <- data:
		case r := <-respCh:
			return finishSnapshot(stream, r)
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		case <-t.ctx.Done():
			return unknownGroupStatus(t.name)
		}
	}
	select {
	case r := <-respCh:
		return finishSnapshot(stream, r)
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	case <-t.ctx.Done():
		return unknownGroupStatus(t.name)
	}
}

func finishSnapshot(stream raftv1.RaftService_InstallSnapshotServer, r raft.RPCResponse) error {
	if r.Error != nil {
		return status.Error(codes.Unknown, r.Error.Error())
	}
	out, ok := r.Response.(*raft.InstallSnapshotResponse)
	if !ok {
		return unexpectedResponse(r.Response)
	}
	return stream.SendAndClose(installSnapshotResponseToProto(out))
}

// deliver hands cmd to raft and waits for its answer. Heartbeats go to the
// heartbeat handler when raft has set one; everything else through
// consumeCh. The response channel is buffered, so raft never blocks on an
// answer nobody waits for any more.
func (t *Transport) deliver(ctx context.Context, cmd any, heartbeat bool) (any, error) {
	respCh := make(chan raft.RPCResponse, 1)
	rpc := raft.RPC{Command: cmd, RespChan: respCh}
	var fast func(raft.RPC)
	if heartbeat {
		if fn := t.heartbeatFn.Load(); fn != nil {
			fast = *fn
		}
	}
	if fast != nil {
		// raft answers on this goroutine, or not at all if it is shutting
		// down; the wait below covers both.
		fast(rpc)
	} else {
		select {
		case t.consumeCh <- rpc:
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		case <-t.ctx.Done():
			return nil, unknownGroupStatus(t.name)
		}
	}
	select {
	case r := <-respCh:
		if r.Error != nil {
			return nil, status.Error(codes.Unknown, r.Error.Error())
		}
		return r.Response, nil
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	case <-t.ctx.Done():
		return nil, unknownGroupStatus(t.name)
	}
}

func unexpectedResponse(resp any) error {
	return status.Error(codes.Internal, fmt.Sprintf("raft answered with %T", resp))
}

// errSnapshotAborted is what raft reads when the InstallSnapshot stream
// ended before the snapshot did.
var errSnapshotAborted = errors.New("raftnet: install snapshot stream aborted")

// snapshotReader is the io.Reader raft's run goroutine reads a snapshot from.
// The handler goroutine feeds it chunks; it never touches the gRPC stream.
type snapshotReader struct {
	buf     []byte          // rest of the current chunk
	chunks  <-chan []byte   // closed by the handler at the end of the stream
	aborted <-chan struct{} // closed when the handler returns
	closed  <-chan struct{} // done when the Transport is closed
}

func (r *snapshotReader) Read(p []byte) (int, error) {
	for len(r.buf) == 0 {
		select {
		case c, ok := <-r.chunks:
			if !ok {
				return 0, io.EOF
			}
			r.buf = c
		case <-r.aborted:
			return 0, errSnapshotAborted
		case <-r.closed:
			return 0, raft.ErrTransportShutdown
		}
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}
