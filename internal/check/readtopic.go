package check

import (
	"context"
	"fmt"

	"github.com/tapes-dev/tapes/internal/client"
	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/kerr"
	"github.com/tapes-dev/tapes/internal/producer"
)

// readFetchBytes bounds the records of one fetch of ReadTopic.
const readFetchBytes = 1 << 20

// ReadTopic reads every partition of topic from its log start to the high
// watermark it had when its read began (records appended later are left
// out), for Input.Log and Input.LogStart. Should retention move a
// partition's log start during the read, the read goes on from the new log
// start, which logStart then holds.
func ReadTopic(ctx context.Context, cl *client.Client, topic string) (log map[int32][]LogRecord, logStart map[int32]int64, err error) {
	n, err := cl.Partitions(ctx, topic)
	if err != nil {
		return nil, nil, fmt.Errorf("check: read topic: %w", err)
	}
	log, logStart = map[int32][]LogRecord{}, map[int32]int64{}
	for p := range int32(n) {
		recs, start, err := readPartition(ctx, cl, topic, p)
		if err != nil {
			return nil, nil, fmt.Errorf("check: read %s-%d: %w", topic, p, err)
		}
		log[p], logStart[p] = recs, start
	}
	return log, logStart, nil
}

func readPartition(ctx context.Context, cl *client.Client, topic string, p int32) ([]LogRecord, int64, error) {
	lo, err := cl.ListOffsets(ctx, topic, p, client.EarliestOffset)
	if err != nil {
		return nil, 0, err
	}
	hi, err := cl.ListOffsets(ctx, topic, p, client.LatestOffset)
	if err != nil {
		return nil, 0, err
	}
	start, end := lo.GetOffset(), hi.GetOffset()
	recs := []LogRecord{}
	for off := start; off < end; {
		resp, err := cl.Fetch(ctx, &tapesv1.FetchRequest{Topic: topic, Partition: p, Offset: off, MaxBytes: readFetchBytes})
		if ke, ok := kerr.As(err); ok && ke.Code() == kerr.OffsetOutOfRange && off < ke.Detail.GetLogStartOffset() {
			// Retention deleted what was not read yet.
			off = ke.Detail.GetLogStartOffset()
			start = off
			continue
		}
		if err != nil {
			return nil, 0, fmt.Errorf("fetch at offset %d: %w", off, err)
		}
		next := client.NextOffset(resp, off)
		for _, r := range resp.GetRecords() {
			if r.GetOffset() < off || r.GetOffset() >= end {
				continue // a batch may start before off; end is the snapshot
			}
			recs = append(recs, logRecord(r))
		}
		if next == off {
			return nil, 0, fmt.Errorf("fetch at offset %d returned nothing below the high watermark %d", off, end)
		}
		off = next
	}
	return recs, start, nil
}

// logRecord converts a fetched record.
func logRecord(r *tapesv1.Record) LogRecord {
	lr := LogRecord{Offset: r.GetOffset(), Value: string(r.GetValue())}
	if r.Key != nil {
		k := string(r.Key)
		lr.Key = &k
	}
	for _, h := range r.GetHeaders() {
		if h.GetKey() == producer.EventIDHeader {
			lr.EventID = string(h.GetValue())
		}
	}
	return lr
}
