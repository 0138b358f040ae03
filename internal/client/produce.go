package client

import (
	"context"
	"fmt"

	"google.golang.org/grpc"

	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/kerr"
)

// Acks values of ProduceRequest.Acks.
const (
	AcksNone   int32 = 0  // answered once the leader has the batch; no offset
	AcksLeader int32 = 1  // answered once the leader's Raft log holds it
	AcksAll    int32 = -1 // answered once Raft committed and applied it
)

// ParseAcks reads "0", "1", "all" or "-1".
func ParseAcks(s string) (int32, error) {
	switch s {
	case "0":
		return AcksNone, nil
	case "1":
		return AcksLeader, nil
	case "all", "-1":
		return AcksAll, nil
	}
	return 0, fmt.Errorf("acks %q: want 0, 1 or all", s)
}

// ProduceOptions says how Produce retries.
//
// A failed produce either guarantees that nothing was appended
// (NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE, NOT_ENOUGH_REPLICAS,
// UNKNOWN_TOPIC_OR_PARTITION, or no connection could be established to carry
// the request) or leaves the outcome unknown (the attempt timed out, the
// connection broke after the request went out, REQUEST_TIMED_OUT,
// NOT_ENOUGH_REPLICAS_AFTER_APPEND, and the other retriable errors): the
// batch may be in the log. Retrying an unknown outcome duplicates the batch
// unless the producer is idempotent (producer id and sequence set), in which
// case the broker answers the retry as a duplicate.
type ProduceOptions struct {
	// RetryUnknownOutcome retries unknown outcomes too, as Kafka's producer
	// does (at-least-once: a retried batch may be written twice). When
	// false, Produce retries only failures that guarantee nothing was
	// appended and returns the others to the caller as they are (at most
	// once). Produce uses true; ProduceWith takes it from opts.
	RetryUnknownOutcome bool
}

// notAppended are the Kafka errors a leader answers before appending.
var notAppended = map[kerr.Code]bool{
	kerr.NotLeaderOrFollower:     true,
	kerr.LeaderNotAvailable:      true,
	kerr.NotEnoughReplicas:       true,
	kerr.UnknownTopicOrPartition: true,
}

// Produce appends req's batch to its partition through the partition
// leader, retrying retriable errors (unknown outcomes included, Kafka's
// behaviour) until it succeeds or ctx ends. See ProduceOptions.
func (c *Client) Produce(ctx context.Context, req *tapesv1.ProduceRequest) (*tapesv1.ProduceResponse, error) {
	return c.ProduceWith(ctx, req, ProduceOptions{RetryUnknownOutcome: true})
}

// ProduceWith is Produce with an explicit retry policy.
func (c *Client) ProduceWith(ctx context.Context, req *tapesv1.ProduceRequest, opts ProduceOptions) (*tapesv1.ProduceResponse, error) {
	retry := func(err error, sent bool) bool {
		if code := kerr.CodeOf(err); code != "" {
			return code.Retriable() && (opts.RetryUnknownOutcome || notAppended[code])
		}
		if !isTransport(err) {
			return false
		}
		return !sent || opts.RetryUnknownOutcome
	}
	var resp *tapesv1.ProduceResponse
	err := c.leaderCall(ctx, "produce", req.GetTopic(), req.GetPartition(), 0, retry,
		func(ctx context.Context, bc tapesv1.BrokerServiceClient, opts ...grpc.CallOption) (err error) {
			resp, err = bc.Produce(ctx, req, opts...)
			return err
		})
	if err != nil {
		return nil, err
	}
	return resp, nil
}
