package check

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/tapes-dev/tapes/internal/client"
	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/producer"
)

// ReadTopicTxn reads every partition of topic from the log start to its
// high watermark at the given isolation level (ReadCommitted or
// ReadUncommitted) and writes what it read to a transactional
// history: an isolation line, then one read line per record (its event_id
// header, the input's). A read_committed read waits (up to 2 minutes) for
// the last stable offset to reach the high watermark: the transaction of
// the last processor killed is aborted by its successor's InitProducerId
// or by its timeout. It returns the event_ids read, in order.
func ReadTopicTxn(ctx context.Context, cl *client.Client, topic, isolation, process string, h *TxnHistoryWriter) ([]string, error) {
	level := int32(0)
	if isolation == ReadCommitted {
		level = 1
	}
	if err := h.Write(TxnLine{Type: TxnIsolation, Process: process, Isolation: isolation}); err != nil {
		return nil, err
	}
	n, err := cl.Partitions(ctx, topic)
	if err != nil {
		return nil, err
	}
	var ids []string
	for p := range int32(n) {
		lo, err := cl.ListOffsets(ctx, topic, p, client.EarliestOffset)
		if err != nil {
			return nil, err
		}
		hi, err := cl.ListOffsets(ctx, topic, p, client.LatestOffset)
		if err != nil {
			return nil, err
		}
		deadline := time.Now().Add(2 * time.Minute)
		for off, end := lo.GetOffset(), hi.GetOffset(); off < end; {
			resp, err := cl.Fetch(ctx, &tapesv1.FetchRequest{Topic: topic, Partition: p, Offset: off, MaxBytes: 1 << 20, MaxWaitMs: 200, IsolationLevel: level})
			if err != nil {
				return nil, fmt.Errorf("read %s-%d at %d (%s): %w", topic, p, off, isolation, err)
			}
			for _, r := range resp.GetRecords() {
				if r.GetOffset() < off || r.GetOffset() >= end {
					continue
				}
				id := eventIDOf(r)
				ids = append(ids, id)
				part, o := p, r.GetOffset()
				if err := h.Write(TxnLine{Type: TxnRead, Process: process, Topic: topic, Partition: &part, Offset: &o, EventID: id}); err != nil {
					return nil, err
				}
			}
			next := client.NextOffset(resp, off)
			if next == off {
				if time.Now().After(deadline) {
					return nil, fmt.Errorf("read %s-%d (%s): stuck at %d below the high watermark %d (last stable offset %d) for 2 minutes", topic, p, isolation, off, end, resp.GetLastStableOffset())
				}
				select { // the LSO is below end: an open transaction
				case <-ctx.Done():
					return nil, ctx.Err()
				case <-time.After(100 * time.Millisecond):
				}
				continue
			}
			off = next
		}
	}
	return ids, nil
}

// LSOFollower is a read_committed reader of one partition, from its start,
// that writes a read line per record and an lso line (LSO and high
// watermark) per fetch to a transactional history: the checker's hung-lso
// stretches come from these lines.
type LSOFollower struct {
	lso     atomic.Int64 // the last LSO seen
	stopped chan struct{}
	cancel  context.CancelFunc
	err     atomic.Pointer[error]
	caught  chan struct{} // closed by Finish: return once caught up
}

// FollowLSO starts a follower of topic/partition p, its lines written as
// process to h, from offset 0 (the observer's client: fetch errors, e.g. a
// leader change, are retried for up to 2 minutes). It runs until ctx ends,
// Stop, or Finish sees it caught up.
func FollowLSO(ctx context.Context, cl *client.Client, topic string, p int32, process string, h *TxnHistoryWriter) *LSOFollower {
	ctx, cancel := context.WithCancel(ctx)
	f := &LSOFollower{stopped: make(chan struct{}), cancel: cancel, caught: make(chan struct{})}
	f.lso.Store(-1)
	go func() {
		defer close(f.stopped)
		if err := f.run(ctx, cl, topic, p, process, h); err != nil && ctx.Err() == nil {
			f.err.Store(&err)
		}
	}()
	return f
}

func (f *LSOFollower) run(ctx context.Context, cl *client.Client, topic string, p int32, process string, h *TxnHistoryWriter) error {
	if err := h.Write(TxnLine{Type: TxnIsolation, Process: process, Isolation: ReadCommitted}); err != nil {
		return err
	}
	var off int64
	var failing time.Time
	for {
		resp, err := cl.Fetch(ctx, &tapesv1.FetchRequest{Topic: topic, Partition: p, Offset: off, MaxBytes: 1 << 20, MaxWaitMs: 200, IsolationLevel: 1})
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if failing.IsZero() {
				failing = time.Now()
			} else if time.Since(failing) > 2*time.Minute {
				return fmt.Errorf("read_committed follower of %s-%d at %d: %w", topic, p, off, err)
			}
			time.Sleep(100 * time.Millisecond)
			continue
		}
		failing = time.Time{}
		lso, hw := resp.GetLastStableOffset(), resp.GetHighWatermark()
		if err := h.Write(TxnLine{Type: TxnLSO, Process: process, Topic: topic, Partition: &p, LSO: &lso, HW: &hw, At: time.Now()}); err != nil {
			return err
		}
		for _, r := range resp.GetRecords() {
			if r.GetOffset() < off {
				continue
			}
			o := r.GetOffset()
			if err := h.Write(TxnLine{Type: TxnRead, Process: process, Topic: topic, Partition: &p, Offset: &o, EventID: eventIDOf(r)}); err != nil {
				return err
			}
		}
		off = client.NextOffset(resp, off)
		f.lso.Store(lso)
		select {
		case <-f.caught:
			if off >= hw && lso >= hw {
				return nil
			}
		default:
		}
	}
}

// LSO is the last LSO the follower saw (-1 before its first fetch).
func (f *LSOFollower) LSO() int64 { return f.lso.Load() }

// Err is the follower's error, if it stopped on one.
func (f *LSOFollower) Err() error {
	if p := f.err.Load(); p != nil {
		return *p
	}
	return nil
}

// Finish waits, up to d, until the follower read up to the high watermark
// with nothing open below it, and stops it.
func (f *LSOFollower) Finish(d time.Duration) error {
	close(f.caught)
	select {
	case <-f.stopped:
		return f.Err()
	case <-time.After(d):
		f.Stop()
		return fmt.Errorf("read_committed follower: not caught up within %v (LSO %d)", d, f.lso.Load())
	}
}

// Stop ends the follower (idempotent).
func (f *LSOFollower) Stop() {
	f.cancel()
	<-f.stopped
}

// eventIDOf is a record's event_id header ("-" without one: a read line
// needs one).
func eventIDOf(r *tapesv1.Record) string {
	for _, h := range r.GetHeaders() {
		if h.GetKey() == producer.EventIDHeader {
			return string(h.GetValue())
		}
	}
	return "-"
}
