package systest

import (
	"bytes"
	"context"
	"testing"
	"time"

	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/kerr"
	"github.com/tapes-dev/tapes/internal/testcluster"
)

// TestBadInputChangesNothing: each bad request gets its Kafka error name and
// leaves topics and logs as they were.
func TestBadInputChangesNothing(t *testing.T) {
	e := start(t, 3)
	e.CreateTopic("orders", 2, 3, map[string]string{"max.message.bytes": "2000"})
	e.ProduceN("orders", 0, "ok", 5)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	topicsBefore := topicNames(t, e)
	creates := []struct {
		spec *tapesv1.TopicSpec
		want kerr.Code
	}{
		{&tapesv1.TopicSpec{Name: "bad name!", Partitions: 1, ReplicationFactor: 1}, kerr.InvalidTopic},
		{&tapesv1.TopicSpec{Name: "too-many-copies", Partitions: 1, ReplicationFactor: 4}, kerr.InvalidReplicationFactor},
		{&tapesv1.TopicSpec{Name: "no-partitions", Partitions: 0, ReplicationFactor: 1}, kerr.InvalidPartitions},
		{&tapesv1.TopicSpec{Name: "bad-config", Partitions: 1, ReplicationFactor: 1, Configs: map[string]string{"retention.ms": "soon"}}, kerr.InvalidConfig},
		{&tapesv1.TopicSpec{Name: "orders", Partitions: 1, ReplicationFactor: 1}, kerr.TopicAlreadyExists},
	}
	for _, c := range creates {
		err := e.Client.CreateTopics(ctx, []*tapesv1.TopicSpec{c.spec}, false)
		if !kerr.Is(err, c.want) {
			t.Errorf("create %q: %v, want %s", c.spec.Name, err, c.want)
		}
	}
	if after := topicNames(t, e); !equalStrings(after, topicsBefore) {
		t.Errorf("topics changed by refused creates: %v -> %v", topicsBefore, after)
	}

	hw := e.Partition("orders", 0).HighWatermark
	produces := []struct {
		name string
		req  *tapesv1.ProduceRequest
		want kerr.Code
	}{
		{"unknown topic", &tapesv1.ProduceRequest{Topic: "nope", Partition: 0, Acks: -1, Records: testcluster.Records("x", 0, 1)}, kerr.UnknownTopicOrPartition},
		{"partition out of range", &tapesv1.ProduceRequest{Topic: "orders", Partition: 7, Acks: -1, Records: testcluster.Records("x", 0, 1)}, kerr.UnknownTopicOrPartition},
		{"record over max.message.bytes", &tapesv1.ProduceRequest{Topic: "orders", Partition: 0, Acks: -1, Records: []*tapesv1.Record{{Value: bytes.Repeat([]byte("x"), 3000)}}}, kerr.RecordTooLarge},
		{"acks=2", &tapesv1.ProduceRequest{Topic: "orders", Partition: 0, Acks: 2, Records: testcluster.Records("x", 0, 1)}, kerr.InvalidRequiredAcks},
		{"no records", &tapesv1.ProduceRequest{Topic: "orders", Partition: 0, Acks: -1}, kerr.InvalidRequest},
	}
	for _, p := range produces {
		leader := e.Partition("orders", 0).LeaderId
		bc, err := e.Client.Broker(ctx, leader)
		if err != nil {
			t.Fatal(err)
		}
		_, err = bc.Produce(ctx, p.req)
		if err = kerr.FromStatus(err); !kerr.Is(err, p.want) {
			t.Errorf("%s: %v, want %s", p.name, err, p.want)
		}
	}
	if got := e.Partition("orders", 0).HighWatermark; got != hw {
		t.Errorf("high watermark moved from %d to %d after refused produces", hw, got)
	}
	bc, err := e.Client.Broker(ctx, e.Partition("orders", 0).LeaderId)
	if err != nil {
		t.Fatal(err)
	}
	_, err = bc.Fetch(ctx, &tapesv1.FetchRequest{Topic: "nope", Partition: 0})
	if err = kerr.FromStatus(err); !kerr.Is(err, kerr.UnknownTopicOrPartition) {
		t.Errorf("fetch from an unknown topic: %v", err)
	}
}

func topicNames(t *testing.T, e *testcluster.Env) []string {
	t.Helper()
	md, err := e.Client.Metadata(context.Background(), nil, false)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, tm := range md.Topics {
		out = append(out, tm.Name)
	}
	return out
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
