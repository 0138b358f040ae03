package producer

import (
	"context"
	"sync"
	"time"

	"google.golang.org/grpc"
	grpcstats "google.golang.org/grpc/stats"
)

// Requests of one partition leave in the order they were started: an
// attempt calls Produce only once the previous attempt of its partition has
// handed its request to the connection (or gave up, or maxGateWait
// passed). Without it, the attempts' goroutines race, and an idempotent
// producer's pipelined batches would reach the leader out of sequence and
// be refused as OUT_OF_ORDER_SEQUENCE_NUMBER (then resent). The signal
// comes from a gRPC stats handler: give the client DialOptions().

// maxGateWait bounds the wait for the previous request (a client without
// the stats handler waits this long per request).
const maxGateWait = 2 * time.Millisecond

// DialOptions are the client options the producer wants: a stats handler
// that tells when a request was handed to its connection. Pass them in
// client.Config.DialOptions.
func DialOptions() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithStatsHandler(sentHandler{})}
}

// sentSignal is closed once its request was handed to the connection.
type sentSignal struct {
	once sync.Once
	ch   chan struct{}
}

func newSentSignal() *sentSignal { return &sentSignal{ch: make(chan struct{})} }

func (s *sentSignal) fire() { s.once.Do(func() { close(s.ch) }) }

// wait waits for s (nil: nothing to wait for), at most maxGateWait.
func (s *sentSignal) wait(ctx context.Context) {
	if s == nil {
		return
	}
	select {
	case <-s.ch:
		return
	default:
	}
	t := time.NewTimer(maxGateWait)
	defer t.Stop()
	select {
	case <-s.ch:
	case <-t.C:
	case <-ctx.Done():
	}
}

type sentKey struct{}

type sentHandler struct{}

func (sentHandler) TagRPC(ctx context.Context, _ *grpcstats.RPCTagInfo) context.Context { return ctx }

func (sentHandler) HandleRPC(ctx context.Context, s grpcstats.RPCStats) {
	switch s.(type) {
	case *grpcstats.OutPayload, *grpcstats.End:
		if sig, ok := ctx.Value(sentKey{}).(*sentSignal); ok {
			sig.fire()
		}
	}
}

func (sentHandler) TagConn(ctx context.Context, _ *grpcstats.ConnTagInfo) context.Context { return ctx }

func (sentHandler) HandleConn(context.Context, grpcstats.ConnStats) {}
