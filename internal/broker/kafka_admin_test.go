package broker

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	fkerr "github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tapes-dev/tapes/internal/eventually"
	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/group"
	"github.com/tapes-dev/tapes/internal/kafkawire"
	"github.com/tapes-dev/tapes/internal/kerr"
	"github.com/tapes-dev/tapes/internal/metadata"
)

// TestKafkaTopicSpec: one CreateTopics entry as a TopicSpec: -1 counts take
// the broker's defaults, a replica assignment gives the counts it implies,
// and each malformed entry its Kafka error.
func TestKafkaTopicSpec(t *testing.T) {
	entry := func(parts int32, rf int16, assign ...[]int32) kmsg.CreateTopicsRequestTopic {
		e := kmsg.NewCreateTopicsRequestTopic()
		e.Topic, e.NumPartitions, e.ReplicationFactor = "t", parts, rf
		for p, reps := range assign {
			ra := kmsg.NewCreateTopicsRequestTopicReplicaAssignment()
			ra.Partition, ra.Replicas = int32(p), reps
			e.ReplicaAssignment = append(e.ReplicaAssignment, ra)
		}
		return e
	}
	spec, manual, err := kafkaTopicSpec(entry(-1, -1), 4, 2)
	if err != nil || spec.Partitions != 4 || spec.ReplicationFactor != 2 || manual != nil {
		t.Fatalf("-1/-1: %v %v %v, want the defaults 4/2", spec, manual, err)
	}
	spec, _, err = kafkaTopicSpec(entry(3, 1), 4, 2)
	if err != nil || spec.Partitions != 3 || spec.ReplicationFactor != 1 {
		t.Fatalf("3/1: %v %v", spec, err)
	}
	spec, manual, err = kafkaTopicSpec(entry(-1, -1, []int32{2, 1}, []int32{1, 3}), 4, 2)
	if err != nil || spec.Partitions != 2 || spec.ReplicationFactor != 2 || !slices.Equal(manual[0], []metadata.BrokerID{2, 1}) || !slices.Equal(manual[1], []metadata.BrokerID{1, 3}) {
		t.Fatalf("assignment: %v %v %v", spec, manual, err)
	}
	withConfig := entry(1, 1)
	withConfig.Configs = []kmsg.CreateTopicsRequestTopicConfig{{Name: "retention.ms", Value: kmsg.StringPtr("60000")}}
	if spec, _, err := kafkaTopicSpec(withConfig, 1, 1); err != nil || spec.Configs["retention.ms"] != "60000" {
		t.Fatalf("configs: %v %v", spec, err)
	}

	gapped := entry(-1, -1, []int32{1}, []int32{2})
	gapped.ReplicaAssignment[1].Partition = 5
	twiceAssigned := entry(-1, -1, []int32{1}, []int32{2})
	twiceAssigned.ReplicaAssignment[1].Partition = 0
	nullConfig, twiceConfig := entry(1, 1), entry(1, 1)
	nullConfig.Configs = []kmsg.CreateTopicsRequestTopicConfig{{Name: "retention.ms"}}
	twiceConfig.Configs = []kmsg.CreateTopicsRequestTopicConfig{{Name: "retention.ms", Value: kmsg.StringPtr("1")}, {Name: "retention.ms", Value: kmsg.StringPtr("2")}}
	for _, c := range []struct {
		name  string
		entry kmsg.CreateTopicsRequestTopic
		want  kerr.Code
	}{
		{"assignment with counts", entry(2, -1, []int32{1}), kerr.InvalidRequest},
		{"partitions not 0..n-1", gapped, kerr.InvalidReplicaAssignment},
		{"partition assigned twice", twiceAssigned, kerr.InvalidReplicaAssignment},
		{"no replicas", entry(-1, -1, []int32{}), kerr.InvalidReplicaAssignment},
		{"replica counts differ", entry(-1, -1, []int32{1, 2}, []int32{1}), kerr.InvalidReplicaAssignment},
		{"broker twice", entry(-1, -1, []int32{1, 1}), kerr.InvalidReplicaAssignment},
		{"null config", nullConfig, kerr.InvalidConfig},
		{"config twice", twiceConfig, kerr.InvalidConfig},
	} {
		if _, _, err := kafkaTopicSpec(c.entry, 1, 1); !kerr.Is(err, c.want) {
			t.Errorf("%s: %v, want %s", c.name, err, c.want)
		}
	}
}

