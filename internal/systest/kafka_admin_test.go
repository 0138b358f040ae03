package systest

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	fkerr "github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tapes-dev/tapes/internal/eventually"
	"github.com/tapes-dev/tapes/internal/metadata"
	"github.com/tapes-dev/tapes/internal/testcluster"
)

// TestKafkaAdminMatchesCluster: franz-go's kadm against three real brokers'
// Kafka listeners creates a topic with configs; its leaders, replicas, ISR
// and epochs equal `cluster topics describe`; DescribeConfigs equals the
// configs `cluster topics describe` and gRPC Metadata show (the rest at
// tapes' defaults); after `cluster produce`, ListOffsets (start, end, by
// timestamp) equals gRPC's; DeleteRecords moves the log start `cluster
// topics describe` shows; DeleteTopics deletes it for `cluster topics list`.
func TestKafkaAdminMatchesCluster(t *testing.T) {
	e := start(t, 3)
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.KafkaBootstrap()...), kgo.RequestRetries(20), kgo.RetryTimeout(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	configs := map[string]*string{"min.insync.replicas": kmsg.StringPtr("2"), "retention.ms": kmsg.StringPtr("3600000")}
	eventually.Nil(t, 60*time.Second, "kadm CreateTopic", func() error {
		_, err := adm.CreateTopic(ctx, 3, 3, configs, "admin")
		if errors.Is(err, fkerr.BrokerNotAvailable) {
			return err
		}
		if err != nil {
			t.Fatalf("kadm CreateTopic: %v", err)
		}
		return nil
	})
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "admin"); !errors.Is(err, fkerr.TopicAlreadyExists) {
		t.Fatalf("create admin again: %v, want TOPIC_ALREADY_EXISTS", err)
	}
	if r, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"cleanup.policy": kmsg.StringPtr("compact")}, "compacted"); !errors.Is(err, fkerr.InvalidConfig) || !strings.Contains(r.ErrMessage, `"cleanup.policy"`) {
		t.Fatalf("create with cleanup.policy: %v (%q), want INVALID_CONFIG naming it", err, r.ErrMessage)
	}
	e.WaitSettled("admin", 60*time.Second)

	// Metadata: as `cluster topics describe` shows it.
	eventually.Nil(t, 30*time.Second, "kadm Metadata to equal cluster topics describe", func() error {
		km, err := adm.Metadata(ctx, "admin")
		if err != nil {
			return err
		}
		desc, err := describeTopic(t, e, "admin")
		if err != nil {
			return err
		}
		kt := km.Topics["admin"]
		if kt.Err != nil || len(kt.Partitions) != len(desc.partitions) {
			return fmt.Errorf("kadm: %v, %d partitions; describe %d", kt.Err, len(kt.Partitions), len(desc.partitions))
		}
		for _, d := range desc.partitions {
			kp := kt.Partitions[d.partition]
			if kp.Leader != d.leader || int64(kp.LeaderEpoch) != d.epoch || !slices.Equal(kp.Replicas, d.replicas) || !slices.Equal(kp.ISR, d.isr) {
				return fmt.Errorf("admin-%d: kadm leader %d epoch %d replicas %v isr %v; describe %+v", d.partition, kp.Leader, kp.LeaderEpoch, kp.Replicas, kp.ISR, d)
			}
		}
		return nil
	})

	// DescribeConfigs: the topic's own configs as describe and gRPC show
	// them, every other config tapes knows at its default.
	rcs, err := adm.DescribeTopicConfigs(ctx, "admin")
	if err != nil {
		t.Fatal(err)
	}
	rc, err := rcs.On("admin", nil)
	if err != nil || rc.Err != nil {
		t.Fatalf("DescribeTopicConfigs: %v %v", err, rc.Err)
	}
	desc, err := describeTopic(t, e, "admin")
	if err != nil {
		t.Fatal(err)
	}
	gm, err := e.Client.Metadata(ctx, []string{"admin"}, false)
	if err != nil {
		t.Fatal(err)
	}
	grpcConfigs := gm.Topics[0].Configs
	def := metadata.DefaultTopicConfig()
	var own []string
	var keys []string
	for _, c := range rc.Configs {
		keys = append(keys, c.Key)
		if v, set := grpcConfigs[c.Key]; set {
			own = append(own, c.Key+"="+c.MaybeValue())
			if c.MaybeValue() != v || c.Source != kmsg.ConfigSourceDynamicTopicConfig {
				t.Errorf("%s: kadm %s (source %v), gRPC %s", c.Key, c.MaybeValue(), c.Source, v)
			}
			continue
		}
		if dv, _ := def.Value(c.Key); c.MaybeValue() != dv || c.Source != kmsg.ConfigSourceDefaultConfig {
			t.Errorf("%s: kadm %s (source %v), tapes' default %s", c.Key, c.MaybeValue(), c.Source, dv)
		}
	}
	if !slices.Equal(keys, metadata.TopicConfigKeys()) {
		t.Errorf("DescribeConfigs lists %v, want every config tapes knows %v", keys, metadata.TopicConfigKeys())
	}
	if got := strings.Join(own, ","); got != desc.configs {
		t.Errorf("DescribeConfigs' topic configs %q, cluster topics describe's %q", got, desc.configs)
	}

	// ListOffsets after `cluster produce`, equal to gRPC's.
	var lines []string
	for i := range 10 {
		lines = append(lines, fmt.Sprintf("line-%d", i))
		if _, err := cli(t, e, lines[i]+"\n", "produce", "--topic", "admin", "--partition", "0", "--acks", "all"); err != nil {
			t.Fatal(err)
		}
		if i == 4 {
			time.Sleep(20 * time.Millisecond) // distinct timestamps around record 5
		}
	}
	recs := e.ReadAll("admin", 0)
	if len(recs) != 10 {
		t.Fatalf("admin-0 holds %d records, want 10", len(recs))
	}
	starts, err := adm.ListStartOffsets(ctx, "admin")
	if err != nil {
		t.Fatal(err)
	}
	ends, err := adm.ListEndOffsets(ctx, "admin")
	if err != nil {
		t.Fatal(err)
	}
	checkListed := func(what string, l kadm.ListedOffsets, ts int64) {
		t.Helper()
		for p := int32(0); p < 3; p++ {
			ko, ok := l.Lookup("admin", p)
			g, err := e.Client.ListOffsets(ctx, "admin", p, ts)
			asked := ts
			if err == nil && ts >= 0 && g.Offset == -1 {
				// No record at or after ts: Kafka's answer is -1 as
				// gRPC's, and kadm asks for the end offset then.
				asked = -1
				g, err = e.Client.ListOffsets(ctx, "admin", p, -1)
			}
			if !ok || ko.Err != nil || err != nil {
				t.Fatalf("%s admin-%d: kadm %+v, gRPC %v", what, p, ko, err)
			}
			if asked != -1 {
				g.LeaderEpoch = -1 // the epoch of the offset's batch: unknown
			}
			if ko.Offset != g.Offset || ko.Timestamp != g.TimestampMs || int64(ko.LeaderEpoch) != g.LeaderEpoch {
				t.Errorf("%s admin-%d: kadm offset %d ts %d epoch %d; gRPC offset %d ts %d epoch %d", what, p, ko.Offset, ko.Timestamp, ko.LeaderEpoch, g.Offset, g.TimestampMs, g.LeaderEpoch)
			}
		}
	}
	checkListed("start", starts, -2)
	checkListed("end", ends, -1)
	if o, _ := ends.Lookup("admin", 0); o.Offset != 10 {
		t.Errorf("end of admin-0: %d, want 10", o.Offset)
	}
	for _, ts := range []int64{recs[5].TimestampMs, recs[9].TimestampMs + 1} {
		after, err := adm.ListOffsetsAfterMilli(ctx, ts, "admin")
		if err != nil {
			t.Fatal(err)
		}
		checkListed(fmt.Sprintf("after %d", ts), after, ts)
	}

	// A follower of admin-0 answers NOT_LEADER_OR_FOLLOWER to both
	// ListOffsets and DeleteRecords, and deletes nothing.
	_, follower := e.FollowerOf("admin", 0)
	lo := kmsg.NewPtrListOffsetsRequest()
	lo.Version, lo.ReplicaID = 6, -1
	lo.Topics = []kmsg.ListOffsetsRequestTopic{{Topic: "admin", Partitions: []kmsg.ListOffsetsRequestTopicPartition{{Partition: 0, CurrentLeaderEpoch: -1, Timestamp: -1}}}}
	if r, err := rawKafka(e.KafkaAddress(follower), lo); err != nil {
		t.Fatal(err)
	} else if p := r.(*kmsg.ListOffsetsResponse).Topics[0].Partitions[0]; fkerr.ErrorForCode(p.ErrorCode) != fkerr.NotLeaderForPartition {
		t.Errorf("ListOffsets from follower %d: %+v, want NOT_LEADER_OR_FOLLOWER", follower, p)
	}
	dreq := kmsg.NewPtrDeleteRecordsRequest()
	dreq.Version, dreq.TimeoutMillis = 2, 30000
	dreq.Topics = []kmsg.DeleteRecordsRequestTopic{{Topic: "admin", Partitions: []kmsg.DeleteRecordsRequestTopicPartition{{Partition: 0, Offset: 2}}}}
	if r, err := rawKafka(e.KafkaAddress(follower), dreq); err != nil {
		t.Fatal(err)
	} else if p := r.(*kmsg.DeleteRecordsResponse).Topics[0].Partitions[0]; fkerr.ErrorForCode(p.ErrorCode) != fkerr.NotLeaderForPartition || p.LowWatermark != -1 {
		t.Errorf("DeleteRecords from follower %d: %+v, want NOT_LEADER_OR_FOLLOWER", follower, p)
	}

	// Any broker takes CreateTopics and DeleteTopics, not only the
	// controller: it forwards the proposal as gRPC's CreateTopics does.
	notController := testcluster.Others([]int32{1, 2, 3}, gm.ControllerId)[0]
	ct := kmsg.NewPtrCreateTopicsRequest()
	ct.Version, ct.TimeoutMillis = 7, 30000
	ct.Topics = []kmsg.CreateTopicsRequestTopic{{Topic: "via-follower", NumPartitions: 2, ReplicationFactor: 3}}
	if r, err := rawKafka(e.KafkaAddress(notController), ct); err != nil {
		t.Fatal(err)
	} else if rt := r.(*kmsg.CreateTopicsResponse).Topics[0]; rt.ErrorCode != 0 || rt.NumPartitions != 2 || rt.ReplicationFactor != 3 {
		t.Fatalf("CreateTopics on broker %d (controller %d): %+v", notController, gm.ControllerId, rt)
	}
	if _, err := describeTopic(t, e, "via-follower"); err != nil {
		t.Fatal(err)
	}
	// A replica assignment is honoured exactly: the replicas in the order
	// given, the first the preferred leader.
	ct.Topics = []kmsg.CreateTopicsRequestTopic{{Topic: "assigned", NumPartitions: -1, ReplicationFactor: -1,
		ReplicaAssignment: []kmsg.CreateTopicsRequestTopicReplicaAssignment{{Partition: 0, Replicas: []int32{3, 1}}, {Partition: 1, Replicas: []int32{2, 3}}}}}
	if r, err := rawKafka(e.KafkaAddress(notController), ct); err != nil {
		t.Fatal(err)
	} else if rt := r.(*kmsg.CreateTopicsResponse).Topics[0]; rt.ErrorCode != 0 || rt.NumPartitions != 2 || rt.ReplicationFactor != 2 {
		t.Fatalf("CreateTopics with an assignment: %+v", rt)
	}
	eventually.Nil(t, 60*time.Second, "assigned's preferred leaders", func() error {
		d, err := describeTopic(t, e, "assigned")
		if err != nil {
			return err
		}
		for i, want := range [][]int32{{3, 1}, {2, 3}} {
			if p := d.partitions[i]; !slices.Equal(p.replicas, want) || p.leader != want[0] {
				return fmt.Errorf("assigned-%d: replicas %v leader %d, want %v led by %d", i, p.replicas, p.leader, want, want[0])
			}
		}
		return nil
	})

	// The broker's own configs, as it runs.
	bcs, err := adm.DescribeBrokerConfigs(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	brc, err := bcs.On("2", nil)
	if err != nil || brc.Err != nil {
		t.Fatalf("DescribeBrokerConfigs(2): %v %v", err, brc.Err)
	}
	brokerCfg := map[string]string{}
	for _, c := range brc.Configs {
		brokerCfg[c.Key] = c.MaybeValue()
	}
	for k, v := range map[string]string{"broker.id": "2", "min.insync.replicas": "1", "log.retention.ms": "604800000",
		"advertised.listeners": "PLAINTEXT://" + e.KafkaAddress(2), "auto.create.topics.enable": "false"} {
		if brokerCfg[k] != v {
			t.Errorf("broker 2's %s = %q, want %q", k, brokerCfg[k], v)
		}
	}

	dt := kmsg.NewPtrDeleteTopicsRequest()
	dt.Version, dt.TimeoutMillis, dt.TopicNames = 5, 30000, []string{"via-follower"}
	if r, err := rawKafka(e.KafkaAddress(notController), dt); err != nil || r.(*kmsg.DeleteTopicsResponse).Topics[0].ErrorCode != 0 {
		t.Fatalf("DeleteTopics on broker %d: %v %+v", notController, err, r)
	}

	// DeleteRecords: the log start `cluster topics describe` shows.
	var os kadm.Offsets
	os.AddOffset("admin", 0, 4, -1)
	dr, err := adm.DeleteRecords(ctx, os)
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := dr.Lookup("admin", 0); r.Err != nil || r.LowWatermark != 4 {
		t.Fatalf("DeleteRecords before 4: %+v", r)
	}
	eventually.Nil(t, 30*time.Second, "cluster topics describe to show LogStart 4", func() error {
		desc, err := describeTopic(t, e, "admin")
		if err != nil {
			return err
		}
		if d := desc.partitions[0]; d.logStart != 4 {
			return fmt.Errorf("admin-0 LogStart %d", d.logStart)
		}
		return nil
	})
	os = nil
	os.AddOffset("admin", 0, 11, -1)
	if dr, err := adm.DeleteRecords(ctx, os); err != nil {
		t.Fatal(err)
	} else if r, _ := dr.Lookup("admin", 0); !errors.Is(r.Err, fkerr.OffsetOutOfRange) {
		t.Fatalf("DeleteRecords before 11 (high watermark 10): %+v, want OFFSET_OUT_OF_RANGE", r)
	}

	// DeleteTopics.
	if r, err := adm.DeleteTopic(ctx, "admin"); err != nil || r.Err != nil {
		t.Fatalf("DeleteTopic: %v %v", err, r.Err)
	}
	if r, err := adm.DeleteTopic(ctx, "admin"); err == nil && !errors.Is(r.Err, fkerr.UnknownTopicOrPartition) {
		t.Fatalf("DeleteTopic again: %v, want UNKNOWN_TOPIC_OR_PARTITION", r.Err)
	}
	if list, err := cli(t, e, "", "topics", "list"); err != nil || strings.Contains(list, "admin") {
		t.Fatalf("topics list after delete: %q, %v", list, err)
	}
}

