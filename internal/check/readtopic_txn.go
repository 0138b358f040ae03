package check

import (
	"context"
	"fmt"
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