// TestTopicConfigEntries: every topic config tapes knows, TOPIC_CONFIG
// with the topic's value (as ParseTopicConfig reads it) where set,
// DEFAULT_CONFIG with the default otherwise; synonyms end with the broker
// config of the same meaning; want selects.
func TestTopicConfigEntries(t *testing.T) {
	got := topicConfigEntries(map[string]string{"retention.ms": " 60000", "min.insync.replicas": "2"}, nil)
	var names []string
	for _, e := range got {
		names = append(names, e.Name)
	}
	if !slices.Equal(names, metadata.TopicConfigKeys()) {
		t.Fatalf("names %v, want %v", names, metadata.TopicConfigKeys())
	}
	want := map[string]struct {
		value string
		src   kmsg.ConfigSource
		syn   []string
	}{
		"max.message.bytes":   {"1048588", kmsg.ConfigSourceDefaultConfig, []string{"message.max.bytes"}},
		"min.insync.replicas": {"2", kmsg.ConfigSourceDynamicTopicConfig, []string{"min.insync.replicas", "min.insync.replicas"}},
		"retention.bytes":     {"-1", kmsg.ConfigSourceDefaultConfig, []string{"log.retention.bytes"}},
		"retention.ms":        {"60000", kmsg.ConfigSourceDynamicTopicConfig, []string{"retention.ms", "log.retention.ms"}},
		"segment.bytes":       {"1073741824", kmsg.ConfigSourceDefaultConfig, []string{"log.segment.bytes"}},
	}
	for _, e := range got {
		w := want[e.Name]
		var syn []string
		for _, s := range e.Synonyms {
			syn = append(syn, s.Name)
		}
		if *e.Value != w.value || e.Source != w.src || !slices.Equal(syn, w.syn) || !e.ReadOnly || e.Doc == "" {
			t.Errorf("%s = %s (source %v, synonyms %v, read-only %v), want %s (%v, %v)", e.Name, *e.Value, e.Source, syn, e.ReadOnly, w.value, w.src, w.syn)
		}
	}
	if got := topicConfigEntries(nil, []string{"retention.ms", "cleanup.policy"}); len(got) != 1 || got[0].Name != "retention.ms" {
		t.Errorf("want retention.ms and an unknown name: %+v", got)
	}
}

// TestValidateConfigTopicDefaults: num.partitions and
// default.replication.factor below 1 (or a factor past int16) are
// ErrTopicDefaults.
func TestValidateConfigTopicDefaults(t *testing.T) {
	for _, edit := range []func(*Config){
		func(c *Config) { c.DefaultPartitions = 0 },
		func(c *Config) { c.DefaultReplicationFactor = -1 },
		func(c *Config) { c.DefaultReplicationFactor = 1 << 15 },
	} {
		c := validConfig(t)
		edit(&c)
		if err := ValidateConfig(&c); !errors.Is(err, ErrTopicDefaults) {
			t.Errorf("partitions %d, replication factor %d: %v, want ErrTopicDefaults", c.DefaultPartitions, c.DefaultReplicationFactor, err)
		}
	}
}

// TestCheckLeaderEpoch: Kafka's fencing of current_leader_epoch.
func TestCheckLeaderEpoch(t *testing.T) {
	for _, c := range []struct {
		current, leader int32
		want            kerr.Code
	}{{-1, 5, ""}, {5, 5, ""}, {4, 5, kerr.FencedLeaderEpoch}, {6, 5, kerr.UnknownLeaderEpoch}} {
		err := checkLeaderEpoch("t", 0, c.current, c.leader)
		if kerr.CodeOf(err) != c.want || (c.want != "" && kafkawire.ErrorCode(err) == fkerr.UnknownServerError.Code) {
			t.Errorf("current %d, leader %d: %v, want %q", c.current, c.leader, err, c.want)
		}
	}
}

// kafkaBroker is a real one-broker cluster serving gRPC and Kafka.
type kafkaBroker struct {
	b     *Broker
	kafka string
	bc    tapesv1.BrokerServiceClient
}

func startKafkaBroker(t *testing.T, edit func(*Config)) *kafkaBroker {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	klis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := validConfig(t)
	c.Advertise, c.KafkaAdvertise = lis.Addr().String(), klis.Addr().String()
	c.Peers = map[metadata.BrokerID]string{1: c.Advertise}
	if edit != nil {
		edit(&c)
	}
	b, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	go b.Serve(lis)
	go b.ServeKafka(klis)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		b.Shutdown(ctx)
	})
	cc, err := grpc.NewClient(c.Advertise, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	kb := &kafkaBroker{b: b, kafka: c.KafkaAdvertise, bc: tapesv1.NewBrokerServiceClient(cc)}
	eventually.Nil(t, 60*time.Second, "the broker to serve clients", func() error {
		if why := b.notReady(); why != "" {
			return fmt.Errorf("%s", why)
		}
		return nil
	})
	return kb
}

