package client

import (
	"context"

	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/kerr"
)

// ReassignPartition asks any broker to record replicas as the target replica
// set of topic's partition (the partition's leader then moves its Raft
// voters there; progress is in Metadata). Retrying is safe: the same target
// again changes nothing. A refusal (unknown or dead broker, duplicate id,
// fewer replicas than min.insync.replicas, another reassignment in
// progress) is returned as its *kerr.Error.
func (c *Client) ReassignPartition(ctx context.Context, topic string, partition int32, replicas []int32) error {
	return c.ReassignPartitionThrottled(ctx, topic, partition, replicas, 0)
}

// ReassignPartitionThrottled is ReassignPartition with the joining replicas'
// catch-up traffic limited to throttle bytes per second until each is
// promoted to voter (0: unthrottled; negative is INVALID_REQUEST). Asked
// again with the same target, it changes the throttle.
func (c *Client) ReassignPartitionThrottled(ctx context.Context, topic string, partition int32, replicas []int32, throttle int64) error {
	req := &tapesv1.ReassignPartitionRequest{Topic: topic, Partition: partition, Replicas: replicas, ThrottleBytesPerSec: throttle}
	var resp *tapesv1.ReassignPartitionResponse
	err := c.anyBroker(ctx, "reassign partition", func(ctx context.Context, bc tapesv1.BrokerServiceClient) (err error) {
		resp, err = bc.ReassignPartition(ctx, req)
		return err
	})
	if err != nil {
		return err
	}
	return kerr.FromDetail(resp.GetError())
}

// UnregisterBroker asks any broker to unregister broker id, which must host
// no replica (refused otherwise, naming a partition). Retrying is safe.
func (c *Client) UnregisterBroker(ctx context.Context, id int32) error {
	var resp *tapesv1.UnregisterBrokerResponse
	err := c.anyBroker(ctx, "unregister broker", func(ctx context.Context, bc tapesv1.BrokerServiceClient) (err error) {
		resp, err = bc.UnregisterBroker(ctx, &tapesv1.UnregisterBrokerRequest{BrokerId: id})
		return err
	})
	if err != nil {
		return err
	}
	return kerr.FromDetail(resp.GetError())
}
