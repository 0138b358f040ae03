package client

import (
	"context"
	"time"

	"google.golang.org/grpc"

	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
)

// Special timestamps of ListOffsets.
const (
	LatestOffset   int64 = -1 // the high watermark
	EarliestOffset int64 = -2 // the log start offset
)

// Fetch reads records from req's partition through its leader, retrying
// retriable errors until it succeeds or ctx ends. The per-attempt deadline
// is RequestTimeout plus req.MaxWaitMs. OFFSET_OUT_OF_RANGE is returned at
// once, with the partition's bounds in its detail.
func (c *Client) Fetch(ctx context.Context, req *tapesv1.FetchRequest) (*tapesv1.FetchResponse, error) {
	var resp *tapesv1.FetchResponse
	wait := time.Duration(max(req.GetMaxWaitMs(), 0)) * time.Millisecond
	err := c.leaderCall(ctx, "fetch", req.GetTopic(), req.GetPartition(), wait, retriable,
		func(ctx context.Context, bc tapesv1.BrokerServiceClient, opts ...grpc.CallOption) (err error) {
			resp, err = bc.Fetch(ctx, req, opts...)
			return err
		})
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// ListOffsets asks a partition's leader for the offset at timestampMs:
// LatestOffset (the high watermark), EarliestOffset (the log start offset),
// or the first offset whose record timestamp is at or after timestampMs.
// It retries like Fetch.
func (c *Client) ListOffsets(ctx context.Context, topic string, partition int32, timestampMs int64) (*tapesv1.ListOffsetsResponse, error) {
	return c.ListOffsetsIsolated(ctx, topic, partition, timestampMs, 0)
}

// ListOffsetsIsolated is ListOffsets at an isolation level (Kafka's
// values, as FetchRequest.isolation_level): with 1 (read_committed)
// LatestOffset is the last stable offset, as Kafka's ListOffsets answers a
// read_committed consumer.
func (c *Client) ListOffsetsIsolated(ctx context.Context, topic string, partition int32, timestampMs int64, isolationLevel int32) (*tapesv1.ListOffsetsResponse, error) {
	req := &tapesv1.ListOffsetsRequest{Topic: topic, Partition: partition, TimestampMs: timestampMs, IsolationLevel: isolationLevel}
	var resp *tapesv1.ListOffsetsResponse
	err := c.leaderCall(ctx, "list offsets", topic, partition, 0, retriable,
		func(ctx context.Context, bc tapesv1.BrokerServiceClient, opts ...grpc.CallOption) (err error) {
			resp, err = bc.ListOffsets(ctx, req, opts...)
			return err
		})
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// NextOffset is where the fetch after resp, which asked for offset from,
// begins: the broker's next_offset (past the last batch read, control
// records and skipped aborted records included), else after the last
// record returned, never before from. Every reader of the log takes its
// next position from here, so a transaction marker (a control record,
// never returned as a record) at the end of a partition does not stop a
// read that goes to the high watermark.
func NextOffset(resp *tapesv1.FetchResponse, from int64) int64 {
	next := max(from, resp.GetNextOffset())
	if rs := resp.GetRecords(); len(rs) > 0 {
		next = max(next, rs[len(rs)-1].GetOffset()+1)
	}
	return next
}
