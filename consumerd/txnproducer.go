package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/tapes-dev/tapes/internal/client"
	"github.com/tapes-dev/tapes/internal/consumer"
	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
)

// grpcTxnProducer is the --eos transactional producer: the Go client's
// gRPC transactional API (client.TxnProducer, TransactionService).
type grpcTxnProducer struct{ p *client.TxnProducer }

// newTxnProducer runs InitProducerId for tid (retried by the client until
// ctx ends): a previous incarnation is fenced and its open transaction
// aborted.
func newTxnProducer(ctx context.Context, cl *client.Client, tid string, timeout time.Duration, log *slog.Logger) (txnProducer, error) {
	p, err := cl.NewTransactionalProducer(ctx, tid, timeout)
	if err != nil {
		return nil, fmt.Errorf("InitProducerId: %w", err)
	}
	log.Info("transactional producer", "transactional_id", tid, "producer_id", p.ProducerID, "epoch", p.Epoch)
	return &grpcTxnProducer{p: p}, nil
}

func (g *grpcTxnProducer) ProducerID() (int64, int16) { return g.p.ProducerID, int16(g.p.Epoch) }

func (g *grpcTxnProducer) Begin(context.Context) error { return fenced(g.p.Begin()) }

func (g *grpcTxnProducer) Produce(ctx context.Context, topic string, partition int32, key, value []byte, headers []*tapesv1.Header) (int64, error) {
	resp, err := g.p.Produce(ctx, topic, partition, []*tapesv1.Record{{Key: key, Value: value, Headers: headers}})
	if err != nil {
		return -1, fenced(err)
	}
	return resp.GetBaseOffset(), nil
}

func (g *grpcTxnProducer) SendOffsets(ctx context.Context, group string, generation int32, memberID string, offsets map[consumer.TopicPartition]int64) error {
	var parts []*tapesv1.OffsetCommitPartition
	for tp, off := range offsets {
		parts = append(parts, &tapesv1.OffsetCommitPartition{Topic: tp.Topic, Partition: tp.Partition, Offset: off})
	}
	return fenced(g.p.SendOffsets(ctx, group, generation, memberID, parts))
}

func (g *grpcTxnProducer) Commit(ctx context.Context) error { return fenced(g.p.Commit(ctx)) }

func (g *grpcTxnProducer) Abort(ctx context.Context) error { return fenced(g.p.Abort(ctx)) }

func (g *grpcTxnProducer) Close() error { return nil }

// fenced wraps the client's fencing error in errFenced.
func fenced(err error) error {
	if err != nil && errors.Is(err, client.ErrProducerFenced) {
		return fmt.Errorf("%w: %w", errFenced, err)
	}
	return err
}
