package systest

import (
	"context"
	"strings"
	"testing"
	"time"

	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/kerr"
	"github.com/tapes-dev/tapes/internal/testcluster"
)

// TestRetentionDeletesSegments: with small segments and retention.bytes,
// the leader's retention deletes whole segments on every replica; a fetch
// below the new log start is OFFSET_OUT_OF_RANGE carrying the log start, and
// a fetch past the high watermark too.
func TestRetentionDeletesSegments(t *testing.T) {
	e := start(t, 3)
	e.CreateTopic("short", 1, 3, map[string]string{"segment.bytes": "4096", "retention.bytes": "8192"})
	producePadded(t, e, "short", 400)
	var start int64
	e.WaitFor(20*time.Second, "retention to advance the log start on every replica", func() bool {
		pm := e.Partition("short", 0)
		if pm.LogStartOffset <= 0 {
			return false
		}
		start = pm.LogStartOffset
		return e.EveryReplica("short", 0, 0, func(r *tapesv1.ReplicaStatus) bool { return r.LogStartOffset >= start })
	})
	t.Logf("log start advanced to %d of 400", start)
	_, err := e.Client.Fetch(context.Background(), &tapesv1.FetchRequest{Topic: "short", Partition: 0, Offset: 0})
	ke, ok := kerr.As(err)
	if !ok || ke.Code() != kerr.OffsetOutOfRange {
		t.Fatalf("fetch at 0 after retention: %v, want %s", err, kerr.OffsetOutOfRange)
	}
	if ke.Detail.LogStartOffset < start {
		t.Fatalf("OFFSET_OUT_OF_RANGE carries log start %d, want >= %d", ke.Detail.LogStartOffset, start)
	}
	recs := e.ReadAll("short", 0)
	if len(recs) == 0 || recs[0].Offset != e.Partition("short", 0).LogStartOffset || recs[len(recs)-1].Offset != 399 {
		t.Fatalf("read back [%d..%d], want [log start..399]", recs[0].Offset, recs[len(recs)-1].Offset)
	}
	_, err = e.Client.Fetch(context.Background(), &tapesv1.FetchRequest{Topic: "short", Partition: 0, Offset: 401})
	if !kerr.Is(err, kerr.OffsetOutOfRange) {
		t.Fatalf("fetch past the high watermark: %v, want %s", err, kerr.OffsetOutOfRange)
	}
}

// producePadded appends n records of about 100 bytes to partition 0 of
// topic, in batches of 10 with acks=all.
func producePadded(t *testing.T, e *testcluster.Env, topic string, n int) {
	t.Helper()
	for i := 0; i < n; i += 10 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		recs := testcluster.Records("r", i, min(10, n-i))
		for _, r := range recs {
			r.Value = append(r.Value, []byte(strings.Repeat("x", 90))...)
		}
		_, err := e.Client.Produce(ctx, &tapesv1.ProduceRequest{Topic: topic, Partition: 0, Acks: -1, Records: recs})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestRetentionByTime: segments whose newest record is older than
// retention.ms are deleted (never the active one), on every replica.
func TestRetentionByTime(t *testing.T) {
	e := start(t, 3)
	e.CreateTopic("aging", 1, 3, map[string]string{"segment.bytes": "2048", "retention.ms": "1500"})
	e.ProduceN("aging", 0, strings.Repeat("y", 100), 200)
	hw := e.Partition("aging", 0).HighWatermark
	if start := e.Partition("aging", 0).LogStartOffset; start != 0 {
		t.Fatalf("log start %d before retention.ms passed", start)
	}
	e.WaitFor(20*time.Second, "time retention to delete every sealed segment on every replica", func() bool {
		for _, b := range e.Brokers() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			resp, err := e.Client.DescribeReplicas(ctx, b.ID)
			cancel()
			if err != nil || len(resp.Replicas) != 1 {
				return false
			}
			// Only the active segment may remain: its base offset is the new start.
			if r := resp.Replicas[0]; r.LogStartOffset == 0 || r.LogStartOffset >= hw || r.HighWatermark != hw {
				return false
			}
		}
		return true
	})
	recs := e.ReadAll("aging", 0)
	if len(recs) == 0 || recs[len(recs)-1].Offset != hw-1 {
		t.Fatalf("the active segment's records must stay readable: got %d records", len(recs))
	}
}
