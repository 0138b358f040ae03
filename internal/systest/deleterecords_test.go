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

// TestDeleteRecords: `cluster topics delete-records` moves a partition's log
// start on every replica (the segments below it are deleted, a fetch below
// it is OFFSET_OUT_OF_RANGE carrying the new start) and the next leader,
// after the leader is SIGKILLed, keeps it. Bad input changes nothing and
// names the Kafka error; -1 deletes up to the high watermark.
func TestDeleteRecords(t *testing.T) {
	e := start(t, 3)
	e.CreateTopic("dr", 1, 3, map[string]string{"segment.bytes": "4096"})
	producePadded(t, e, "dr", 400)
	segments := map[int32]int{}
	for _, b := range e.Brokers() {
		segments[b.ID] = e.SegmentCount(b, "dr", 0)
	}

	out, err := cli(t, e, "", "topics", "delete-records", "dr", "--partition", "0", "--offset", "250")
	if err != nil || out != "partition: dr-0\tlow_watermark: 250\n" {
		t.Fatalf("delete-records --offset 250: %q, %v", out, err)
	}
	logStartsAre := func(want int64) func() bool {
		return func() bool {
			return e.EveryReplica("dr", 0, 0, func(r *tapesv1.ReplicaStatus) bool { return r.LogStartOffset == want })
		}
	}
	e.WaitFor(10*time.Second, "log start 250 on every replica", logStartsAre(250))
	for _, b := range e.Brokers() {
		if n := e.SegmentCount(b, "dr", 0); n >= segments[b.ID] {
			t.Errorf("%s keeps %d segments of dr-0, had %d before", b.Name, n, segments[b.ID])
		}
	}
	_, err = e.Client.Fetch(context.Background(), &tapesv1.FetchRequest{Topic: "dr", Partition: 0, Offset: 249})
	if ke, ok := kerr.As(err); !ok || ke.Code() != kerr.OffsetOutOfRange || ke.Detail.LogStartOffset != 250 {
		t.Fatalf("fetch at 249: %v, want %s with log start 250", err, kerr.OffsetOutOfRange)
	}
	if recs := e.ReadAll("dr", 0); len(recs) != 150 || recs[0].Offset != 250 {
		t.Fatalf("read back %d records from %d, want 150 from 250", len(recs), recs[0].Offset)
	}

	// Bad input: the error's name and value; nothing moves.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := e.Client.FindCoordinator(ctx, "g"); err != nil { // creates __consumer_offsets
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"dr", "--partition", "0", "--offset", "401"}, "OFFSET_OUT_OF_RANGE"},
		{[]string{"dr", "--partition", "1", "--offset", "1"}, "UNKNOWN_TOPIC_OR_PARTITION"},
		{[]string{"ghost", "--partition", "0", "--offset", "1"}, "UNKNOWN_TOPIC_OR_PARTITION"},
		{[]string{"__consumer_offsets", "--partition", "0", "--offset", "1"}, "INVALID_TOPIC_EXCEPTION"},
		{[]string{"dr", "--partition", "0", "--offset", "-2"}, `"-2"`},
		{[]string{"dr", "--offset", "3"}, "--partition is required"},
	} {
		out, err := cli(t, e, "", append([]string{"topics", "delete-records"}, c.args...)...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("delete-records %s: %q, %v; want an error naming %s", strings.Join(c.args, " "), out, err, c.want)
		}
	}
	// Below the log start: nothing to do, the low watermark stays.
	if out, err := cli(t, e, "", "topics", "delete-records", "dr", "--partition", "0", "--offset", "100"); err != nil || out != "partition: dr-0\tlow_watermark: 250\n" {
		t.Fatalf("delete-records below the log start: %q, %v", out, err)
	}

	leader := e.Partition("dr", 0).LeaderId
	if err := e.C.Kill(testcluster.BrokerName(leader)); err != nil {
		t.Fatal(err)
	}
	e.WaitFor(20*time.Second, "a new leader of dr-0", func() bool {
		l := e.Partition("dr", 0).LeaderId
		return l >= 0 && l != leader
	})
	if pm := e.Partition("dr", 0); pm.LogStartOffset != 250 {
		t.Fatalf("log start %d on the new leader %d, want 250", pm.LogStartOffset, pm.LeaderId)
	}
	if out, err := cli(t, e, "", "topics", "delete-records", "dr", "--partition", "0", "--offset", "-1"); err != nil || out != "partition: dr-0\tlow_watermark: 400\n" {
		t.Fatalf("delete-records --offset -1: %q, %v", out, err)
	}
	e.WaitFor(10*time.Second, "log start 400 on the surviving replicas", logStartsAre(400))
}
