package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	fkerr "github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tapes-dev/tapes/internal/client"
	"github.com/tapes-dev/tapes/internal/consumer"
	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
)

// kafkaTxnProducer is the --eos transactional producer over the brokers'
// Kafka listeners (franz-go's transactional client, the offsets sent with
// raw AddOffsetsToTxn and TxnOffsetCommit v3 requests carrying the group
// generation and member id). The consumer side (membership, fetching,
// positions) stays on gRPC. It stands in for the gRPC transactional
// producer (client.TransactionalProducer) until that exists.
type kafkaTxnProducer struct {
	cl    *kgo.Client
	tid   string
	pid   int64
	epoch int16
}

// newTxnProducer connects to the brokers' Kafka listeners (from the
// metadata) and runs InitProducerId for tid: a previous incarnation is
// fenced and its open transaction aborted.
func newTxnProducer(ctx context.Context, cl *client.Client, tid string, timeout time.Duration, log *slog.Logger) (txnProducer, error) {
	md, err := cl.Metadata(ctx, nil, false)
	if err != nil {
		return nil, err
	}
	var seeds []string
	for _, b := range md.GetBrokers() {
		if a := b.GetKafkaAddress(); a != "" {
			seeds = append(seeds, a)
		}
	}
	if len(seeds) == 0 {
		return nil, errors.New("no broker advertises a Kafka listener")
	}
	bo := client.NewBackoff(200*time.Millisecond, 5*time.Second)
	for {
		kc, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.TransactionalID(tid), kgo.TransactionTimeout(timeout),
			kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.RequiredAcks(kgo.AllISRAcks()),
			kgo.RetryTimeout(60*time.Second), kgo.ProduceRequestTimeout(10*time.Second), kgo.ClientID(tid))
		if err != nil {
			return nil, err
		}
		pctx, cancel := context.WithTimeout(ctx, time.Minute)
		pid, epoch, err := kc.ProducerID(pctx)
		cancel()
		if err == nil {
			log.Info("transactional producer", "transactional_id", tid, "producer_id", pid, "epoch", epoch, "kafka_bootstrap", fmt.Sprint(seeds))
			return &kafkaTxnProducer{cl: kc, tid: tid, pid: pid, epoch: epoch}, nil
		}
		kc.Close()
		// franz-go keeps a failed initialization: a new client asks again.
		log.Warn("InitProducerId failed; retrying", "transactional_id", tid, "err", err)
		if werr := bo.Wait(ctx); werr != nil {
			return nil, fmt.Errorf("InitProducerId: %w", err)
		}
	}
}
func (p *kafkaTxnProducer) ProducerID() (int64, int16) { return p.pid, p.epoch }

func (p *kafkaTxnProducer) Begin(context.Context) error { return fenced(p.cl.BeginTransaction()) }

func (p *kafkaTxnProducer) Produce(ctx context.Context, topic string, partition int32, key, value []byte, headers []*tapesv1.Header) (int64, error) {
	r := &kgo.Record{Topic: topic, Partition: partition, Key: key, Value: value}
	for _, h := range headers {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: h.Key, Value: h.Value})
	}
	if err := p.cl.ProduceSync(ctx, r).FirstErr(); err != nil {
		return -1, fenced(err)
	}
	return r.Offset, nil
}

func (p *kafkaTxnProducer) SendOffsets(ctx context.Context, group string, generation int32, memberID string, offsets map[consumer.TopicPartition]int64) error {
	add := kmsg.NewPtrAddOffsetsToTxnRequest()
	add.TransactionalID, add.ProducerID, add.ProducerEpoch, add.Group = p.tid, p.pid, p.epoch, group
	aresp, err := add.RequestWith(ctx, p.cl)
	if err == nil {
		err = fkerr.ErrorForCode(aresp.ErrorCode)
	}
	if err != nil {
		return fenced(fmt.Errorf("AddOffsetsToTxn: %w", err))
	}
	req := kmsg.NewPtrTxnOffsetCommitRequest()
	req.TransactionalID, req.Group, req.ProducerID, req.ProducerEpoch = p.tid, group, p.pid, p.epoch
	req.Generation, req.MemberID = generation, memberID
	topics := map[string]*kmsg.TxnOffsetCommitRequestTopic{}
	for tp, off := range offsets {
		t := topics[tp.Topic]
		if t == nil {
			nt := kmsg.NewTxnOffsetCommitRequestTopic()
			nt.Topic = tp.Topic
			t = &nt
			topics[tp.Topic] = t
		}
		pp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
		pp.Partition, pp.Offset, pp.LeaderEpoch = tp.Partition, off, -1
		t.Partitions = append(t.Partitions, pp)
	}
	for _, t := range topics {
		req.Topics = append(req.Topics, *t)
	}
	resp, err := req.RequestWith(ctx, p.cl)
	if err != nil {
		return fmt.Errorf("TxnOffsetCommit: %w", err)
	}
	for _, t := range resp.Topics {
		for _, pp := range t.Partitions {
			if err := fkerr.ErrorForCode(pp.ErrorCode); err != nil {
				return fenced(fmt.Errorf("TxnOffsetCommit %s-%d: %w", t.Topic, pp.Partition, err))
			}
		}
	}
	return nil
}

func (p *kafkaTxnProducer) Commit(ctx context.Context) error {
	return fenced(p.cl.EndTransaction(ctx, kgo.TryCommit))
}

func (p *kafkaTxnProducer) Abort(ctx context.Context) error {
	if err := p.cl.AbortBufferedRecords(ctx); err != nil {
		return err
	}
	return fenced(p.cl.EndTransaction(ctx, kgo.TryAbort))
}

func (p *kafkaTxnProducer) Close() error { p.cl.Close(); return nil }

// fenced wraps franz-go's fencing errors in errFenced.
func fenced(err error) error {
	if err != nil && (errors.Is(err, fkerr.ProducerFenced) || errors.Is(err, fkerr.InvalidProducerEpoch)) {
		return fmt.Errorf("%w: %w", errFenced, err)
	}
	return err
}
