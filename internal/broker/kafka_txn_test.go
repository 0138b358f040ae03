package broker

import (
	"context"
	"slices"
	"testing"
	"time"

	fkerr "github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tapes-dev/tapes/internal/eventually"
	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/group"
	"github.com/tapes-dev/tapes/internal/kerr"
	"github.com/tapes-dev/tapes/internal/recordbatch"
	"github.com/tapes-dev/tapes/internal/storage"
)

// TestKafkaTransactionsInThePartition over a real broker's Kafka listener:
// two idempotent producer ids from InitProducerId each produce a
// hand-built transactional batch around a plain one; read_committed Fetch
// stops at the first transaction's base (the LSO) and ListOffsets
// read_committed answers it; WriteTxnMarkers aborts one transaction and
// commits the other (and answers UNKNOWN_TOPIC_OR_PARTITION for a
// partition that does not exist); then a franz-go read_committed consumer
// reads only the committed records and the plain one, a read_uncommitted
// one all of them; read_committed Fetch names the aborted transaction; a
// marker of a fenced epoch is INVALID_PRODUCER_EPOCH.
func TestKafkaTransactionsInThePartition(t *testing.T) {
	kb := startKafkaBroker(t, nil)
	kb.createTopic(t, "txn", 1)

	initPID := func() (int64, int16) {
		req := kmsg.NewPtrInitProducerIDRequest()
		req.Version, req.TransactionTimeoutMillis = 4, 60000
		resp := kb.roundTrip(t, req).(*kmsg.InitProducerIDResponse)
		if resp.ErrorCode != 0 {
			t.Fatalf("InitProducerId: %s", codeName(resp.ErrorCode))
		}
		return resp.ProducerID, resp.ProducerEpoch
	}
	aborting, epochA := initPID()
	committing, epochB := initPID()

	produce := func(txnID *string, batch []byte) int64 {
		t.Helper()
		var p kmsg.ProduceResponseTopicPartition
		eventually.Nil(t, 60*time.Second, "a produce to txn-0", func() error {
			req := kmsg.NewPtrProduceRequest()
			req.Version, req.Acks, req.TimeoutMillis, req.TransactionID = 9, -1, 30000, txnID
			rt := kmsg.NewProduceRequestTopic()
			rt.Topic = "txn"
			rp := kmsg.NewProduceRequestTopicPartition()
			rp.Records = batch
			rt.Partitions = append(rt.Partitions, rp)
			req.Topics = append(req.Topics, rt)
			p = kb.roundTrip(t, req).(*kmsg.ProduceResponse).Topics[0].Partitions[0]
			return fkerr.ErrorForCode(p.ErrorCode)
		})
		return p.BaseOffset
	}
	recs := func(vals ...string) []storage.Record {
		var out []storage.Record
		for _, v := range vals {
			out = append(out, storage.Record{Timestamp: time.Now().UnixMilli(), Key: []byte("k"), Value: []byte(v)})
		}
		return out
	}
	if off := produce(kmsg.StringPtr("tx-a"), recordbatch.EncodeTransactional(recordbatch.Producer{ID: aborting, Epoch: epochA, BaseSequence: 0}, recs("a0", "a1", "a2"))); off != 0 {
		t.Fatalf("transactional batch at %d, want 0", off)
	}
	if off := produce(nil, recordbatch.Encode(recordbatch.NoProducer, recs("plain"))); off != 3 {
		t.Fatalf("plain batch at %d, want 3", off)
	}
	if off := produce(kmsg.StringPtr("tx-b"), recordbatch.EncodeTransactional(recordbatch.Producer{ID: committing, Epoch: epochB, BaseSequence: 0}, recs("b0", "b1"))); off != 4 {
		t.Fatalf("transactional batch at %d, want 4", off)
	}

	fetch := func(isolation int8) kmsg.FetchResponseTopicPartition {
		t.Helper()
		req := kmsg.NewPtrFetchRequest()
		req.Version, req.ReplicaID, req.MaxBytes, req.IsolationLevel, req.SessionEpoch = 11, -1, 1<<20, isolation, -1
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic = "txn"
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.FetchOffset, rp.PartitionMaxBytes, rp.CurrentLeaderEpoch, rp.LogStartOffset = 0, 1<<20, -1, -1
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		p := kb.roundTrip(t, req).(*kmsg.FetchResponse).Topics[0].Partitions[0]
		if p.ErrorCode != 0 {
			t.Fatalf("Fetch isolation %d: %s", isolation, codeName(p.ErrorCode))
		}
		return p
	}
	listLatest := func(isolation int8) int64 {
		t.Helper()
		req := kmsg.NewPtrListOffsetsRequest()
		req.Version, req.ReplicaID, req.IsolationLevel = 6, -1, isolation
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = "txn"
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition, rp.Timestamp, rp.CurrentLeaderEpoch = 0, -1, -1
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		p := kb.roundTrip(t, req).(*kmsg.ListOffsetsResponse).Topics[0].Partitions[0]
		if p.ErrorCode != 0 {
			t.Fatalf("ListOffsets: %s", codeName(p.ErrorCode))
		}
		return p.Offset
	}

	// Both transactions open: read_committed stops at the first one's base.
	if p := fetch(1); p.HighWatermark != 6 || p.LastStableOffset != 0 || countBatches(t, p.RecordBatches) != 0 || p.AbortedTransactions == nil {
		t.Fatalf("read_committed with open transactions: hw %d lso %d, %d batches, aborted %v", p.HighWatermark, p.LastStableOffset, countBatches(t, p.RecordBatches), p.AbortedTransactions)
	}
	if p := fetch(0); p.HighWatermark != 6 || p.LastStableOffset != 0 || countBatches(t, p.RecordBatches) != 3 || p.AbortedTransactions != nil {
		t.Fatalf("read_uncommitted with open transactions: hw %d lso %d, %d batches, aborted %v", p.HighWatermark, p.LastStableOffset, countBatches(t, p.RecordBatches), p.AbortedTransactions)
	}
	if got := listLatest(1); got != 0 {
		t.Fatalf("ListOffsets latest read_committed = %d, want the LSO 0", got)
	}
	if got := listLatest(0); got != 6 {
		t.Fatalf("ListOffsets latest read_uncommitted = %d, want 6", got)
	}

	markers := func(ms ...kmsg.WriteTxnMarkersRequestMarker) *kmsg.WriteTxnMarkersResponse {
		req := kmsg.NewPtrWriteTxnMarkersRequest()
		req.Version, req.Markers = 1, ms
		return kb.roundTrip(t, req).(*kmsg.WriteTxnMarkersResponse)
	}
	marker := func(id int64, epoch int16, commit bool, parts ...int32) kmsg.WriteTxnMarkersRequestMarker {
		m := kmsg.NewWriteTxnMarkersRequestMarker()
		m.ProducerID, m.ProducerEpoch, m.Committed, m.CoordinatorEpoch = id, epoch, commit, 0
		mt := kmsg.NewWriteTxnMarkersRequestMarkerTopic()
		mt.Topic, mt.Partitions = "txn", parts
		m.Topics = append(m.Topics, mt)
		return m
	}
	resp := markers(marker(aborting, epochA, false, 0, 7), marker(committing, epochB, true, 0))
	codes := func(resp *kmsg.WriteTxnMarkersResponse) [][]int16 {
		var out [][]int16
		for _, m := range resp.Markers {
			var cs []int16
			for _, mt := range m.Topics {
				for _, mp := range mt.Partitions {
					cs = append(cs, mp.ErrorCode)
				}
			}
			out = append(out, cs)
		}
		return out
	}
	if got := codes(resp); len(got) != 2 || !slices.Equal(got[0], []int16{0, fkerr.UnknownTopicOrPartition.Code}) || !slices.Equal(got[1], []int16{0}) ||
		resp.Markers[0].ProducerID != aborting || resp.Markers[1].ProducerID != committing {
		t.Fatalf("WriteTxnMarkers answered %v (%+v)", got, resp.Markers)
	}

	// Both markers committed: the LSO is the high watermark (two markers
	// after the six records), and read_committed names the aborted one.
	p := fetch(1)
	if p.HighWatermark != 8 || p.LastStableOffset != 8 || countBatches(t, p.RecordBatches) != 5 ||
		len(p.AbortedTransactions) != 1 || p.AbortedTransactions[0].ProducerID != aborting || p.AbortedTransactions[0].FirstOffset != 0 {
		t.Fatalf("read_committed after the markers: hw %d lso %d, %d batches, aborted %+v", p.HighWatermark, p.LastStableOffset, countBatches(t, p.RecordBatches), p.AbortedTransactions)
	}
	if got := listLatest(1); got != 8 {
		t.Fatalf("ListOffsets latest read_committed = %d, want 8", got)
	}

	consume := func(level kgo.IsolationLevel, want []string) {
		t.Helper()
		cl, err := kgo.NewClient(kgo.SeedBrokers(kb.kafka), kgo.ConsumeTopics("txn"), kgo.FetchIsolationLevel(level),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(500*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		var got []string
		var offsets []int64
		for len(got) < len(want) && ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			fs.EachError(func(_ string, _ int32, err error) {
				if ctx.Err() == nil {
					t.Logf("fetch error: %v", err)
				}
			})
			fs.EachRecord(func(r *kgo.Record) {
				got = append(got, string(r.Value))
				offsets = append(offsets, r.Offset)
			})
		}
		if !slices.Equal(got, want) {
			t.Fatalf("franz-go consumer (%v) read %q at %v, want %q", level, got, offsets, want)
		}
	}
	consume(kgo.ReadCommitted(), []string{"plain", "b0", "b1"})
	consume(kgo.ReadUncommitted(), []string{"a0", "a1", "a2", "plain", "b0", "b1"})

	// gRPC's Fetch: read_committed drops the aborted records, neither
	// level returns a control record, next_offset goes past the markers.
	grpcFetch := func(offset int64, isolation int32) (*tapesv1.FetchResponse, error) {
		return kb.bc.Fetch(context.Background(), &tapesv1.FetchRequest{Topic: "txn", Offset: offset, MaxBytes: 1 << 20, IsolationLevel: isolation})
	}
	for _, c := range []struct {
		isolation int32
		want      []string
	}{{1, []string{"plain", "b0", "b1"}}, {0, []string{"a0", "a1", "a2", "plain", "b0", "b1"}}} {
		g, err := grpcFetch(0, c.isolation)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range g.Records {
			got = append(got, string(r.Value))
		}
		if !slices.Equal(got, c.want) || g.LastStableOffset != 8 || g.NextOffset != 8 || g.HighWatermark != 8 {
			t.Fatalf("gRPC Fetch isolation %d: %q, lso %d next %d hw %d; want %q, 8, 8, 8", c.isolation, got, g.LastStableOffset, g.NextOffset, g.HighWatermark, c.want)
		}
	}
	if g, err := grpcFetch(6, 0); err != nil || len(g.Records) != 0 || g.NextOffset != 8 {
		t.Fatalf("gRPC Fetch at the markers: %v, %v", g, err)
	}
	if _, err := grpcFetch(0, 2); !kerr.Is(kerr.FromStatus(err), kerr.InvalidRequest) {
		t.Fatalf("gRPC Fetch isolation 2: %v", err)
	}

	// The group coordinator's loader reads a __consumer_offsets partition
	// through offsetsLog: a marker written there (by WriteTxnMarkers) is
	// read as that marker, not as offsets, and the read goes past it.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := kb.b.ensureOffsetsTopic(ctx); err != nil {
		t.Fatal(err)
	}
	eventually.Nil(t, 60*time.Second, "a marker in __consumer_offsets-0", func() error {
		m := marker(committing, epochB, true, 0)
		m.Topics[0].Topic = group.OffsetsTopic
		return fkerr.ErrorForCode(codes(markers(m))[0][0])
	})
	r, err := (&api{b: kb.b}).leaderReplica(group.OffsetsTopic, 0)
	if err != nil {
		t.Fatal(err)
	}
	if recs, next, hw, err := (offsetsLog{r}).Read(ctx, 0); err != nil || len(recs) != 1 || recs[0].Marker == nil || !recs[0].Marker.Commit ||
		recs[0].Marker.ProducerID != committing || recs[0].Key != nil || next != hw || hw < 1 {
		t.Fatalf("the loader's read of a partition holding a marker: %d records, next %d, hw %d, %v", len(recs), next, hw, err)
	}

	// A marker of a newer epoch fences epoch 0 (written though nothing is
	// open); one of epoch 0 is then refused.
	if got := codes(markers(marker(aborting, epochA+1, false, 0))); !slices.Equal(got[0], []int16{0}) {
		t.Fatalf("marker of epoch %d: %v", epochA+1, got)
	}
	if got := codes(markers(marker(aborting, epochA, true, 0))); !slices.Equal(got[0], []int16{fkerr.InvalidProducerEpoch.Code}) {
		t.Fatalf("marker of the fenced epoch %d: %v", epochA, got)
	}

	// A coordinator of epoch 3 writes a marker; one of epoch 2 (deposed,
	// still completing) is then TRANSACTION_COORDINATOR_FENCED, as
	// Kafka's partition answers it.
	m := marker(aborting, epochA+1, false, 0)
	m.CoordinatorEpoch = 3
	if got := codes(markers(m)); !slices.Equal(got[0], []int16{0}) {
		t.Fatalf("marker of coordinator epoch 3: %v", got)
	}
	m.CoordinatorEpoch = 2
	if got := codes(markers(m)); !slices.Equal(got[0], []int16{fkerr.TransactionCoordinatorFenced.Code}) {
		t.Fatalf("marker of coordinator epoch 2 after 3: %v", got)
	}
}