// roundTrip sends req at its version on a new connection and decodes the
// answer.
func (kb *kafkaBroker) roundTrip(t *testing.T, req kmsg.Request) kmsg.Response {
	t.Helper()
	c, err := net.DialTimeout("tcp", kb.kafka, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	const corr = 3
	if _, err := c.Write(kmsg.NewRequestFormatter(kmsg.FormatterClientID("test")).AppendRequest(nil, req, corr)); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	var size [4]byte
	if _, err := io.ReadFull(br, size[:]); err != nil {
		t.Fatalf("%s v%d: no answer: %v", kmsg.NameForKey(req.Key()), req.GetVersion(), err)
	}
	buf := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(br, buf); err != nil {
		t.Fatal(err)
	}
	if got := int32(binary.BigEndian.Uint32(buf)); got != corr {
		t.Fatalf("correlation id %d", got)
	}
	buf = buf[4:]
	if req.IsFlexible() {
		buf = buf[1:]
	}
	resp := req.ResponseKind()
	resp.SetVersion(req.GetVersion())
	if err := resp.ReadFrom(buf); err != nil {
		t.Fatalf("decode %s v%d: %v", kmsg.NameForKey(req.Key()), req.GetVersion(), err)
	}
	return resp
}

func createTopicsReq(v int16, validateOnly bool, topics ...kmsg.CreateTopicsRequestTopic) *kmsg.CreateTopicsRequest {
	req := kmsg.NewPtrCreateTopicsRequest()
	req.Version, req.Topics, req.ValidateOnly, req.TimeoutMillis = v, topics, validateOnly, 30000
	return req
}

func newTopic(name string, parts int32, rf int16, configs ...string) kmsg.CreateTopicsRequestTopic {
	t := kmsg.NewCreateTopicsRequestTopic()
	t.Topic, t.NumPartitions, t.ReplicationFactor = name, parts, rf
	for i := 0; i+1 < len(configs); i += 2 {
		t.Configs = append(t.Configs, kmsg.CreateTopicsRequestTopicConfig{Name: configs[i], Value: kmsg.StringPtr(configs[i+1])})
	}
	return t
}

func codeName(code int16) string {
	if code == 0 {
		return "NONE"
	}
	return fkerr.ErrorForCode(code).Error()
}

// TestKafkaCreateTopicsVersions: CreateTopics v2 and v7 on a real broker:
// created as asked (defaults for -1, configs, a manual assignment),
// validate_only creates nothing, v5+ answers counts, every config and
// (v7) the topic id Metadata gives; each refusal its Kafka error with a
// message.
func TestKafkaCreateTopicsVersions(t *testing.T) {
	kb := startKafkaBroker(t, func(c *Config) { c.MaxPartitionsPerBroker = 20; c.DefaultPartitions = 2 })

	resp := kb.roundTrip(t, createTopicsReq(2, false, newTopic("v2", 1, 1, "retention.ms", "60000"), newTopic("defaults", -1, -1))).(*kmsg.CreateTopicsResponse)
	for _, rt := range resp.Topics {
		if rt.ErrorCode != 0 {
			t.Fatalf("v2 create %s: %s %v", rt.Topic, codeName(rt.ErrorCode), rt.ErrorMessage)
		}
	}
	manual := newTopic("manual", -1, -1)
	manual.ReplicaAssignment = []kmsg.CreateTopicsRequestTopicReplicaAssignment{{Partition: 0, Replicas: []int32{1}}, {Partition: 1, Replicas: []int32{1}}}
	resp = kb.roundTrip(t, createTopicsReq(7, false, newTopic("v7", 3, 1, "min.insync.replicas", "1"), manual)).(*kmsg.CreateTopicsResponse)
	v7 := resp.Topics[0]
	if v7.ErrorCode != 0 || v7.NumPartitions != 3 || v7.ReplicationFactor != 1 || v7.TopicID == [16]byte{} || len(v7.Configs) != len(metadata.TopicConfigKeys()) {
		t.Fatalf("v7 create: %+v", v7)
	}
	for _, c := range v7.Configs {
		wantSrc := int8(kmsg.ConfigSourceDefaultConfig)
		if c.Name == "min.insync.replicas" {
			wantSrc = int8(kmsg.ConfigSourceDynamicTopicConfig)
		}
		if c.Source != wantSrc || c.Value == nil {
			t.Errorf("v7 config %s: source %d value %v, want source %d", c.Name, c.Source, c.Value, wantSrc)
		}
	}
	if m := resp.Topics[1]; m.ErrorCode != 0 || m.NumPartitions != 2 || m.ReplicationFactor != 1 {
		t.Fatalf("manual assignment: %s %v %+v", codeName(m.ErrorCode), m.ErrorMessage, m)
	}

	md, err := kb.bc.Metadata(context.Background(), &tapesv1.MetadataRequest{Topics: []string{"v2", "defaults", "v7", "manual"}})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []int{1, 2, 3, 2} {
		if tm := md.Topics[i]; tm.Error != nil || len(tm.Partitions) != want {
			t.Errorf("%s: %v, %d partitions, want %d", tm.Name, tm.Error, len(tm.Partitions), want)
		}
	}
	if md.Topics[0].Configs["retention.ms"] != "60000" {
		t.Errorf("v2's configs %v", md.Topics[0].Configs)
	}
	if kafkaTopicID(md.Topics[2].TopicId) != v7.TopicID {
		t.Errorf("v7's topic id %x, Metadata's %x", v7.TopicID, kafkaTopicID(md.Topics[2].TopicId))
	}

	// validate_only: answered, not created.
	resp = kb.roundTrip(t, createTopicsReq(5, true, newTopic("dry", 4, 1))).(*kmsg.CreateTopicsResponse)
	if rt := resp.Topics[0]; rt.ErrorCode != 0 || rt.NumPartitions != 4 || rt.ReplicationFactor != 1 {
		t.Fatalf("validate_only: %+v", rt)
	}
	if md, _ := kb.bc.Metadata(context.Background(), &tapesv1.MetadataRequest{Topics: []string{"dry"}}); md.Topics[0].Error == nil {
		t.Fatalf("validate_only created the topic")
	}

	badAssign := newTopic("bad-assign", -1, -1)
	badAssign.ReplicaAssignment = []kmsg.CreateTopicsRequestTopicReplicaAssignment{{Partition: 0, Replicas: []int32{7}}}
	for _, c := range []struct {
		topic kmsg.CreateTopicsRequestTopic
		want  *fkerr.Error
	}{
		{newTopic("v2", 1, 1), fkerr.TopicAlreadyExists},
		{newTopic("rf", 1, 3), fkerr.InvalidReplicationFactor},
		{newTopic("parts", 0, 1), fkerr.InvalidPartitions},
		{newTopic("budget", 30, 1), fkerr.PolicyViolation},
		{newTopic("bad name", 1, 1), fkerr.InvalidTopicException},
		{newTopic(group.OffsetsTopic, 1, 1), fkerr.InvalidTopicException},
		{newTopic("cfg", 1, 1, "cleanup.policy", "compact"), fkerr.InvalidConfig},
		{newTopic("cfg", 1, 1, "retention.ms", "soon"), fkerr.InvalidConfig},
		{badAssign, fkerr.InvalidReplicaAssignment},
	} {
		for _, v := range []int16{2, 7} {
			rt := kb.roundTrip(t, createTopicsReq(v, false, c.topic)).(*kmsg.CreateTopicsResponse).Topics[0]
			if fkerr.ErrorForCode(rt.ErrorCode) != c.want || rt.ErrorMessage == nil || *rt.ErrorMessage == "" {
				t.Errorf("v%d create %q: %s %v, want %s with a message", v, c.topic.Topic, codeName(rt.ErrorCode), rt.ErrorMessage, c.want)
			} else if v >= 5 && (rt.NumPartitions != -1 || rt.ReplicationFactor != -1) {
				t.Errorf("v%d create %q refused with counts %d/%d, want -1/-1", v, c.topic.Topic, rt.NumPartitions, rt.ReplicationFactor)
			}
		}
	}
	rt := kb.roundTrip(t, createTopicsReq(2, false, newTopic("cfg", 1, 1, "cleanup.policy", "compact"))).(*kmsg.CreateTopicsResponse).Topics[0]
	if want := `unknown topic config "cleanup.policy"`; rt.ErrorMessage == nil || !strings.Contains(*rt.ErrorMessage, want) {
		t.Errorf("unknown config's message %v lacks %q", rt.ErrorMessage, want)
	}
	twice := kb.roundTrip(t, createTopicsReq(4, false, newTopic("twice", 1, 1), newTopic("twice", 1, 1))).(*kmsg.CreateTopicsResponse)
	if len(twice.Topics) != 2 || fkerr.ErrorForCode(twice.Topics[0].ErrorCode) != fkerr.InvalidRequest || fkerr.ErrorForCode(twice.Topics[1].ErrorCode) != fkerr.InvalidRequest {
		t.Errorf("a name twice: %+v", twice.Topics)
	}
}

// produce appends values with timestamps to topic-0 through gRPC.
func (kb *kafkaBroker) produce(t *testing.T, topic string, ts ...int64) {
	t.Helper()
	var recs []*tapesv1.Record
	for i, v := range ts {
		recs = append(recs, &tapesv1.Record{TimestampMs: v, Value: []byte{byte('a' + i)}})
	}
	eventually.Nil(t, 60*time.Second, "a produce to "+topic, func() error {
		_, err := kb.bc.Produce(context.Background(), &tapesv1.ProduceRequest{Topic: topic, Partition: 0, Acks: -1, Records: recs})
		return err
	})
}

func (kb *kafkaBroker) createTopic(t *testing.T, name string, parts int32) {
	t.Helper()
	if rt := kb.roundTrip(t, createTopicsReq(7, false, newTopic(name, parts, 1))).(*kmsg.CreateTopicsResponse).Topics[0]; rt.ErrorCode != 0 {
		t.Fatalf("create %s: %s %v", name, codeName(rt.ErrorCode), rt.ErrorMessage)
	}
}

// TestKafkaListOffsetsVersions: ListOffsets v1 and v6 answer what gRPC's
// ListOffsets does (earliest, latest, by timestamp, -1 past the last);
// v4+ answers the leader epoch (the Raft term) for the latest offset, -1
// (unknown) for the others, and fences an older or
// newer current_leader_epoch; a partition asked for twice is
// INVALID_REQUEST; an unknown partition UNKNOWN_TOPIC_OR_PARTITION.
func TestKafkaListOffsetsVersions(t *testing.T) {
	kb := startKafkaBroker(t, nil)
	kb.createTopic(t, "events", 1)
	kb.produce(t, "events", 1000, 2000, 3000, 3000, 5000)
	list := func(v int16, ts int64, epoch int32, parts ...int32) []kmsg.ListOffsetsResponseTopicPartition {
		req := kmsg.NewPtrListOffsetsRequest()
		req.Version, req.ReplicaID, req.IsolationLevel = v, -1, 1
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = "events"
		for _, p := range parts {
			rp := kmsg.NewListOffsetsRequestTopicPartition()
			rp.Partition, rp.Timestamp, rp.CurrentLeaderEpoch = p, ts, epoch
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
		return kb.roundTrip(t, req).(*kmsg.ListOffsetsResponse).Topics[0].Partitions
	}
	grpcEpoch := int32(-1)
	for _, ts := range []int64{-2, -1, 0, 1500, 3000, 4000, 5001} {
		g, err := kb.bc.ListOffsets(context.Background(), &tapesv1.ListOffsetsRequest{Topic: "events", Partition: 0, TimestampMs: ts})
		if err != nil {
			t.Fatal(err)
		}
		grpcEpoch = kafkaEpoch(g.LeaderEpoch)
		for _, v := range []int16{1, 6} {
			p := list(v, ts, -1, 0)[0]
			if p.ErrorCode != 0 || p.Offset != g.Offset || p.Timestamp != g.TimestampMs {
				t.Errorf("v%d ts %d: %s offset %d ts %d; gRPC offset %d ts %d", v, ts, codeName(p.ErrorCode), p.Offset, p.Timestamp, g.Offset, g.TimestampMs)
			}
			want := int32(-1)
			if ts == -1 {
				want = grpcEpoch
			}
			if v >= 4 && p.LeaderEpoch != want {
				t.Errorf("v%d ts %d: leader epoch %d, want %d", v, ts, p.LeaderEpoch, want)
			}
		}
	}
	if grpcEpoch < 1 {
		t.Fatalf("leader epoch %d", grpcEpoch)
	}
	if _, err := kb.bc.ListOffsets(context.Background(), &tapesv1.ListOffsetsRequest{Topic: "events", Partition: 0, TimestampMs: -1, IsolationLevel: 2}); !kerr.Is(kerr.FromStatus(err), kerr.InvalidRequest) {
		t.Errorf("gRPC ListOffsets isolation level 2: %v; want INVALID_REQUEST", err)
	}
	for _, c := range []struct {
		epoch int32
		want  int16
	}{{grpcEpoch, 0}, {grpcEpoch - 1, fkerr.FencedLeaderEpoch.Code}, {grpcEpoch + 1, fkerr.UnknownLeaderEpoch.Code}} {
		p := list(4, -1, c.epoch, 0)[0]
		if p.ErrorCode != c.want || (c.want != 0 && p.Offset != -1) || (c.want == 0 && p.Offset != 5) {
			t.Errorf("current leader epoch %d (leader's %d): %s offset %d, want %s", c.epoch, grpcEpoch, codeName(p.ErrorCode), p.Offset, codeName(c.want))
		}
	}
	if ps := list(6, -1, -1, 0, 0); len(ps) != 2 || fkerr.ErrorForCode(ps[0].ErrorCode) != fkerr.InvalidRequest {
		t.Errorf("partition twice: %+v", ps)
	}
	if p := list(6, -3, -1, 0)[0]; fkerr.ErrorForCode(p.ErrorCode) != fkerr.InvalidRequest {
		t.Errorf("max timestamp (-3) at v6: %s, want INVALID_REQUEST", codeName(p.ErrorCode))
	}
	if p := list(6, -1, -1, 3)[0]; fkerr.ErrorForCode(p.ErrorCode) != fkerr.UnknownTopicOrPartition {
		t.Errorf("partition 3: %s", codeName(p.ErrorCode))
	}
}

// TestKafkaDeleteRecordsAndTopics: DeleteRecords v0 and v2 move the log
// start (offset -1: to the high watermark), the log start ListOffsets and
// gRPC see; past the high watermark is OFFSET_OUT_OF_RANGE with low
// watermark -1. DeleteTopics v1 and v5 delete, an unknown topic is
// UNKNOWN_TOPIC_OR_PARTITION (v5 with a message), __consumer_offsets is
// refused.
func TestKafkaDeleteRecordsAndTopics(t *testing.T) {
	kb := startKafkaBroker(t, nil)
	kb.createTopic(t, "logs", 1)
	kb.produce(t, "logs", 1, 2, 3, 4, 5)
	del := func(v int16, offsets ...int64) []kmsg.DeleteRecordsResponseTopicPartition {
		req := kmsg.NewPtrDeleteRecordsRequest()
		req.Version, req.TimeoutMillis = v, 30000
		rt := kmsg.NewDeleteRecordsRequestTopic()
		rt.Topic = "logs"
		for _, o := range offsets {
			rt.Partitions = append(rt.Partitions, kmsg.DeleteRecordsRequestTopicPartition{Partition: 0, Offset: o})
		}
		req.Topics = append(req.Topics, rt)
		return kb.roundTrip(t, req).(*kmsg.DeleteRecordsResponse).Topics[0].Partitions
	}
	if p := del(0, 2)[0]; p.ErrorCode != 0 || p.LowWatermark != 2 {
		t.Fatalf("v0 delete before 2: %s low watermark %d", codeName(p.ErrorCode), p.LowWatermark)
	}
	if p := del(2, 9)[0]; fkerr.ErrorForCode(p.ErrorCode) != fkerr.OffsetOutOfRange || p.LowWatermark != -1 {
		t.Fatalf("v2 delete before 9 (high watermark 5): %s low watermark %d", codeName(p.ErrorCode), p.LowWatermark)
	}
	if p := del(2, -1)[0]; p.ErrorCode != 0 || p.LowWatermark != 5 {
		t.Fatalf("v2 delete before -1: %s low watermark %d", codeName(p.ErrorCode), p.LowWatermark)
	}
	g, err := kb.bc.ListOffsets(context.Background(), &tapesv1.ListOffsetsRequest{Topic: "logs", Partition: 0, TimestampMs: -2})
	if err != nil || g.Offset != 5 {
		t.Fatalf("gRPC earliest after DeleteRecords: %v %v", g, err)
	}

	delTopics := func(v int16, names ...string) []kmsg.DeleteTopicsResponseTopic {
		req := kmsg.NewPtrDeleteTopicsRequest()
		req.Version, req.TopicNames, req.TimeoutMillis = v, names, 30000
		return kb.roundTrip(t, req).(*kmsg.DeleteTopicsResponse).Topics
	}
	got := delTopics(5, "logs", "nope", group.OffsetsTopic)
	if len(got) != 3 || got[0].ErrorCode != 0 || fkerr.ErrorForCode(got[1].ErrorCode) != fkerr.UnknownTopicOrPartition || got[1].ErrorMessage == nil ||
		fkerr.ErrorForCode(got[2].ErrorCode) != fkerr.InvalidTopicException {
		t.Fatalf("v5 delete: %+v", got)
	}
	if got := delTopics(1, "logs"); fkerr.ErrorForCode(got[0].ErrorCode) != fkerr.UnknownTopicOrPartition {
		t.Fatalf("v1 delete of the deleted topic: %s", codeName(got[0].ErrorCode))
	}
	if md, _ := kb.bc.Metadata(context.Background(), &tapesv1.MetadataRequest{Topics: []string{"logs"}}); md.Topics[0].Error == nil {
		t.Fatalf("logs still exists")
	}
}

// TestKafkaDescribeConfigsVersions: DescribeConfigs v1 and v4 of a topic
// (every config, the topic's own as TOPIC_CONFIG), of this broker (its own
// settings; another id and other resource types INVALID_REQUEST; "" none),
// synonyms and documentation when asked, config_names selecting, an
// unknown topic UNKNOWN_TOPIC_OR_PARTITION.
func TestKafkaDescribeConfigsVersions(t *testing.T) {
	kb := startKafkaBroker(t, func(c *Config) { c.ReplicaLagTimeMax = 7 * time.Second })
	if rt := kb.roundTrip(t, createTopicsReq(7, false, newTopic("conf", 1, 1, "retention.bytes", "4096"))).(*kmsg.CreateTopicsResponse).Topics[0]; rt.ErrorCode != 0 {
		t.Fatal(codeName(rt.ErrorCode))
	}
	describe := func(v int16, synonyms bool, res ...kmsg.DescribeConfigsRequestResource) []kmsg.DescribeConfigsResponseResource {
		req := kmsg.NewPtrDescribeConfigsRequest()
		req.Version, req.Resources, req.IncludeSynonyms, req.IncludeDocumentation = v, res, synonyms, synonyms
		return kb.roundTrip(t, req).(*kmsg.DescribeConfigsResponse).Resources
	}
	topic := kmsg.DescribeConfigsRequestResource{ResourceType: kmsg.ConfigResourceTypeTopic, ResourceName: "conf"}
	for _, v := range []int16{1, 4} {
		got := describe(v, true, topic)[0]
		if got.ErrorCode != 0 || len(got.Configs) != len(metadata.TopicConfigKeys()) {
			t.Fatalf("v%d topic: %+v", v, got)
		}
		for _, c := range got.Configs {
			if c.Name == "retention.bytes" && (*c.Value != "4096" || c.Source != kmsg.ConfigSourceDynamicTopicConfig || c.IsDefault) {
				t.Errorf("v%d retention.bytes: %+v", v, c)
			}
			if c.Name == "retention.ms" && (*c.Value != "604800000" || c.Source != kmsg.ConfigSourceDefaultConfig || len(c.ConfigSynonyms) != 1) {
				t.Errorf("v%d retention.ms: %+v", v, c)
			}
			if v >= 3 && (c.ConfigType != kmsg.ConfigTypeLong || c.Documentation == nil) {
				t.Errorf("v%d %s: type %v doc %v", v, c.Name, c.ConfigType, c.Documentation)
			}
		}
	}
	if got := describe(4, false, kmsg.DescribeConfigsRequestResource{ResourceType: kmsg.ConfigResourceTypeTopic, ResourceName: "conf", ConfigNames: []string{"retention.bytes"}})[0]; len(got.Configs) != 1 || got.Configs[0].ConfigSynonyms != nil || got.Configs[0].Documentation != nil {
		t.Errorf("one name, no synonyms: %+v", got.Configs)
	}

	brokerRes := func(name string) kmsg.DescribeConfigsRequestResource {
		return kmsg.DescribeConfigsRequestResource{ResourceType: kmsg.ConfigResourceTypeBroker, ResourceName: name}
	}
	got := describe(4, false, brokerRes("1"), brokerRes("2"), brokerRes(""),
		kmsg.DescribeConfigsRequestResource{ResourceType: kmsg.ConfigResourceTypeTopic, ResourceName: "nope"},
		kmsg.DescribeConfigsRequestResource{ResourceType: kmsg.ConfigResourceTypeBrokerLogger, ResourceName: "1"})
	byName := map[string]kmsg.DescribeConfigsResponseResourceConfig{}
	for _, c := range got[0].Configs {
		byName[c.Name] = c
	}
	for name, want := range map[string]struct {
		value string
		src   kmsg.ConfigSource
	}{
		"broker.id":                  {"1", kmsg.ConfigSourceStaticBrokerConfig},
		"replica.lag.time.max.ms":    {"7000", kmsg.ConfigSourceStaticBrokerConfig},
		"broker.session.timeout.ms":  {"4000", kmsg.ConfigSourceDefaultConfig},
		"min.insync.replicas":        {"1", kmsg.ConfigSourceDefaultConfig},
		"log.retention.ms":           {"604800000", kmsg.ConfigSourceDefaultConfig},
		"num.partitions":             {"1", kmsg.ConfigSourceDefaultConfig},
		"default.replication.factor": {"1", kmsg.ConfigSourceDefaultConfig},
		"advertised.listeners":       {"PLAINTEXT://" + kb.kafka, kmsg.ConfigSourceStaticBrokerConfig},
	} {
		if c, ok := byName[name]; !ok || *c.Value != want.value || c.Source != want.src || !c.ReadOnly {
			t.Errorf("broker %s: %+v, want %s (source %v)", name, c, want.value, want.src)
		}
	}
	if got[0].ErrorCode != 0 || fkerr.ErrorForCode(got[1].ErrorCode) != fkerr.InvalidRequest || got[2].ErrorCode != 0 || len(got[2].Configs) != 0 ||
		fkerr.ErrorForCode(got[3].ErrorCode) != fkerr.UnknownTopicOrPartition || fkerr.ErrorForCode(got[4].ErrorCode) != fkerr.InvalidRequest {
		t.Errorf("resources: %s, %s, %s (%d configs), %s, %s", codeName(got[0].ErrorCode), codeName(got[1].ErrorCode), codeName(got[2].ErrorCode), len(got[2].Configs),
			codeName(got[3].ErrorCode), codeName(got[4].ErrorCode))
	}
}

// TestKafkaAdminEveryVersion: every advertised version of each admin API
// and ListOffsets is answered, decodes, and does what it is asked on a real
// broker: a topic created per CreateTopics version, described, its records
// listed and deleted, and the topic deleted per DeleteTopics version.
func TestKafkaAdminEveryVersion(t *testing.T) {
	kb := startKafkaBroker(t, nil)
	var names []string
	for v := int16(kafkaCreateTopicsMin); v <= kafkaCreateTopicsMax; v++ {
		name := fmt.Sprintf("create-v%d", v)
		names = append(names, name)
		rt := kb.roundTrip(t, createTopicsReq(v, false, newTopic(name, 1, 1, "retention.bytes", "100000"))).(*kmsg.CreateTopicsResponse).Topics[0]
		if rt.ErrorCode != 0 || rt.Topic != name {
			t.Fatalf("CreateTopics v%d: %s %v", v, codeName(rt.ErrorCode), rt.ErrorMessage)
		}
	}
	kb.produce(t, names[0], 10, 20, 30)
	for v := int16(kafkaDescribeConfigsMin); v <= kafkaDescribeConfigsMax; v++ {
		req := kmsg.NewPtrDescribeConfigsRequest()
		req.Version = v
		req.Resources = []kmsg.DescribeConfigsRequestResource{{ResourceType: kmsg.ConfigResourceTypeTopic, ResourceName: names[v%int16(len(names))], ConfigNames: []string{"retention.bytes"}}}
		rr := kb.roundTrip(t, req).(*kmsg.DescribeConfigsResponse).Resources[0]
		if rr.ErrorCode != 0 || len(rr.Configs) != 1 || *rr.Configs[0].Value != "100000" || rr.Configs[0].Source != kmsg.ConfigSourceDynamicTopicConfig {
			t.Fatalf("DescribeConfigs v%d: %+v", v, rr)
		}
	}
	for v := int16(kafkaListOffsetsMin); v <= kafkaListOffsetsMax; v++ {
		req := kmsg.NewPtrListOffsetsRequest()
		req.Version, req.ReplicaID = v, -1
		req.Topics = []kmsg.ListOffsetsRequestTopic{{Topic: names[0], Partitions: []kmsg.ListOffsetsRequestTopicPartition{{Partition: 0, CurrentLeaderEpoch: -1, Timestamp: 20}}}}
		p := kb.roundTrip(t, req).(*kmsg.ListOffsetsResponse).Topics[0].Partitions[0]
		if p.ErrorCode != 0 || p.Offset != 1 || p.Timestamp != 20 {
			t.Fatalf("ListOffsets v%d at 20: %s offset %d ts %d, want offset 1", v, codeName(p.ErrorCode), p.Offset, p.Timestamp)
		}
	}
	for v := int16(kafkaDeleteRecordsMin); v <= kafkaDeleteRecordsMax; v++ {
		req := kmsg.NewPtrDeleteRecordsRequest()
		req.Version, req.TimeoutMillis = v, 30000
		req.Topics = []kmsg.DeleteRecordsRequestTopic{{Topic: names[0], Partitions: []kmsg.DeleteRecordsRequestTopicPartition{{Partition: 0, Offset: int64(v + 1)}}}}
		p := kb.roundTrip(t, req).(*kmsg.DeleteRecordsResponse).Topics[0].Partitions[0]
		if p.ErrorCode != 0 || p.LowWatermark != int64(v+1) {
			t.Fatalf("DeleteRecords v%d before %d: %s low watermark %d", v, v+1, codeName(p.ErrorCode), p.LowWatermark)
		}
	}
	for v := int16(kafkaDeleteTopicsMin); v <= kafkaDeleteTopicsMax; v++ {
		req := kmsg.NewPtrDeleteTopicsRequest()
		req.Version, req.TimeoutMillis, req.TopicNames = v, 30000, []string{names[v-kafkaDeleteTopicsMin]}
		rt := kb.roundTrip(t, req).(*kmsg.DeleteTopicsResponse).Topics[0]
		if rt.ErrorCode != 0 || rt.Topic == nil || *rt.Topic != names[v-kafkaDeleteTopicsMin] {
			t.Fatalf("DeleteTopics v%d: %s %v", v, codeName(rt.ErrorCode), rt.ErrorMessage)
		}
	}
}
