package producer

import (
	"context"
	"errors"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/kerr"
)

// attemptResult is the end of one Produce request.
type attemptResult struct {
	b    *batch
	resp *tapesv1.ProduceResponse
	err  error
	// behind: an earlier batch of the partition was in flight when this
	// one was sent (idempotent producer).
	behind bool
	// notSent: the request never reached a broker (no leader known, no
	// connection): nothing can have been appended.
	notSent bool
	// via is the hinted leader the request went to, -1 when it followed the
	// metadata.
	via int32
}

// attempt sends one request for b to the partition's leader (the hinted one
// when via >= 0) and hands the result to the partition goroutine. The
// client's own retry loop is not used: the partition decides about retries,
// so that it can count them and keep sequence order.
func (pt *partition) attempt(b *batch, req *tapesv1.ProduceRequest, behind bool, via int32, prev, sent *sentSignal) {
	p := pt.p
	r := &attemptResult{b: b, behind: behind, via: via}
	defer sent.fire()
	ctx, cancel := context.WithTimeout(p.runCtx, p.cfg.RequestTimeout)
	defer cancel()
	leader := via
	var err error
	if leader < 0 {
		leader, _, err = p.cl.Leader(ctx, p.topic, pt.id)
	}
	var bc tapesv1.BrokerServiceClient
	if err == nil {
		bc, err = p.cl.Broker(ctx, leader)
	}
	if err != nil {
		r.err, r.notSent = err, true
	} else {
		var pr peer.Peer
		prev.wait(ctx)
		r.resp, err = bc.Produce(context.WithValue(ctx, sentKey{}, sent), req, grpc.Peer(&pr))
		if err != nil {
			r.err = kerr.FromStatus(err)
			// A stream existed only if the call got as far as a connection.
			r.notSent = pr.Addr == nil && kerr.CodeOf(r.err) == ""
		}
	}
	pt.results <- r
}

// notAppended are the Kafka errors a broker answers when it appended
// nothing (the batch was refused before, or by, the partition's state
// machine).
var notAppended = map[kerr.Code]bool{
	kerr.NotLeaderOrFollower:      true,
	kerr.LeaderNotAvailable:       true,
	kerr.NotEnoughReplicas:        true,
	kerr.UnknownTopicOrPartition:  true,
	kerr.OutOfOrderSequenceNumber: true,
	kerr.InvalidProducerEpoch:     true,
	kerr.UnknownProducerID:        true,
	kerr.RecordTooLarge:           true,
	kerr.InvalidRequiredAcks:      true,
	kerr.InvalidRequest:           true,
	kerr.InvalidTopic:             true,
	kerr.CorruptMessage:           true,
}

// classify names an attempt's error and says whether Kafka's producer
// would retry it: a retriable Kafka error, or a transport failure.
func classify(err error) (name string, retriable bool) {
	if code := kerr.CodeOf(err); code != "" {
		return string(code), code.Retriable()
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded) || status.Code(err) == codes.DeadlineExceeded:
		return ErrNameTimeout, true
	case status.Code(err) == codes.Unavailable:
		return ErrNameNetwork, true
	case errors.Is(err, context.Canceled) || status.Code(err) == codes.Canceled:
		return ErrNameClosed, false
	}
	return ErrNameUnknown, false
}

// leaderMayHaveMoved reports errors after which the metadata is refreshed.
func leaderMayHaveMoved(err error) bool {
	switch kerr.CodeOf(err) {
	case kerr.NotLeaderOrFollower, kerr.LeaderNotAvailable, kerr.UnknownTopicOrPartition, kerr.RequestTimedOut:
		return true
	case "":
		name, retriable := classify(err)
		return retriable && (name == ErrNameNetwork || name == ErrNameTimeout)
	}
	return false
}
