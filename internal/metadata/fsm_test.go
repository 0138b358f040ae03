package metadata

import (
	"bytes"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/tapes-dev/tapes/internal/kerr"
)

func apply(t *testing.T, f *FSM, c *Command) *Result {
	t.Helper()
	return f.Apply(&raft.Log{Data: c.Encode()}).(*Result)
}

// restored returns a fresh FSM restored from a snapshot of f (what a
// broker that joins or restarts after compaction gets).
func restored(t *testing.T, f *FSM) *FSM {
	t.Helper()
	snap, _ := f.Snapshot()
	sink := &memSink{}
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
	g := NewFSM()
	if err := g.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
		t.Fatal(err)
	}
	return g
}

func TestCreateUpdateDeleteTopic(t *testing.T) {
	f := NewFSM()
	for id := BrokerID(1); id <= 3; id++ {
		apply(t, f, &Command{Op: OpRegisterBroker, Broker: &Broker{ID: id, Address: "127.0.0.1:1"}})
	}
	parts, err := Assign(f.Clone().BrokerIDs(), 3, 3, 0)
	if err != nil {
		t.Fatal(err)
	}
	topic := &Topic{Name: "orders", Configs: map[string]string{ConfigMinInsyncReplicas: "2"}}
	for _, r := range parts {
		topic.Partitions = append(topic.Partitions, PartitionState{Replicas: r})
	}
	res := apply(t, f, &Command{Op: OpCreateTopic, Topic: topic})
	if res.Err() != nil || res.TopicID == 0 {
		t.Fatalf("create: %+v", res)
	}
	if again := apply(t, f, &Command{Op: OpCreateTopic, Topic: topic}); !kerr.Is(again.Err(), kerr.TopicAlreadyExists) {
		t.Fatalf("second create: %v", again.Err())
	}
	id := res.TopicID
	// Leader 2 at epoch 5 reports; then a deposed leader at epoch 4 is ignored.
	apply(t, f, &Command{Op: OpUpdatePartition, Name: "orders", TopicID: id, Partition: 1, Leader: 2, Epoch: 5, ISR: []BrokerID{3, 2}})
	apply(t, f, &Command{Op: OpUpdatePartition, Name: "orders", TopicID: id, Partition: 1, Leader: 3, Epoch: 4, ISR: []BrokerID{3}})
	p := f.Clone().Topics["orders"].Partitions[1]
	if p.Leader != 2 || p.Epoch != 5 || !slices.Equal(p.ISR, []BrokerID{2, 3}) {
		t.Fatalf("partition after reports = %+v, want leader 2 epoch 5 isr [2 3]", p)
	}
	// A report for an older incarnation of the topic is refused.
	if r := apply(t, f, &Command{Op: OpUpdatePartition, Name: "orders", TopicID: id + 7, Partition: 1, Leader: 2, Epoch: 9}); !kerr.Is(r.Err(), kerr.UnknownTopicOrPartition) {
		t.Fatalf("stale topic id: %v", r.Err())
	}
	// Snapshot and restore into a fresh FSM give the same state.
	g := restored(t, f)
	if gp := g.Clone().Topics["orders"].Partitions[1]; gp.Epoch != 5 || g.Clone().NextTopicID != f.Clone().NextTopicID {
		t.Fatalf("restored state differs: %+v", gp)
	}
	if r := apply(t, f, &Command{Op: OpDeleteTopic, Name: "orders"}); r.Err() != nil {
		t.Fatal(r.Err())
	}
	if _, ok := f.Clone().Topics["orders"]; ok {
		t.Fatal("topic still there after delete")
	}
	if r := apply(t, f, &Command{Op: OpDeleteTopic, Name: "orders"}); !kerr.Is(r.Err(), kerr.UnknownTopicOrPartition) {
		t.Fatalf("delete of a missing topic: %v", r.Err())
	}
}

func TestAssignSpreadsReplicasAndLeaders(t *testing.T) {
	parts, err := Assign([]BrokerID{3, 1, 2}, 6, 3, 1)
	if err != nil {
		t.Fatal(err)
	}
	leaders := map[BrokerID]int{}
	for _, r := range parts {
		leaders[r[0]]++
		if len(r) != 3 || r[0] == r[1] || r[1] == r[2] || r[0] == r[2] {
			t.Fatalf("replicas %v are not 3 distinct brokers", r)
		}
	}
	if leaders[1] != 2 || leaders[2] != 2 || leaders[3] != 2 {
		t.Fatalf("preferred leaders not balanced: %v", leaders)
	}
	for _, bad := range []struct {
		p, rf int
		code  kerr.Code
	}{{0, 1, kerr.InvalidPartitions}, {1, 0, kerr.InvalidReplicationFactor}, {1, 4, kerr.InvalidReplicationFactor}} {
		if _, err := Assign([]BrokerID{1, 2, 3}, bad.p, bad.rf, 0); !kerr.Is(err, bad.code) {
			t.Errorf("Assign(p=%d, rf=%d) = %v, want %s", bad.p, bad.rf, err, bad.code)
		}
	}
}

