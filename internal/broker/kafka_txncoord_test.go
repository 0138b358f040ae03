package broker

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	fkerr "github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tapes-dev/tapes/internal/eventually"
	"github.com/tapes-dev/tapes/internal/group"
	"github.com/tapes-dev/tapes/internal/kafkawire"
	"github.com/tapes-dev/tapes/internal/kerr"
	"github.com/tapes-dev/tapes/internal/txn"
)

// heldMarkers stands in for partition leaders serving WriteTxnMarkers
// (branch txnpart): every call waits for release, then succeeds.
type heldMarkers struct {
	release chan struct{}
	mu      sync.Mutex
	got     []txn.Marker
}

func (h *heldMarkers) WriteMarkers(ctx context.Context, m txn.Marker) []error {
	h.mu.Lock()
	h.got = append(h.got, m)
	h.mu.Unlock()
	select {
	case <-h.release:
		return make([]error, len(m.Partitions))
	case <-ctx.Done():
		return slices.Repeat([]error{ctx.Err()}, len(m.Partitions))
	}
}

func (h *heldMarkers) markers() []txn.Marker {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.got)
}

// setTxnMarkers replaces the broker's marker writer.
func (b *Broker) setTxnMarkers(m txn.Markers) {
	b.mu.Lock()
	b.txnMarkers = m
	b.mu.Unlock()
}

func initTxnReq(v int16, id string, timeoutMs int32, pid int64, epoch int16) *kmsg.InitProducerIDRequest {
	req := kmsg.NewPtrInitProducerIDRequest()
	req.Version, req.TransactionalID, req.TransactionTimeoutMillis, req.ProducerID, req.ProducerEpoch = v, kmsg.StringPtr(id), timeoutMs, pid, epoch
	return req
}

// initTxn sends InitProducerId until the coordinator is ready (the first
// one creates __transaction_state) and returns its answer.
func (kb *kafkaBroker) initTxn(t *testing.T, v int16, id string) *kmsg.InitProducerIDResponse {
	t.Helper()
	var resp *kmsg.InitProducerIDResponse
	eventually.Nil(t, 60*time.Second, "InitProducerId "+id, func() error {
		resp = kb.roundTrip(t, initTxnReq(v, id, 60_000, -1, -1)).(*kmsg.InitProducerIDResponse)
		return fkerr.ErrorForCode(resp.ErrorCode)
	})
	return resp
}

// TestKafkaTxnInitProducerID: InitProducerId with a transactional id
// against a real broker creates __transaction_state, gives a producer id
// from the one allocator (an idempotent producer's id is another) at epoch
// 0, and the next one bumps the epoch at every version; KIP-360's current
// id and epoch; a timeout above transaction.max.timeout.ms is
// INVALID_TRANSACTION_TIMEOUT; FindCoordinator key type 1 names this
// broker's Kafka listener; the topic is internal and cannot be deleted.
func TestKafkaTxnInitProducerID(t *testing.T) {
	kb := startKafkaBroker(t, nil)
	first := kb.initTxn(t, 4, "t1")
	if first.ProducerID < 0 || first.ProducerEpoch != 0 {
		t.Fatalf("first: %+v", first)
	}
	for v := int16(0); v <= 4; v++ {
		resp := kb.roundTrip(t, initTxnReq(v, "t1", 60_000, -1, -1)).(*kmsg.InitProducerIDResponse)
		if resp.ErrorCode != 0 || resp.ProducerID != first.ProducerID || resp.ProducerEpoch != v+1 {
			t.Fatalf("v%d: %+v, want producer id %d epoch %d", v, resp, first.ProducerID, v+1)
		}
	}
	resp := kb.roundTrip(t, initTxnReq(3, "t1", 60_000, first.ProducerID, 5)).(*kmsg.InitProducerIDResponse)
	if resp.ErrorCode != 0 || resp.ProducerEpoch != 6 {
		t.Fatalf("KIP-360 with the current epoch: %+v", resp)
	}
	resp = kb.roundTrip(t, initTxnReq(4, "t1", 60_000, first.ProducerID, 2)).(*kmsg.InitProducerIDResponse)
	wantCode(t, "v4 with an old epoch", resp.ErrorCode, fkerr.ProducerFenced)
	resp = kb.roundTrip(t, initTxnReq(3, "t1", 60_000, first.ProducerID, 2)).(*kmsg.InitProducerIDResponse)
	wantCode(t, "v3 with an old epoch", resp.ErrorCode, fkerr.InvalidProducerEpoch)
	resp = kb.roundTrip(t, initTxnReq(2, "t1", int32((16*time.Minute).Milliseconds()), -1, -1)).(*kmsg.InitProducerIDResponse)
	wantCode(t, "timeout above the maximum", resp.ErrorCode, fkerr.InvalidTransactionTimeout)

	idem := kmsg.NewPtrInitProducerIDRequest()
	idem.Version = 4
	got := kb.roundTrip(t, idem).(*kmsg.InitProducerIDResponse)
	other := kb.initTxn(t, 4, "t2")
	if got.ErrorCode != 0 || got.ProducerID == first.ProducerID || other.ProducerID == got.ProducerID || other.ProducerID == first.ProducerID {
		t.Fatalf("one allocator: transactional %d and %d, idempotent %d (%v)", first.ProducerID, other.ProducerID, got.ProducerID, fkerr.ErrorForCode(got.ErrorCode))
	}

	fc := kmsg.NewPtrFindCoordinatorRequest()
	fc.Version, fc.CoordinatorType, fc.CoordinatorKey = 3, coordinatorTypeTransaction, "t1"
	fr := kb.roundTrip(t, fc).(*kmsg.FindCoordinatorResponse)
	host, port, _ := splitKafkaAddress(kb.kafka)
	if fr.ErrorCode != 0 || fr.NodeID != 1 || fr.Host != host || fr.Port != port {
		t.Fatalf("FindCoordinator key type 1: %+v", fr)
	}
	md := kmsg.NewPtrMetadataRequest()
	md.Version = 9
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr(txn.StateTopic)
	md.Topics = append(md.Topics, mt)
	mr := kb.roundTrip(t, md).(*kmsg.MetadataResponse)
	if len(mr.Topics) != 1 || mr.Topics[0].ErrorCode != 0 || !mr.Topics[0].IsInternal || len(mr.Topics[0].Partitions) != 6 {
		t.Fatalf("%s in Metadata: %+v", txn.StateTopic, mr.Topics)
	}
	del := kmsg.NewPtrDeleteTopicsRequest()
	del.Version, del.TopicNames, del.TimeoutMillis = 3, []string{txn.StateTopic}, 10_000
	dr := kb.roundTrip(t, del).(*kmsg.DeleteTopicsResponse)
	wantCode(t, "deleting "+txn.StateTopic, dr.Topics[0].ErrorCode, fkerr.InvalidTopicException)
}

