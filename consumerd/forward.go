package main

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/tapes-dev/tapes/internal/client"
	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/kerr"
	"github.com/tapes-dev/tapes/internal/producer"
)

// copier writes copies of records to another topic; forwarder is the
// real one, tests use their own.
type copier interface {
	// Send hands a copy over; Flush waits until every copy sent is
	// acknowledged (or failed); Sent counts the acknowledged ones.
	Send(ctx context.Context, key, value []byte, headers []*tapesv1.Header) error
	Flush() error
	Sent() int64
	Close(ctx context.Context) error
}

// forwarder writes records to another topic (the dead-letter topic, the
// --mirror-to archive) with an idempotent acks=all producer. The loop's
// goroutine calls Send for each record and Flush before it commits the
// poll's offsets, so that a committed offset never passes a record whose
// copy is not acknowledged: a crash before the flush copies it again
// (at-least-once), never loses it. The topic is created on first use when
// missing. Send and Flush are called from the loop's goroutine only;
// OnBatch runs on the producer's partition goroutines.
type forwarder struct {
	cl    *client.Client
	log   *slog.Logger
	topic string
	// source is the topic the records come from: a missing target gets its
	// replication factor (and, with samePartitions, its partition count).
	source         string
	samePartitions bool

	prod *producer.Producer // nil until the first Send

	mu sync.Mutex
	// pending counts records sent whose outcome is not known yet; failed
	// is the first failure since the last Flush. done is signalled after
	// every outcome.
	pending int
	failed  error
	done    *sync.Cond
	sent    int64 // acknowledged records, for the summary
}

func newForwarder(cl *client.Client, log *slog.Logger, topic, source string, samePartitions bool) *forwarder {
	f := &forwarder{cl: cl, log: log, topic: topic, source: source, samePartitions: samePartitions}
	f.done = sync.NewCond(&f.mu)
	return f
}

// start creates the topic when missing and the producer.
func (f *forwarder) start(ctx context.Context) error {
	md, err := f.cl.Metadata(ctx, []string{f.source}, false)
	if err != nil {
		return fmt.Errorf("metadata of %s: %w", f.source, err)
	}
	partitions, rf := int32(1), int32(1)
	for _, t := range md.GetTopics() {
		if t.GetName() == f.source && len(t.GetPartitions()) > 0 {
			rf = int32(len(t.GetPartitions()[0].GetReplicas()))
			if f.samePartitions {
				partitions = int32(len(t.GetPartitions()))
			}
		}
	}
	err = f.cl.CreateTopics(ctx, []*tapesv1.TopicSpec{{Name: f.topic, Partitions: partitions, ReplicationFactor: max(rf, 1)}}, false)
	switch {
	case err == nil:
		f.log.Info("created topic", "topic", f.topic, "partitions", partitions, "replication_factor", rf)
	case kerr.Is(err, kerr.TopicAlreadyExists):
	default:
		return fmt.Errorf("create topic %s: %w", f.topic, err)
	}
	cfg := producer.DefaultConfig(f.topic)
	cfg.Idempotent, cfg.Logger = true, f.log
	cfg.OnBatch = f.outcome
	var perr error
	// The new topic's partitions may take a moment to get leaders.
	bo := client.NewBackoff(100*time.Millisecond, 2*time.Second)
	for range 50 {
		if f.prod, perr = producer.New(ctx, f.cl, cfg); perr == nil {
			return nil
		}
		if bo.Wait(ctx) != nil {
			break
		}
	}
	return fmt.Errorf("producer to %s: %w", f.topic, perr)
}

// outcome counts a batch's outcome (from a partition goroutine).
func (f *forwarder) outcome(res *producer.Result) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pending -= len(res.Records)
	if res.Err != nil && f.failed == nil {
		f.failed = fmt.Errorf("writing to %s: %w", f.topic, res.Err)
	} else if res.Err == nil {
		f.sent += int64(len(res.Records))
	}
	f.done.Broadcast()
}

// Send hands a copy of the record to the producer; Flush waits for it.
func (f *forwarder) Send(ctx context.Context, key, value []byte, headers []*tapesv1.Header) error {
	if f.prod == nil {
		if err := f.start(ctx); err != nil {
			return err
		}
	}
	f.mu.Lock()
	f.pending++
	f.mu.Unlock()
	if err := f.prod.Send(ctx, &producer.Record{Key: key, Value: value, Headers: headers}); err != nil {
		f.mu.Lock()
		f.pending--
		f.mu.Unlock()
		return fmt.Errorf("writing to %s: %w", f.topic, err)
	}
	return nil
}

// Flush waits until every record sent has its outcome and returns the
// first failure (the producer retried it already). It blocks; the
// producer's delivery timeout bounds the wait.
func (f *forwarder) Flush() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for f.pending > 0 {
		f.done.Wait()
	}
	err := f.failed
	f.failed = nil
	return err
}

// Sent is the number of records acknowledged so far.
func (f *forwarder) Sent() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sent
}

// Close flushes and closes the producer.
func (f *forwarder) Close(ctx context.Context) error {
	if f.prod == nil {
		return nil
	}
	return f.prod.Close(ctx)
}