func TestValidation(t *testing.T) {
	for _, name := range []string{"", ".", "..", "a b", "ü", string(make([]byte, 250))} {
		if err := ValidateTopicName(name); !kerr.Is(err, kerr.InvalidTopic) {
			t.Errorf("ValidateTopicName(%q) = %v", name, err)
		}
	}
	if err := ValidateTopicName("orders_v1.2-x"); err != nil {
		t.Errorf("valid name refused: %v", err)
	}
	c, err := ParseTopicConfig(map[string]string{ConfigSegmentBytes: "4096", ConfigRetentionMs: "-1"})
	if err != nil || c.SegmentBytes != 4096 || c.RetentionMs != -1 || c.MinInsyncReplicas != 1 {
		t.Fatalf("ParseTopicConfig = %+v, %v", c, err)
	}
	for _, bad := range []map[string]string{{"colour": "1"}, {ConfigMinInsyncReplicas: "0"}, {ConfigRetentionMs: "soon"}} {
		if _, err := ParseTopicConfig(bad); !kerr.Is(err, kerr.InvalidConfig) {
			t.Errorf("ParseTopicConfig(%v) = %v", bad, err)
		}
	}
}

type memSink struct{ bytes.Buffer }

func (m *memSink) ID() string    { return "mem" }
func (m *memSink) Cancel() error { return nil }
func (m *memSink) Close() error  { return nil }

// threeBrokers returns an FSM with brokers 1..3 registered.
func threeBrokers(t *testing.T) *FSM {
	f := NewFSM()
	for id := BrokerID(1); id <= 3; id++ {
		apply(t, f, &Command{Op: OpRegisterBroker, Broker: &Broker{ID: id, Address: "127.0.0.1:1"}})
	}
	return f
}

func topicOf(t *testing.T, f *FSM, name string, partitions, rf int) *Topic {
	parts, err := Assign(f.Clone().BrokerIDs(), partitions, rf, 0)
	if err != nil {
		t.Fatal(err)
	}
	topic := &Topic{Name: name}
	for _, r := range parts {
		topic.Partitions = append(topic.Partitions, PartitionState{Replicas: r})
	}
	return topic
}

// TestPartitionBudget: a create that would take the cluster or one broker
// over the budget is POLICY_VIOLATION naming the limit and the count, and
// creates nothing; the check runs in log order, so of two creates proposed
// against the same state only the first fits.
func TestPartitionBudget(t *testing.T) {
	f := threeBrokers(t)
	// 10 per broker: the cluster's limit is 30 replicas.
	if r := apply(t, f, &Command{Op: OpCreateTopic, Topic: topicOf(t, f, "a", 6, 3), MaxPartitionsPerBroker: 10}); r.Err() != nil {
		t.Fatal(r.Err())
	}
	// 18 held; 4x3 = 12 more would make 30: fits exactly. Two such creates
	// both passed a check against the same state; the second is refused.
	first := apply(t, f, &Command{Op: OpCreateTopic, Topic: topicOf(t, f, "b", 4, 3), MaxPartitionsPerBroker: 10})
	second := apply(t, f, &Command{Op: OpCreateTopic, Topic: topicOf(t, f, "c", 4, 3), MaxPartitionsPerBroker: 10})
	if first.Err() != nil {
		t.Fatalf("create within the budget: %v", first.Err())
	}
	err := second.Err()
	if !kerr.Is(err, kerr.PolicyViolation) || !strings.Contains(err.Error(), "holds 30 of its limit of 30") {
		t.Fatalf("create over the cluster budget: %v, want POLICY_VIOLATION naming 30 of 30", err)
	}
	if _, ok := f.Clone().Topics["c"]; ok {
		t.Fatal("refused topic was created")
	}
	// Per broker: 3 brokers x 10, but RF 1 topics all on broker 1.
	g := threeBrokers(t)
	one := func(name string, n int) *Topic {
		tp := &Topic{Name: name}
		for range n {
			tp.Partitions = append(tp.Partitions, PartitionState{Replicas: []BrokerID{1}})
		}
		return tp
	}
	apply(t, g, &Command{Op: OpCreateTopic, Topic: one("x", 8), MaxPartitionsPerBroker: 10})
	err = apply(t, g, &Command{Op: OpCreateTopic, Topic: one("y", 3), MaxPartitionsPerBroker: 10}).Err()
	if !kerr.Is(err, kerr.PolicyViolation) || !strings.Contains(err.Error(), "broker 1, which holds 8 of its limit of 10") {
		t.Fatalf("create over broker 1's budget: %v", err)
	}
}