func addPartitionsReq(v int16, id string, pid int64, epoch int16, topic string, parts ...int32) *kmsg.AddPartitionsToTxnRequest {
	req := kmsg.NewPtrAddPartitionsToTxnRequest()
	req.Version, req.TransactionalID, req.ProducerID, req.ProducerEpoch = v, id, pid, epoch
	rt := kmsg.NewAddPartitionsToTxnRequestTopic()
	rt.Topic, rt.Partitions = topic, parts
	req.Topics = append(req.Topics, rt)
	return req
}

func endTxnReq(v int16, id string, pid int64, epoch int16, commit bool) *kmsg.EndTxnRequest {
	req := kmsg.NewPtrEndTxnRequest()
	req.Version, req.TransactionalID, req.ProducerID, req.ProducerEpoch, req.Commit = v, id, pid, epoch, commit
	return req
}

// TestKafkaTxnAddPartitionsAndEndTxn: AddPartitionsToTxn and
// AddOffsetsToTxn over a real broker (an unknown partition
// UNKNOWN_TOPIC_OR_PARTITION, the others OPERATION_NOT_ATTEMPTED; a stale
// epoch INVALID_PRODUCER_EPOCH before v2, PRODUCER_FENCED from v2; another
// producer id INVALID_PRODUCER_ID_MAPPING); EndTxn answered once
// PrepareCommit is committed, CONCURRENT_TRANSACTIONS while the markers
// are held, the markers naming every partition (the group's
// __consumer_offsets partition included); kadm's DescribeTransactions and
// ListTransactions through FindCoordinator key type 1 show each state.
// Markers are held by a stand-in until branch txnpart serves them.
func TestKafkaTxnAddPartitionsAndEndTxn(t *testing.T) {
	kb := startKafkaBroker(t, nil)
	mk := &heldMarkers{release: make(chan struct{})}
	kb.b.setTxnMarkers(mk)
	kb.createTopic(t, "orders", 2)
	p := kb.initTxn(t, 4, "tx")
	pid, epoch := p.ProducerID, p.ProducerEpoch

	ar := kb.roundTrip(t, func() kmsg.Request {
		req := addPartitionsReq(3, "tx", pid, epoch, "orders", 0)
		rt := kmsg.NewAddPartitionsToTxnRequestTopic()
		rt.Topic, rt.Partitions = "nope", []int32{0}
		req.Topics = append(req.Topics, rt)
		return req
	}()).(*kmsg.AddPartitionsToTxnResponse)
	wantCode(t, "existing partition beside a missing one", ar.Topics[0].Partitions[0].ErrorCode, fkerr.OperationNotAttempted)
	wantCode(t, "missing partition", ar.Topics[1].Partitions[0].ErrorCode, fkerr.UnknownTopicOrPartition)
	for _, c := range []struct {
		v     int16
		pid   int64
		epoch int16
		want  *fkerr.Error
	}{
		{1, pid, epoch + 1, fkerr.InvalidProducerEpoch},
		{2, pid, epoch + 1, fkerr.ProducerFenced},
		{3, pid + 100, epoch, fkerr.InvalidProducerIDMapping},
	} {
		ar := kb.roundTrip(t, addPartitionsReq(c.v, "tx", c.pid, c.epoch, "orders", 0)).(*kmsg.AddPartitionsToTxnResponse)
		wantCode(t, fmt.Sprintf("v%d pid %d epoch %d", c.v, c.pid, c.epoch), ar.Topics[0].Partitions[0].ErrorCode, c.want)
	}
	for v := int16(0); v <= 3; v++ {
		ar := kb.roundTrip(t, addPartitionsReq(v, "tx", pid, epoch, "orders", 0, 1)).(*kmsg.AddPartitionsToTxnResponse)
		for _, rp := range ar.Topics[0].Partitions {
			if rp.ErrorCode != 0 {
				t.Fatalf("v%d: %+v", v, ar.Topics)
			}
		}
	}
	var offsets *kmsg.AddOffsetsToTxnResponse
	eventually.Nil(t, 60*time.Second, "AddOffsetsToTxn", func() error {
		req := kmsg.NewPtrAddOffsetsToTxnRequest()
		req.Version, req.TransactionalID, req.ProducerID, req.ProducerEpoch, req.Group = 3, "tx", pid, epoch, "g"
		offsets = kb.roundTrip(t, req).(*kmsg.AddOffsetsToTxnResponse)
		return fkerr.ErrorForCode(offsets.ErrorCode)
	})

	adm := kadm.NewClient(func() *kgo.Client {
		cl, err := kgo.NewClient(kgo.SeedBrokers(kb.kafka))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		return cl
	}())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	describe := func() kadm.DescribedTransaction {
		t.Helper()
		ds, err := adm.DescribeTransactions(ctx, "tx")
		if err != nil {
			t.Fatal(err)
		}
		d, ok := ds["tx"]
		if !ok || d.Err != nil {
			t.Fatalf("describe: %+v", ds)
		}
		return d
	}
	offsetsPart := group.PartitionFor("g", kb.b.offsetsPartitions())
	d := describe()
	if d.State != "Ongoing" || d.ProducerID != pid || d.ProducerEpoch != epoch || d.Coordinator != 1 || d.TimeoutMillis != 60_000 || d.StartTimestamp <= 0 ||
		!d.Topics.Lookup(group.OffsetsTopic, offsetsPart) || !d.Topics.Lookup("orders", 0) || !d.Topics.Lookup("orders", 1) || len(d.Topics) != 2 {
		t.Fatalf("ongoing: %+v", d)
	}
	er := kb.roundTrip(t, endTxnReq(3, "tx", pid, epoch, true)).(*kmsg.EndTxnResponse)
	if er.ErrorCode != 0 {
		t.Fatalf("EndTxn: %v", fkerr.ErrorForCode(er.ErrorCode))
	}
	wantCode(t, "commit again while completing", kb.roundTrip(t, endTxnReq(3, "tx", pid, epoch, true)).(*kmsg.EndTxnResponse).ErrorCode, fkerr.ConcurrentTransactions)
	wantCode(t, "abort of a prepared commit", kb.roundTrip(t, endTxnReq(3, "tx", pid, epoch, false)).(*kmsg.EndTxnResponse).ErrorCode, fkerr.InvalidTxnState)
	wantCode(t, "v1 with a stale epoch", kb.roundTrip(t, endTxnReq(1, "tx", pid, epoch+1, true)).(*kmsg.EndTxnResponse).ErrorCode, fkerr.InvalidProducerEpoch)
	if d := describe(); d.State != "PrepareCommit" {
		t.Fatalf("markers held: %+v", d)
	}
	lt, err := adm.ListTransactions(ctx, nil, []string{"PrepareCommit"})
	if err != nil || len(lt) != 1 || lt["tx"].ProducerID != pid || lt["tx"].Coordinator != 1 {
		t.Fatalf("list PrepareCommit: %+v %v", lt, err)
	}
	close(mk.release)
	eventually.True(t, 30*time.Second, "the transaction to complete", func() bool { return describe().State == "CompleteCommit" })
	ms := mk.markers()
	want := []txn.TopicPartition{{Topic: "orders", Partition: 0}, {Topic: "orders", Partition: 1}, {Topic: group.OffsetsTopic, Partition: offsetsPart}}
	if len(ms) != 1 || !ms[0].Commit || ms[0].ProducerID != pid || ms[0].ProducerEpoch != epoch || ms[0].CoordinatorEpoch <= 0 || !slices.Equal(ms[0].Partitions, want) {
		t.Fatalf("markers %+v, want %v", ms, want)
	}
	lt, err = adm.ListTransactions(ctx, []int64{pid}, nil)
	if err != nil || lt["tx"].State != "CompleteCommit" {
		t.Fatalf("list: %+v %v", lt, err)
	}
	ds, err := adm.DescribeTransactions(ctx, "nobody")
	if err == nil && ds["nobody"].Err == nil {
		t.Fatalf("describe nobody: %+v", ds)
	}
}

