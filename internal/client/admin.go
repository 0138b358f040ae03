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
// Like Kafka's admin client it retries until ctx ends: the whole request on
// transport failures (so a retry after a lost answer may report
// TOPIC_ALREADY_EXISTS for a topic the first attempt created), and the
// topics whose result is a retriable error (brokers still registering
// after a start) on their own.
func (c *Client) CreateTopics(ctx context.Context, specs []*tapesv1.TopicSpec, validateOnly bool) error {
	names := make([]string, len(specs))
	for i, s := range specs {
		names[i] = s.GetName()
	}
	err := c.perTopic(ctx, "create topics", "create topic", names, func(ctx context.Context, bc tapesv1.BrokerServiceClient, pending map[string]bool) ([]*tapesv1.TopicResult, error) {
		var send []*tapesv1.TopicSpec
		for _, s := range specs {
			if pending[s.GetName()] {
				send = append(send, s)
			}
		}
		resp, err := bc.CreateTopics(ctx, &tapesv1.CreateTopicsRequest{Topics: send, ValidateOnly: validateOnly})
		return resp.GetResults(), err
	}, func(error) bool { return true })
	c.meta.markStale() // new topics: the next lookup refreshes
	return err
}

// DeleteTopics deletes topics and their data through any broker. Errors and
// retries as for CreateTopics, except that UNKNOWN_TOPIC_OR_PARTITION is an
// answer here, not a reason to retry.
func (c *Client) DeleteTopics(ctx context.Context, names []string) error {
	err := c.perTopic(ctx, "delete topics", "delete topic", names, func(ctx context.Context, bc tapesv1.BrokerServiceClient, pending map[string]bool) ([]*tapesv1.TopicResult, error) {
		var send []string
		for _, n := range names {
			if pending[n] {
				send = append(send, n)
			}
		}
		resp, err := bc.DeleteTopics(ctx, &tapesv1.DeleteTopicsRequest{Names: send})
		return resp.GetResults(), err
	}, func(err error) bool { return !kerr.Is(err, kerr.UnknownTopicOrPartition) })
	c.meta.dropTopics(names)
	return err
}

// perTopic runs a request with one result per topic through anyBroker,
// sending again (after a backoff, within ctx) the topics still pending:
// those whose result is a retriable Kafka error that retry accepts. send
// gets the pending set; the error joins one error per topic that failed
// (its last result), each named with what.
func (c *Client) perTopic(ctx context.Context, op, what string, names []string,
	send func(ctx context.Context, bc tapesv1.BrokerServiceClient, pending map[string]bool) ([]*tapesv1.TopicResult, error),
	retry func(error) bool,
) error {
	pending := map[string]bool{}
	for _, n := range names {
		pending[n] = true
	}
	failed := map[string]error{}
	r := c.newRetry(op)
	for {
		var again []error
		err := c.anyBroker(ctx, op, func(ctx context.Context, bc tapesv1.BrokerServiceClient) error {
			results, err := send(ctx, bc, pending)
			if err != nil {
				return err
			}
			again = again[:0]
			answered := map[string]bool{}
			for _, res := range results {
				name := res.GetName()
				if !pending[name] || answered[name] {
					continue
				}
				answered[name] = true
				rerr := kerr.FromDetail(res.GetError())
				if rerr != nil && retriableKafka(rerr) && retry(rerr) {
					failed[name] = rerr
					again = append(again, fmt.Errorf("%s %q: %w", what, name, rerr))
					continue
				}
				delete(pending, name)
				if rerr != nil {
					failed[name] = rerr
				} else {
					delete(failed, name)
				}
			}
			for name := range pending {
				if !answered[name] {
					delete(pending, name)
					failed[name] = kerr.New(kerr.UnknownServerError, "the broker's answer has no result for topic %q", name)
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		r.attempts++
		if len(again) == 0 {
			break
		}
		if err := r.wait(ctx, errors.Join(again...), nil); err != nil {
			return gaveUp(op, r.attempts, err, errors.Join(again...))
		}
	}
	var errs []error
	for _, n := range names {
		if err, ok := failed[n]; ok {
			errs = append(errs, fmt.Errorf("%s %q: %w", what, n, err))
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
