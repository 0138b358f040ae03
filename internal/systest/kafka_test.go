package systest

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	fkerr "github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tapes-dev/tapes/internal/eventually"
	"github.com/tapes-dev/tapes/internal/testcluster"
)

// TestKafkaMetadataMatchesTheBrokers: franz-go's kadm, through the brokers'
// Kafka listeners, sees every broker at its Kafka address, the controller,
// and each partition's leader, leader epoch (the Raft term), replicas and
// ISR as the gRPC Metadata (what `cluster topics describe` prints) has
// them; after the SIGKILL of a partition leader, the new leader with a
// higher epoch, and the dead broker gone from the brokers and among the
// partition's offline replicas.
func TestKafkaMetadataMatchesTheBrokers(t *testing.T) {
	e := start(t, 3)
	e.CreateTopic("orders", 3, 3, map[string]string{"min.insync.replicas": "2"})

	cl, err := kgo.NewClient(kgo.SeedBrokers(e.KafkaBootstrap()...), kgo.RequestRetries(20), kgo.RetryTimeout(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)

	// Brokers and controller.
	eventually.Nil(t, 30*time.Second, "Kafka Metadata to match the gRPC Metadata", func() error {
		return kafkaMatchesGRPC(e, adm, []int32{1, 2, 3})
	})

	// ApiVersions advertises exactly what is served.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	vers, err := adm.ApiVersions(ctx)
	if err != nil {
		t.Fatalf("ApiVersions: %v", err)
	}
	for _, bv := range vers {
		if bv.Err != nil {
			t.Fatalf("ApiVersions from broker %d: %v", bv.NodeID, bv.Err)
		}
		var keys []string
		bv.EachKeySorted(func(key, min, max int16) {
			keys = append(keys, fmt.Sprintf("%s v%d-v%d", kmsg.NameForKey(key), min, max))
		})
		if want := []string{"Produce v0-v11", "Fetch v4-v12", "ListOffsets v1-v6", "Metadata v0-v12", "OffsetCommit v1-v9", "OffsetFetch v1-v9", "FindCoordinator v0-v6",
			"JoinGroup v0-v9", "Heartbeat v0-v4", "LeaveGroup v0-v5", "SyncGroup v0-v5", "DescribeGroups v0-v5", "ListGroups v0-v4",
			"ApiVersions v0-v4", "CreateTopics v2-v7", "DeleteTopics v1-v5", "DeleteRecords v0-v2", "InitProducerID v0-v4",
			"AddPartitionsToTxn v0-v3", "AddOffsetsToTxn v0-v3", "EndTxn v0-v3", "WriteTxnMarkers v0-v1", "TxnOffsetCommit v0-v3", // transactions
			"DescribeConfigs v1-v4",
			"DescribeTransactions v0-v0", "ListTransactions v0-v1", // the transaction coordinator
		}; !slices.Equal(keys, want) {
			t.Fatalf("broker %d advertises %v, want %v", bv.NodeID, keys, want)
		}
	}

	// A topic that does not exist, even with auto creation asked for,
	// is UNKNOWN_TOPIC_OR_PARTITION, and is not created.
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr("no-such-topic")
	req.Topics = append(req.Topics, rt)
	req.AllowAutoTopicCreation = true
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatalf("Metadata for no-such-topic: %v", err)
	}
	if len(resp.Topics) != 1 || fkerr.ErrorForCode(resp.Topics[0].ErrorCode) != fkerr.UnknownTopicOrPartition {
		t.Fatalf("Metadata for no-such-topic: %+v", resp.Topics)
	}
	md, err := e.Client.Metadata(ctx, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, tm := range md.Topics {
		if tm.Name == "no-such-topic" {
			t.Fatalf("Metadata with allow_auto_topic_creation created the topic")
		}
	}

	// SIGKILL partition 0's leader: the new leader, with a higher epoch.
	before := kafkaPartition(t, adm, "orders", 0)
	old := before.Leader
	if err := e.C.Kill(testcluster.BrokerName(old)); err != nil {
		t.Fatal(err)
	}
	t.Logf("SIGKILLed broker-%d, leader of orders-0 at epoch %d", old, before.LeaderEpoch)
	eventually.Nil(t, 60*time.Second, "Kafka Metadata to show orders-0's new leader", func() error {
		p, err := kafkaPartitionErr(adm, "orders", 0)
		switch {
		case err != nil:
			return err
		case p.Leader == old || p.Leader < 0:
			return fmt.Errorf("orders-0 leader %d (epoch %d)", p.Leader, p.LeaderEpoch)
		case p.LeaderEpoch <= before.LeaderEpoch:
			return fmt.Errorf("orders-0 new leader %d at epoch %d, not above %d", p.Leader, p.LeaderEpoch, before.LeaderEpoch)
		case !slices.Contains(p.OfflineReplicas, old):
			return fmt.Errorf("orders-0 offline replicas %v lack broker %d", p.OfflineReplicas, old)
		}
		return kafkaMatchesGRPC(e, adm, testcluster.Others([]int32{1, 2, 3}, old))
	})
}

// kafkaMatchesGRPC compares one Kafka Metadata answer with one gRPC
// Metadata answer: the live brokers (want) at their Kafka addresses, the
// controller, and orders' partitions.
func kafkaMatchesGRPC(e *testcluster.Env, adm *kadm.Client, want []int32) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	km, err := adm.Metadata(ctx, "orders")
	if err != nil {
		return fmt.Errorf("kadm Metadata: %w", err)
	}
	gm, err := e.Client.Metadata(ctx, []string{"orders"}, false)
	if err != nil {
		return fmt.Errorf("gRPC Metadata: %w", err)
	}
	var ids []int32
	for _, b := range km.Brokers {
		ids = append(ids, b.NodeID)
		if got, want := net.JoinHostPort(b.Host, strconv.Itoa(int(b.Port))), e.KafkaAddress(b.NodeID); got != want {
			return fmt.Errorf("broker %d at %s, want its Kafka address %s", b.NodeID, got, want)
		}
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	if !slices.Equal(ids, want) {
		return fmt.Errorf("Kafka Metadata lists brokers %v, want %v", ids, want)
	}
	for _, bi := range gm.Brokers {
		if bi.KafkaAddress != e.KafkaAddress(bi.Id) {
			return fmt.Errorf("gRPC Metadata: broker %d kafka_address %q, want %q", bi.Id, bi.KafkaAddress, e.KafkaAddress(bi.Id))
		}
	}
	if km.Controller != gm.ControllerId || km.Controller < 0 {
		return fmt.Errorf("controller: Kafka %d, gRPC %d", km.Controller, gm.ControllerId)
	}
	kt, ok := km.Topics["orders"]
	if !ok || kt.Err != nil || len(kt.Partitions) != 3 {
		return fmt.Errorf("Kafka Metadata of orders: %+v", kt)
	}
	for _, gp := range gm.Topics[0].Partitions {
		kp := kt.Partitions[gp.Partition]
		if kp.Err != nil {
			return fmt.Errorf("orders-%d: %v", gp.Partition, kp.Err)
		}
		if kp.Leader != gp.LeaderId || int64(kp.LeaderEpoch) != gp.LeaderEpoch ||
			!slices.Equal(kp.Replicas, gp.Replicas) || !slices.Equal(kp.ISR, gp.Isr) {
			return fmt.Errorf("orders-%d: Kafka leader %d epoch %d replicas %v isr %v; gRPC leader %d epoch %d replicas %v isr %v",
				gp.Partition, kp.Leader, kp.LeaderEpoch, kp.Replicas, kp.ISR, gp.LeaderId, gp.LeaderEpoch, gp.Replicas, gp.Isr)
		}
	}
	return nil
}

func kafkaPartitionErr(adm *kadm.Client, topic string, p int32) (kadm.PartitionDetail, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	km, err := adm.Metadata(ctx, topic)
	if err != nil {
		return kadm.PartitionDetail{}, err
	}
	pd, ok := km.Topics[topic].Partitions[p]
	if !ok {
		return kadm.PartitionDetail{}, fmt.Errorf("%s-%d not in Kafka Metadata", topic, p)
	}
	return pd, pd.Err
}

func kafkaPartition(t *testing.T, adm *kadm.Client, topic string, p int32) kadm.PartitionDetail {
	t.Helper()
	pd, err := kafkaPartitionErr(adm, topic, p)
	if err != nil {
		t.Fatalf("Kafka Metadata of %s-%d: %v", topic, p, err)
	}
	return pd
}

// TestKafkaMetadataVersions sends Metadata at the versions whose topic
// rules differ, on a raw connection (kgo always uses the highest version):
// v0's empty list and v1+'s null ask for every topic, v1+'s empty list for
// none; v10+ names topics by id too.
func TestKafkaMetadataVersions(t *testing.T) {
	e := start(t, 3)
	e.CreateTopic("orders", 2, 3, nil)
	addr := e.KafkaAddress(1)
	topics := func(resp *kmsg.MetadataResponse) []string {
		var out []string
		for _, tp := range resp.Topics {
			if tp.Topic != nil {
				out = append(out, *tp.Topic)
			}
		}
		return out
	}
	for _, tc := range []struct {
		version int16
		null    bool
		want    []string
	}{
		{0, false, []string{"orders"}},
		{1, true, []string{"orders"}},
		{1, false, nil},
		{4, false, nil},
		{9, true, []string{"orders"}},
		{12, false, nil},
		{12, true, []string{"orders"}},
	} {
		req := kmsg.NewPtrMetadataRequest()
		req.Version = tc.version
		if !tc.null {
			req.Topics = []kmsg.MetadataRequestTopic{}
		}
		var resp *kmsg.MetadataResponse
		eventually.Nil(t, 30*time.Second, "a Metadata answer", func() error {
			r, err := rawKafka(addr, req)
			if err == nil && len(r.(*kmsg.MetadataResponse).Brokers) != 3 {
				err = fmt.Errorf("%d brokers listed", len(r.(*kmsg.MetadataResponse).Brokers))
			}
			if err == nil {
				resp = r.(*kmsg.MetadataResponse)
			}
			return err
		})
		if got := topics(resp); !slices.Equal(got, tc.want) {
			t.Errorf("Metadata v%d (null topics %v): topics %v, want %v", tc.version, tc.null, got, tc.want)
		}
		if tc.version >= 1 && resp.ControllerID < 1 {
			t.Errorf("Metadata v%d: controller %d", tc.version, resp.ControllerID)
		}
	}

	// A name asked for twice is answered once.
	twice := kmsg.NewPtrMetadataRequest()
	twice.Version = 4
	twice.Topics = []kmsg.MetadataRequestTopic{{Topic: kmsg.StringPtr("orders")}, {Topic: kmsg.StringPtr("orders")}}
	if r, err := rawKafka(addr, twice); err != nil || !slices.Equal(topics(r.(*kmsg.MetadataResponse)), []string{"orders"}) {
		t.Fatalf("Metadata v4 for orders twice: %v, %v", r, err)
	}

	// v12 by topic id: the id the broker gave, and one no topic has.
	req := kmsg.NewPtrMetadataRequest()
	req.Version = 12
	all, err := rawKafka(addr, req)
	if err != nil {
		t.Fatal(err)
	}
	id := all.(*kmsg.MetadataResponse).Topics[0].TopicID
	req.Topics = []kmsg.MetadataRequestTopic{{TopicID: id}, {TopicID: [16]byte{15: 0xee, 0: 1}}}
	r, err := rawKafka(addr, req)
	if err != nil {
		t.Fatal(err)
	}
	got := r.(*kmsg.MetadataResponse).Topics
	if len(got) != 2 || got[0].Topic == nil || *got[0].Topic != "orders" || got[0].ErrorCode != 0 || len(got[0].Partitions) != 2 ||
		fkerr.ErrorForCode(got[1].ErrorCode) != fkerr.UnknownTopicID {
		t.Fatalf("Metadata v12 by id: %+v", got)
	}
}

// rawKafka sends req at its version on a new connection to addr and reads
// the answer: request header v1 (v2 when flexible), response header v0 (v1
// when flexible).
func rawKafka(addr string, req kmsg.Request) (kmsg.Response, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	const corr = 7
	if err := writeKafka(c, req, req.GetVersion(), corr); err != nil {
		return nil, err
	}
	resp := req.ResponseKind()
	resp.SetVersion(req.GetVersion())
	if err := readKafka(c, resp, corr, req.IsFlexible()); err != nil {
		return nil, fmt.Errorf("%s v%d answer (closed: broker not serving?): %w", kmsg.NameForKey(req.Key()), req.GetVersion(), err)
	}
	return resp, nil
}