// TestKafkaMarkersRequest: the marker writer's WriteTxnMarkers v1, as a
// partition leader's listener receives it (producer id, epoch, outcome,
// coordinator epoch, the partitions by topic), and the per-partition codes
// of the answer as the coordinator reads them.
func TestKafkaMarkersRequest(t *testing.T) {
	srv := kafkawire.NewServer(kafkawire.Config{})
	var got *kmsg.WriteTxnMarkersRequest
	srv.Register(kmsg.WriteTxnMarkers.Int16(), 1, 1, func(_ context.Context, r *kafkawire.Request) kafkawire.Reply {
		got = r.Msg.(*kmsg.WriteTxnMarkersRequest)
		resp := got.ResponseKind().(*kmsg.WriteTxnMarkersResponse)
		for _, m := range got.Markers {
			rm := kmsg.NewWriteTxnMarkersResponseMarker()
			rm.ProducerID = m.ProducerID
			for _, tt := range m.Topics {
				rt := kmsg.NewWriteTxnMarkersResponseMarkerTopic()
				rt.Topic = tt.Topic
				for i, p := range tt.Partitions {
					rp := kmsg.NewWriteTxnMarkersResponseMarkerTopicPartition()
					rp.Partition = p
					if i == 1 {
						rp.ErrorCode = fkerr.NotLeaderForPartition.Code
					}
					rt.Partitions = append(rt.Partitions, rp)
				}
				rm.Topics = append(rm.Topics, rt)
			}
			resp.Markers = append(resp.Markers, rm)
		}
		return kafkawire.Respond(resp)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	req := kmsg.NewPtrWriteTxnMarkersRequest()
	req.Version = txnMarkersVersion
	mk := kmsg.NewWriteTxnMarkersRequestMarker()
	mk.ProducerID, mk.ProducerEpoch, mk.Committed, mk.CoordinatorEpoch = 42, 3, true, 9
	mt := kmsg.NewWriteTxnMarkersRequestMarkerTopic()
	mt.Topic, mt.Partitions = "orders", []int32{0, 1}
	mk.Topics = append(mk.Topics, mt)
	req.Markers = append(req.Markers, mk)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	raw, err := kafkaRoundTrip(ctx, ln.Addr().String(), req)
	if err != nil {
		t.Fatal(err)
	}
	if m := got.Markers[0]; m.ProducerID != 42 || m.ProducerEpoch != 3 || !m.Committed || m.CoordinatorEpoch != 9 || !slices.Equal(m.Topics[0].Partitions, []int32{0, 1}) {
		t.Fatalf("received %+v", got.Markers)
	}
	ps := raw.(*kmsg.WriteTxnMarkersResponse).Markers[0].Topics[0].Partitions
	if ps[0].ErrorCode != 0 || !kerr.Is(markerError(1, txn.TopicPartition{Topic: "orders", Partition: 1}, ps[1].ErrorCode), kerr.NotLeaderOrFollower) {
		t.Fatalf("answer %+v", ps)
	}
	if err := markerError(1, txn.TopicPartition{}, fkerr.InvalidProducerEpoch.Code); !kerr.Is(err, kerr.InvalidProducerEpoch) {
		t.Fatalf("INVALID_PRODUCER_EPOCH read as %v", err)
	}
	// A listener that does not serve the key closes the connection.
	srv2 := kafkawire.NewServer(kafkawire.Config{})
	ln2, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv2.Serve(ln2)
	t.Cleanup(func() { srv2.Close() })
	if _, err := kafkaRoundTrip(ctx, ln2.Addr().String(), req); err == nil {
		t.Fatal("an unserved WriteTxnMarkers answered")
	}
}
