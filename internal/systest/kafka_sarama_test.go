package systest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

// saramaVersion is the Kafka version sarama is told it talks to: it
// picks its request versions from it, and 3.6's (Produce v9, Fetch v12 at
// most, Metadata, InitProducerId and the group APIs) are all within what
// tapes serves.
var saramaVersion = sarama.V3_6_0_0

// TestKafkaSarama: sarama (IBM/sarama), a second Kafka client written
// independently of franz-go, against the Kafka listeners. An idempotent
// SyncProducer (acks=all, InitProducerId then sequenced batches) writes
// keyed records with headers and timestamps to a 3-partition RF 3 topic;
// a sarama ConsumerGroup member (sticky balance strategy) reads every
// acknowledged record back exactly once, at its acknowledged offset, in
// per-key order, marking and committing each; the group's committed
// offsets are then the partitions' ends.
func TestKafkaSarama(t *testing.T) {
	e := start(t, 3)
	const topic, group = "payments", "sarama-readers"
	e.CreateTopic(topic, 3, 3, map[string]string{"min.insync.replicas": "2"})
	e.WaitSettled(topic, 60*time.Second)

	cfg := sarama.NewConfig()
	cfg.Version = saramaVersion
	cfg.ClientID = "sarama-systest"
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Idempotent = true
	cfg.Producer.Return.Successes = true
	cfg.Producer.Retry.Max = 20
	cfg.Producer.Retry.Backoff = 250 * time.Millisecond
	cfg.Producer.Partitioner = sarama.NewHashPartitioner
	cfg.Net.MaxOpenRequests = 1 // sarama's requirement for idempotence
	cfg.Metadata.Retry.Max = 20
	prod, err := sarama.NewSyncProducer(e.KafkaBootstrap(), cfg)
	if err != nil {
		t.Fatalf("sarama SyncProducer: %v", err)
	}
	defer prod.Close()

	const keys, perKey = 6, 50
	base := time.Now().Add(-time.Hour).UnixMilli()
	var acked []kafkaAck
	for i := range perKey {
		// A batch per round: SendMessages sends the keys' records together.
		var msgs []*sarama.ProducerMessage
		for k := range keys {
			key, value := fmt.Sprintf("key-%d", k), fmt.Sprintf("key-%d-%d", k, i)
			msgs = append(msgs, &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(key), Value: sarama.StringEncoder(value),
				Timestamp: time.UnixMilli(base + int64(i*keys+k)),
				Headers:   []sarama.RecordHeader{{Key: []byte("seq"), Value: []byte(strconv.Itoa(i))}, {Key: []byte("empty"), Value: []byte{}}}})
		}
		if err := prod.SendMessages(msgs); err != nil {
			t.Fatalf("sarama SendMessages round %d: %v", i, err)
		}
		for k, m := range msgs {
			acked = append(acked, kafkaAck{key: fmt.Sprintf("key-%d", k), value: fmt.Sprintf("key-%d-%d", k, i),
				partition: m.Partition, offset: m.Offset, timestamp: m.Timestamp.UnixMilli(), seq: i})
		}
	}
	t.Logf("sarama acknowledged %d records", len(acked))
	// Idempotent batches: the stored batches carry a producer id.
	var withID int
	for p := range int32(3) {
		for _, kb := range storedKafkaBatches(t, e, topic, p, e.Partition(topic, p).LeaderId) {
			if kb.ProducerID >= 0 {
				withID++
			}
		}
	}
	if withID == 0 {
		t.Fatal("no stored batch has a producer id: sarama's producer was not idempotent")
	}

	// Read back by a sarama consumer group member.
	ccfg := sarama.NewConfig()
	ccfg.Version = saramaVersion
	ccfg.ClientID = "sarama-systest-consumer"
	ccfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	ccfg.Consumer.Offsets.AutoCommit.Enable = false
	ccfg.Consumer.Group.Rebalance.GroupStrategies = []sarama.BalanceStrategy{sarama.NewBalanceStrategySticky()}
	ccfg.Consumer.Return.Errors = true
	cg, err := sarama.NewConsumerGroup(e.KafkaBootstrap(), group, ccfg)
	if err != nil {
		t.Fatalf("sarama ConsumerGroup: %v", err)
	}
	defer cg.Close()
	h := &saramaHandler{want: len(acked), done: make(chan struct{})}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	consumed := make(chan error, 1)
	go func() {
		for ctx.Err() == nil {
			if err := cg.Consume(ctx, []string{topic}, h); err != nil && !errors.Is(err, sarama.ErrClosedConsumerGroup) {
				t.Logf("sarama Consume: %v", err)
				time.Sleep(time.Second)
			}
		}
		consumed <- nil
	}()
	go func() {
		for err := range cg.Errors() {
			t.Logf("sarama consumer group: %v", err)
		}
	}()
	select {
	case <-h.done:
	case <-ctx.Done():
		h.mu.Lock()
		per := map[int32]int{}
		for _, r := range h.got {
			per[r.Partition]++
		}
		t.Fatalf("the sarama group read %d of %d records in 90 s (per partition %v)", len(h.got), len(acked), per)
	}
	cancel()
	<-consumed
	h.mu.Lock()
	got := append([]consumedRecord(nil), h.got...)
	h.mu.Unlock()
	checkKafkaAcked(t, "sarama group", acked, got)

	// The sarama member's commits are the group's: at every partition's end.
	_, adm := kafkaAdmin(t, e)
	actx, acancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer acancel()
	ends, err := adm.ListEndOffsets(actx, topic)
	if err != nil {
		t.Fatal(err)
	}
	committed, err := adm.FetchOffsets(actx, group)
	if err != nil {
		t.Fatal(err)
	}
	for p := range int32(3) {
		end, _ := ends.Lookup(topic, p)
		c, ok := committed.Lookup(topic, p)
		if !ok || c.At != end.Offset {
			t.Fatalf("sarama group: partition %d committed at %+v, its end is %d", p, c, end.Offset)
		}
	}
}

// saramaHandler is the sarama group member's loop: each claimed message is
// recorded and marked, and the marks are committed whenever the claim
// has no fetched message waiting; done is closed once want are recorded.
// sarama calls ConsumeClaim from one goroutine per claimed partition.
type saramaHandler struct {
	want int
	done chan struct{}

	mu   sync.Mutex
	got  []consumedRecord // guarded by mu
	once sync.Once
}

func (h *saramaHandler) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (h *saramaHandler) Cleanup(sarama.ConsumerGroupSession) error { return nil }

func (h *saramaHandler) ConsumeClaim(s sarama.ConsumerGroupSession, c sarama.ConsumerGroupClaim) error {
	for m := range c.Messages() {
		r := consumedRecord{Partition: m.Partition, Offset: m.Offset, Value: string(m.Value), Timestamp: m.Timestamp.UnixMilli(), Headers: map[string]string{}}
		if m.Key != nil {
			k := string(m.Key)
			r.Key = &k
		}
		for _, hd := range m.Headers {
			r.Headers[string(hd.Key)] = string(hd.Value)
		}
		h.mu.Lock()
		h.got = append(h.got, r)
		n := len(h.got)
		h.mu.Unlock()
		s.MarkMessage(m, "")
		if len(c.Messages()) == 0 { // the end of what was fetched: commit it
			s.Commit()
		}
		if n >= h.want {
			h.once.Do(func() { close(h.done) })
		}
	}
	return nil
}
