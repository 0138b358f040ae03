package systest

import (
	"context"
	"testing"
	"time"

	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
)

// TestListOffsets: earliest, latest (the high watermark) and by timestamp
// (the first record at or after it; -1 past the last).
func TestListOffsets(t *testing.T) {
	e := start(t, 3)
	e.CreateTopic("events", 1, 3, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var recs []*tapesv1.Record
	for i, ts := range []int64{1000, 2000, 3000, 3000, 5000} {
		recs = append(recs, &tapesv1.Record{TimestampMs: ts, Value: []byte{byte('a' + i)}})
	}
	if _, err := e.Client.Produce(ctx, &tapesv1.ProduceRequest{Topic: "events", Partition: 0, Acks: -1, Records: recs}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		ts, want int64
	}{{-2, 0}, {-1, 5}, {0, 0}, {1000, 0}, {1500, 1}, {2500, 2}, {3000, 2}, {4000, 4}, {5000, 4}, {5001, -1}} {
		resp, err := e.Client.ListOffsets(ctx, "events", 0, c.ts)
		if err != nil {
			t.Fatalf("ListOffsets(%d): %v", c.ts, err)
		}
		if resp.Offset != c.want {
			t.Errorf("ListOffsets(%d) = %d, want %d", c.ts, resp.Offset, c.want)
		}
	}
}