// TestRetriedCommandAppliesOnce: a delete (or create) proposed again under
// the same request id, as a broker does after losing the first answer,
// answers what the first did instead of UNKNOWN_TOPIC_OR_PARTITION.
func TestRetriedCommandAppliesOnce(t *testing.T) {
	f := threeBrokers(t)
	create := &Command{Op: OpCreateTopic, RequestID: "c1", Topic: topicOf(t, f, "t", 3, 3)}
	r1 := apply(t, f, create)
	if r2 := apply(t, f, create); r1.Err() != nil || r2.Err() != nil || r2.TopicID != r1.TopicID {
		t.Fatalf("create, retried: %+v then %+v", r1, r2)
	}
	del := &Command{Op: OpDeleteTopic, RequestID: "d1", Name: "t"}
	if r := apply(t, f, del); r.Err() != nil {
		t.Fatal(r.Err())
	}
	if r := apply(t, f, del); r.Err() != nil {
		t.Fatalf("retried delete: %v, want the first answer (success)", r.Err())
	}
	// A different request deleting the gone topic is told so.
	if r := apply(t, f, &Command{Op: OpDeleteTopic, RequestID: "d2", Name: "t"}); !kerr.Is(r.Err(), kerr.UnknownTopicOrPartition) {
		t.Fatalf("second delete: %v", r.Err())
	}
	// The memory is bounded.
	for i := range MaxRememberedRequests + 10 {
		apply(t, f, &Command{Op: OpAllocProducerID, RequestID: fmt.Sprint("p", i)})
	}
	if s := f.Clone(); len(s.Requests) != MaxRememberedRequests || len(s.RequestOrder) != MaxRememberedRequests {
		t.Fatalf("remembered %d requests (%d in order), want %d", len(s.Requests), len(s.RequestOrder), MaxRememberedRequests)
	}
}

// TestMetricNameCollision: a.b and a_b collide in metric names; the second
// is INVALID_TOPIC_EXCEPTION naming the first.
func TestMetricNameCollision(t *testing.T) {
	f := threeBrokers(t)
	if r := apply(t, f, &Command{Op: OpCreateTopic, Topic: topicOf(t, f, "a.b", 1, 1)}); r.Err() != nil {
		t.Fatal(r.Err())
	}
	err := apply(t, f, &Command{Op: OpCreateTopic, Topic: topicOf(t, f, "a_b", 1, 1)}).Err()
	if !kerr.Is(err, kerr.InvalidTopic) || !strings.Contains(err.Error(), `"a.b"`) {
		t.Fatalf("create a_b beside a.b: %v", err)
	}
	if r := apply(t, f, &Command{Op: OpCreateTopic, Topic: topicOf(t, f, "a-b", 1, 1)}); r.Err() != nil {
		t.Fatalf("a-b does not collide: %v", r.Err())
	}
}

// TestBrokerKafkaAddress: a registration carries the broker's Kafka address
// into the state and its snapshots; a broker registering again with a new
// Kafka address changes the state; a command and a snapshot written before
// the field existed still load, with no Kafka address.
func TestBrokerKafkaAddress(t *testing.T) {
	f := NewFSM()
	apply(t, f, &Command{Op: OpRegisterBroker, Broker: &Broker{ID: 1, Address: "127.0.0.1:1", KafkaAddress: "127.0.0.1:2"}})
	apply(t, f, &Command{Op: OpRegisterBroker, Broker: &Broker{ID: 1, Address: "127.0.0.1:1", KafkaAddress: "127.0.0.1:3"}})
	if got := f.Clone().Brokers[1].KafkaAddress; got != "127.0.0.1:3" {
		t.Fatalf("kafka address after re-registration = %q", got)
	}
	snap, _ := f.Snapshot()
	sink := &memSink{}
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(sink.String(), `"kafka_address":"127.0.0.1:3"`) {
		t.Fatalf("snapshot lacks the kafka address: %s", sink.String())
	}
	g := NewFSM()
	if err := g.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
		t.Fatal(err)
	}
	if got := g.Clone().Brokers[1]; got != (Broker{ID: 1, Address: "127.0.0.1:1", KafkaAddress: "127.0.0.1:3"}) {
		t.Fatalf("restored broker = %+v", got)
	}

	// Old state: a snapshot and a command without kafka_address.
	old := strings.ReplaceAll(sink.String(), `,"kafka_address":"127.0.0.1:3"`, "")
	if old == sink.String() {
		t.Fatalf("test setup: could not drop the field from %s", old)
	}
	h := NewFSM()
	if err := h.Restore(io.NopCloser(strings.NewReader(old))); err != nil {
		t.Fatalf("restore of a snapshot without kafka_address: %v", err)
	}
	if got := h.Clone().Brokers[1]; got != (Broker{ID: 1, Address: "127.0.0.1:1"}) {
		t.Fatalf("broker from an old snapshot = %+v", got)
	}
	cmd := strings.ReplaceAll(string((&Command{Op: OpRegisterBroker, Broker: &Broker{ID: 2, Address: "127.0.0.1:4"}}).Encode()), "kafka_address", "")
	if r := h.Apply(&raft.Log{Data: []byte(cmd)}).(*Result); r.Err() != nil {
		t.Fatalf("old register command: %v", r.Err())
	}
	if got := h.Clone().Brokers[2]; got != (Broker{ID: 2, Address: "127.0.0.1:4"}) {
		t.Fatalf("broker from an old command = %+v", got)
	}
}

