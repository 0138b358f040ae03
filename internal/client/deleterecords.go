package client

import (
	"context"

	"google.golang.org/grpc"

	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
)

// DeleteRecords moves the log start of topic's partition to offset (-1:
// its high watermark) on every replica, asking the partition's leader, and
// returns the log start afterwards. Retrying is safe: moving the log start
// to the same offset twice changes nothing more (with -1, a retry moves it
// to the high watermark of the retry).
func (c *Client) DeleteRecords(ctx context.Context, topic string, partition int32, offset int64) (int64, error) {
	req := &tapesv1.DeleteRecordsRequest{Topic: topic, Partition: partition, Offset: offset}
	var resp *tapesv1.DeleteRecordsResponse
	err := c.leaderCall(ctx, "delete records", topic, partition, 0, retriable,
		func(ctx context.Context, bc tapesv1.BrokerServiceClient, opts ...grpc.CallOption) (err error) {
			resp, err = bc.DeleteRecords(ctx, req, opts...)
			return err
		})
	if err != nil {
		return 0, err
	}
	return resp.LowWatermark, nil
}
