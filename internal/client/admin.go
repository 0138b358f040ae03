package client

import (
	"context"
	"errors"
	"fmt"

	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/kerr"
)

// CreateTopics creates topics through any broker (which forwards to the
// controller). With validateOnly the broker checks the specs and creates
// nothing. The error joins (errors.Join) one *kerr.Error per topic that
// failed, each naming its topic; nil means every topic was created.
//
// Like Kafka's admin client it retries the whole request on transport
// failures, so a retry after a lost answer may report TOPIC_ALREADY_EXISTS
// for a topic the first attempt created.
func (c *Client) CreateTopics(ctx context.Context, specs []*tapesv1.TopicSpec, validateOnly bool) error {
	var resp *tapesv1.CreateTopicsResponse
	err := c.anyBroker(ctx, "create topics", func(ctx context.Context, bc tapesv1.BrokerServiceClient) (err error) {
		resp, err = bc.CreateTopics(ctx, &tapesv1.CreateTopicsRequest{Topics: specs, ValidateOnly: validateOnly})
		return err
	})
	if err != nil {
		return err
	}
	c.meta.markStale() // new topics: the next lookup refreshes
	return joinResults("create topic", resp.GetResults())
}

// DeleteTopics deletes topics and their data through any broker. Errors as
// for CreateTopics.
func (c *Client) DeleteTopics(ctx context.Context, names []string) error {
	var resp *tapesv1.DeleteTopicsResponse
	err := c.anyBroker(ctx, "delete topics", func(ctx context.Context, bc tapesv1.BrokerServiceClient) (err error) {
		resp, err = bc.DeleteTopics(ctx, &tapesv1.DeleteTopicsRequest{Names: names})
		return err
	})
	if err != nil {
		return err
	}
	c.meta.dropTopics(names)
	return joinResults("delete topic", resp.GetResults())
}

// joinResults turns per-topic results into one error.
func joinResults(op string, results []*tapesv1.TopicResult) error {
	var errs []error
	for _, r := range results {
		if err := kerr.FromDetail(r.GetError()); err != nil {
			errs = append(errs, fmt.Errorf("%s %q: %w", op, r.GetName(), err))
		}
	}
	return errors.Join(errs...)
}

// InitProducerId asks any broker for a new producer id (epoch 0), allocated
// by the controller quorum, for an idempotent producer.
func (c *Client) InitProducerId(ctx context.Context) (id int64, epoch int32, err error) {
	var resp *tapesv1.InitProducerIdResponse
	err = c.anyBroker(ctx, "init producer id", func(ctx context.Context, bc tapesv1.BrokerServiceClient) (err error) {
		resp, err = bc.InitProducerId(ctx, &tapesv1.InitProducerIdRequest{})
		return err
	})
	if err != nil {
		return 0, 0, err
	}
	return resp.ProducerId, resp.ProducerEpoch, nil
}