// TestRegisterJoiningBroker: a broker joining a running cluster (brokerd
// --join) registers with a new id; its registration again (a retry, a
// restart on the same address) changes nothing; a second broker joining
// with that id at another address is DUPLICATE_BROKER_REGISTRATION, and a
// removed id is refused. The state survives a snapshot/restore (a
// controller failover) with the joined broker, and the restored state
// refuses the same registrations.
func TestRegisterJoiningBroker(t *testing.T) {
	f := NewFSM()
	for id := BrokerID(1); id <= 3; id++ {
		apply(t, f, &Command{Op: OpRegisterBroker, Broker: &Broker{ID: id, Address: fmt.Sprintf("127.0.0.1:%d", id)}})
	}
	joined := Broker{ID: 4, Address: "127.0.0.1:4", KafkaAddress: "127.0.0.1:40"}
	if r := apply(t, f, &Command{Op: OpRegisterBroker, Join: true, Broker: &joined}); r.Err() != nil {
		t.Fatalf("join broker 4: %v", r.Err())
	}
	if r := apply(t, f, &Command{Op: OpRegisterBroker, Join: true, Broker: &joined}); r.Err() != nil {
		t.Fatalf("broker 4 joins again at the same address: %v", r.Err())
	}
	if r := apply(t, f, &Command{Op: OpUnregisterBroker, Leader: 3}); r.Err() != nil {
		t.Fatalf("unregister broker 3: %v", r.Err())
	}
	refusals := func(f *FSM, when string) {
		t.Helper()
		for _, c := range []struct {
			b    Broker
			want kerr.Code
			in   string
		}{
			{Broker{ID: 4, Address: "127.0.0.1:99"}, kerr.DuplicateBrokerRegistration, "broker id 4 is already registered at 127.0.0.1:4"},
			{Broker{ID: 1, Address: "127.0.0.1:99"}, kerr.DuplicateBrokerRegistration, "broker id 1"},
			{Broker{ID: 3, Address: "127.0.0.1:3"}, kerr.InvalidRequest, "broker 3 was removed"},
		} {
			r := apply(t, f, &Command{Op: OpRegisterBroker, Join: true, Broker: &c.b})
			if !kerr.Is(r.Err(), c.want) || !strings.Contains(r.ErrorMessage, c.in) {
				t.Errorf("%s: broker %d joins at %s: %v, want %s %q", when, c.b.ID, c.b.Address, r.Err(), c.want, c.in)
			}
		}
		if got := f.Clone().Brokers[4]; got != joined {
			t.Errorf("%s: broker 4 = %+v, want %+v", when, got, joined)
		}
		if got := f.Clone().BrokerIDs(); !slices.Equal(got, []BrokerID{1, 2, 4}) {
			t.Errorf("%s: registered brokers %v, want 1,2,4", when, got)
		}
	}
	refusals(f, "before the snapshot")
	g := restored(t, f)
	refusals(g, "after a restore")
	// A broker of the bootstrap --peers (no Join) re-registers at a new
	// address after a restart.
	if r := apply(t, g, &Command{Op: OpRegisterBroker, Broker: &Broker{ID: 1, Address: "127.0.0.1:11"}}); r.Err() != nil || g.Clone().Brokers[1].Address != "127.0.0.1:11" {
		t.Fatalf("broker 1 re-registers at a new address: %v %+v", r.Err(), g.Clone().Brokers[1])
	}
}
