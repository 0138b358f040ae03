package raftnet

import (
	"context"
	"io"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	raftv1 "github.com/tapes-dev/tapes/internal/gen/tapes/raft/v1"
)

// memClient is a RaftServiceClient whose HeartbeatStream runs srv's
// handler in memory, on a goroutine of the caller's: no network, so that
// an hbBatcher can be tested inside a testing/synctest bubble, where time
// is the bubble's fake clock and advances only when every goroutine waits.
// The other RPCs are not implemented (calling them panics).
type memClient struct {
	raftv1.RaftServiceClient
	srv raftv1.RaftServiceServer
}

// memBuffer bounds the messages in flight each way of a memory stream.
const memBuffer = 64

func (c memClient) HeartbeatStream(ctx context.Context, _ ...grpc.CallOption) (raftv1.RaftService_HeartbeatStreamClient, error) {
	ctx, cancel := context.WithCancel(ctx)
	s := &memStream{
		ctx:      ctx,
		cancel:   cancel,
		toServer: make(chan *raftv1.HeartbeatStreamRequest, memBuffer),
		toClient: make(chan *raftv1.HeartbeatStreamResponse, memBuffer),
		closed:   make(chan struct{}),
		finished: make(chan struct{}),
	}
	go func() {
		err := c.srv.HeartbeatStream(memServerStream{s})
		s.err = err
		close(s.finished)
		cancel()
	}()
	return memClientStream{s}, nil
}

// memStream is the state both ends of a memory stream share. As in gRPC,
// the client sees what the handler sent before it returned, then the
// handler's error (io.EOF for nil); a canceled context ends both ends.
type memStream struct {
	ctx      context.Context
	cancel   context.CancelFunc
	toServer chan *raftv1.HeartbeatStreamRequest
	toClient chan *raftv1.HeartbeatStreamResponse
	once     sync.Once
	closed   chan struct{} // CloseSend
	finished chan struct{} // the handler returned; err is set
	err      error
}

type memClientStream struct{ *memStream }

func (s memClientStream) Send(m *raftv1.HeartbeatStreamRequest) error {
	select {
	case <-s.finished:
		return io.EOF
	case <-s.ctx.Done():
		return io.EOF
	default:
	}
	select {
	case s.toServer <- m:
		return nil
	case <-s.finished:
		return io.EOF
	case <-s.ctx.Done():
		return io.EOF
	}
}

func (s memClientStream) Recv() (*raftv1.HeartbeatStreamResponse, error) {
	select {
	case m := <-s.toClient:
		return m, nil
	default:
	}
	select {
	case m := <-s.toClient:
		return m, nil
	case <-s.finished:
		return s.end()
	case <-s.ctx.Done():
		// The handler's return cancels ctx too: its error wins.
		select {
		case <-s.finished:
			return s.end()
		default:
		}
		return nil, status.FromContextError(s.ctx.Err()).Err()
	}
}

// end is what Recv returns once the handler returned: what it sent
// first, then its error.
func (s memClientStream) end() (*raftv1.HeartbeatStreamResponse, error) {
	select {
	case m := <-s.toClient:
		return m, nil
	default:
	}
	if s.err == nil {
		return nil, io.EOF
	}
	return nil, s.err
}

func (s memClientStream) CloseSend() error {
	s.once.Do(func() { close(s.closed) })
	return nil
}

func (s memClientStream) Context() context.Context { return s.ctx }

// The rest of grpc.ClientStream; the batcher uses none of it.
func (memClientStream) Header() (metadata.MD, error) { return nil, nil }
func (memClientStream) Trailer() metadata.MD         { return nil }
func (memClientStream) SendMsg(any) error            { panic("memClientStream.SendMsg") }
func (memClientStream) RecvMsg(any) error            { panic("memClientStream.RecvMsg") }

type memServerStream struct{ *memStream }

func (s memServerStream) Recv() (*raftv1.HeartbeatStreamRequest, error) {
	select {
	case m := <-s.toServer:
		return m, nil
	case <-s.closed:
		return nil, io.EOF
	case <-s.ctx.Done():
		return nil, status.FromContextError(s.ctx.Err()).Err()
	}
}

func (s memServerStream) Send(m *raftv1.HeartbeatStreamResponse) error {
	select {
	case s.toClient <- m:
		return nil
	case <-s.ctx.Done():
		return status.FromContextError(s.ctx.Err()).Err()
	}
}

func (s memServerStream) Context() context.Context { return s.ctx }

// The rest of grpc.ServerStream; the handlers of these tests use none of it.
func (memServerStream) SetHeader(metadata.MD) error  { return nil }
func (memServerStream) SendHeader(metadata.MD) error { return nil }
func (memServerStream) SetTrailer(metadata.MD)       {}
func (memServerStream) SendMsg(any) error            { panic("memServerStream.SendMsg") }
func (memServerStream) RecvMsg(any) error            { panic("memServerStream.RecvMsg") }