// describedTopic is `cluster topics describe TOPIC` parsed.
type describedTopic struct {
	configs    string // the Configs: field, "k=v,k=v"
	partitions []describedPartition
}

type describedPartition struct {
	partition     int32
	leader        int32
	replicas, isr []int32
	epoch         int64
	logStart      int64
}

// describeTopic runs `cluster topics describe topic` and parses its
// kafka-topics-shaped lines ("Key: value" pairs separated by two spaces).
func describeTopic(t *testing.T, e *testcluster.Env, topic string) (describedTopic, error) {
	out, err := cli(t, e, "", "topics", "describe", topic)
	if err != nil {
		return describedTopic{}, err
	}
	var d describedTopic
	ids := func(s string) []int32 {
		var out []int32
		for _, f := range strings.Split(s, ",") {
			if n, err := strconv.Atoi(f); err == nil {
				out = append(out, int32(n))
			}
		}
		return out
	}
	for _, line := range strings.Split(out, "\n") {
		fields := map[string]string{}
		for _, kv := range strings.Split(strings.TrimSpace(line), "  ") {
			if k, v, ok := strings.Cut(kv, ": "); ok {
				fields[k] = v
			} else if k, ok := strings.CutSuffix(kv, ":"); ok {
				fields[k] = ""
			}
		}
		if _, ok := fields["Partition"]; !ok {
			if c, ok := fields["Configs"]; ok {
				d.configs = c
			}
			continue
		}
		p, _ := strconv.Atoi(fields["Partition"])
		leader, _ := strconv.Atoi(fields["Leader"])
		epoch, _ := strconv.ParseInt(fields["Epoch"], 10, 64)
		start, _ := strconv.ParseInt(fields["LogStart"], 10, 64)
		d.partitions = append(d.partitions, describedPartition{partition: int32(p), leader: int32(leader), replicas: ids(fields["Replicas"]),
			isr: ids(fields["Isr"]), epoch: epoch, logStart: start})
	}
	if len(d.partitions) == 0 {
		return d, fmt.Errorf("cluster topics describe %s printed no partition:\n%s", topic, out)
	}
	return d, nil
}

// TestKafkaBadProtocolInput: on a real broker's Kafka listener, each bad
// input (a frame over socket.request.max.bytes, a truncated frame, an
// unknown API key, an unadvertised version, a negative array length) closes
// its own connection, or (ApiVersions too new, KIP-511) is answered with
// UNSUPPORTED_VERSION, while a connection opened before it goes on being
// answered, and new connections too.
func TestKafkaBadProtocolInput(t *testing.T) {
	e := start(t, 3)
	addr := e.KafkaAddress(1)
	bystander := dialKafka(t, addr)
	defer bystander.Close()
	corr := int32(0)
	stillServed := func(what string) {
		t.Helper()
		corr++
		req := kmsg.NewPtrApiVersionsRequest()
		if err := writeKafka(bystander, req, 0, corr); err != nil {
			t.Fatalf("after %s: the other connection: %v", what, err)
		}
		resp := kmsg.NewPtrApiVersionsResponse()
		if err := readKafka(bystander, resp, corr, false); err != nil || resp.ErrorCode != 0 {
			t.Fatalf("after %s: the other connection's ApiVersions: %v (%d)", what, err, resp.ErrorCode)
		}
		if _, err := rawKafka(addr, kmsg.NewPtrMetadataRequest()); err != nil {
			t.Fatalf("after %s: a new connection's Metadata: %v", what, err)
		}
	}
	stillServed("nothing")

	header := func(key, version int16) []byte {
		b := binary.BigEndian.AppendUint16(nil, uint16(key))
		b = binary.BigEndian.AppendUint16(b, uint16(version))
		b = binary.BigEndian.AppendUint32(b, 99)
		return append(binary.BigEndian.AppendUint16(b, 1), 'x') // client id "x"
	}
	framed := func(body []byte) []byte {
		return append(binary.BigEndian.AppendUint32(nil, uint32(len(body))), body...)
	}
	// DeleteTopics v1: topic names array of length -2 (not nullable),
	// then the timeout.
	negArray := framed(binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(header(kmsg.DeleteTopics.Int16(), 1), 0xfffffffe), 30000))

	for _, c := range []struct {
		name  string
		bytes []byte
		half  bool // then close the writing side (the frame stays truncated)
	}{
		{"a frame of 100 MiB + 1", binary.BigEndian.AppendUint32(nil, 100<<20+1), false},
		{"a negative frame size", binary.BigEndian.AppendUint32(nil, 0x80000000), false},
		{"a truncated frame", append(binary.BigEndian.AppendUint32(nil, 200), header(kmsg.Metadata.Int16(), 4)...), true},
		{"an unknown API key", framed(header(9999, 0)), false},
		{"an API key not served (OffsetForLeaderEpoch)", framed(header(kmsg.OffsetForLeaderEpoch.Int16(), 2)), false},
		{"an unadvertised version (Metadata v13)", framed(append(header(kmsg.Metadata.Int16(), 13), 0, 0, 0, 0, 0)), false},
		{"a negative array length", negArray, false},
	} {
		conn := dialKafka(t, addr)
		if _, err := conn.Write(c.bytes); err != nil {
			t.Fatalf("%s: write: %v", c.name, err)
		}
		if c.half {
			conn.(*net.TCPConn).CloseWrite()
		}
		conn.SetReadDeadline(time.Now().Add(30 * time.Second))
		n, err := conn.Read(make([]byte, 64))
		if n != 0 || !(errors.Is(err, io.EOF) || isReset(err)) {
			t.Errorf("%s: read %d bytes, %v; want the connection closed", c.name, n, err)
		}
		conn.Close()
		stillServed(c.name)
	}

	// ApiVersions above v4 is answered (KIP-511): UNSUPPORTED_VERSION and
	// key 18's range, so the client retries lower.
	conn := dialKafka(t, addr)
	defer conn.Close()
	if _, err := conn.Write(framed(append(header(kmsg.ApiVersions.Int16(), 9), 0))); err != nil {
		t.Fatal(err)
	}
	resp := kmsg.NewPtrApiVersionsResponse()
	if err := readKafka(conn, resp, 99, false); err != nil || fkerr.ErrorForCode(resp.ErrorCode) != fkerr.UnsupportedVersion || len(resp.ApiKeys) != 1 || resp.ApiKeys[0].MaxVersion != 4 {
		t.Fatalf("ApiVersions v9: %v %+v", err, resp)
	}
	stillServed("ApiVersions v9")
}

func isReset(err error) bool {
	return err != nil && (strings.Contains(err.Error(), "connection reset") || strings.Contains(err.Error(), "broken pipe"))
}

func dialKafka(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// writeKafka writes req at version v with correlation id corr.
func writeKafka(c net.Conn, req kmsg.Request, v int16, corr int32) error {
	req.SetVersion(v)
	c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	_, err := c.Write(kmsg.NewRequestFormatter(kmsg.FormatterClientID("systest")).AppendRequest(nil, req, corr))
	return err
}

// readKafka reads one answer into resp (at resp's version) and checks its
// correlation id; flexible: a v1 response header (a tagged-field byte).
func readKafka(c net.Conn, resp kmsg.Response, corr int32, flexible bool) error {
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	var size [4]byte
	if _, err := io.ReadFull(c, size[:]); err != nil {
		return err
	}
	buf := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(c, buf); err != nil {
		return err
	}
	if got := int32(binary.BigEndian.Uint32(buf)); got != corr {
		return fmt.Errorf("correlation id %d, want %d", got, corr)
	}
	buf = buf[4:]
	if flexible {
		buf = buf[1:]
	}
	return resp.ReadFrom(buf)
}
