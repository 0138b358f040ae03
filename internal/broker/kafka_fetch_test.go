package broker

import (
	"fmt"
	"testing"

	fkerr "github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tapes-dev/tapes/internal/kerr"
	"github.com/tapes-dev/tapes/internal/replication"
	"github.com/tapes-dev/tapes/internal/storage"
)

// fakeRead answers each partition from a table and records the limits it
// was read with.
type fakeRead struct {
	results map[string]func(p *fetchPart) (replication.BatchFetch, error)
	calls   []string
}

func (f *fakeRead) read(p *fetchPart, maxBytes int, minOne bool) (replication.BatchFetch, error) {
	key := fmt.Sprintf("%s-%d", p.topic, p.partition)
	f.calls = append(f.calls, fmt.Sprintf("%s max=%d minOne=%v", key, maxBytes, minOne))
	res, err := f.results[key](p)
	if err == nil {
		// As storage.ReadBatches: the first batch however large when minOne.
		var keep []storage.StoredBatch
		total := 0
		for _, sb := range res.Batches {
			if total+len(sb.Batch) > maxBytes && (len(keep) > 0 || !minOne) {
				break
			}
			keep = append(keep, sb)
			total += len(sb.Batch)
		}
		res.Batches = keep
	}
	return res, err
}

// storedBatches is n stored batches of one record of size bytes each, from
// offset base.
func storedBatches(base int64, n, size int) []storage.StoredBatch {
	var out []storage.StoredBatch
	for i := range n {
		b := storage.EncodeBatch([]storage.Record{{Timestamp: 1000 + int64(i), Key: []byte("k"), Value: make([]byte, size)}})
		out = append(out, storage.StoredBatch{BaseOffset: base + int64(i), Batch: b})
	}
	return out
}

func fetchReq(version int16, maxBytes int32, parts ...string) *kmsg.FetchRequest {
	req := kmsg.NewPtrFetchRequest()
	req.Version = version
	req.MaxBytes = maxBytes
	req.MinBytes = 1
	for _, tp := range parts {
		var topic string
		var partition int32
		fmt.Sscanf(tp, "%s %d", &topic, &partition)
		if n := len(req.Topics); n == 0 || req.Topics[n-1].Topic != topic {
			rt := kmsg.NewFetchRequestTopic()
			rt.Topic = topic
			req.Topics = append(req.Topics, rt)
		}
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition = partition
		rp.FetchOffset = 10
		rp.PartitionMaxBytes = 1 << 20
		rp.CurrentLeaderEpoch = -1
		req.Topics[len(req.Topics)-1].Partitions = append(req.Topics[len(req.Topics)-1].Partitions, rp)
	}
	return req
}

// partsOf resolves req's partitions, with lookup errors by "topic-partition".
func partsOf(req *kmsg.FetchRequest, lookup map[string]error) []fetchPart {
	var parts []fetchPart
	for _, t := range req.Topics {
		for _, p := range t.Partitions {
			parts = append(parts, fetchPart{topic: t.Topic, partition: p.Partition, offset: p.FetchOffset,
				maxBytes: int(p.PartitionMaxBytes), epoch: p.CurrentLeaderEpoch, isolation: kafkaIsolation(req.IsolationLevel),
				lookupErr: lookup[fmt.Sprintf("%s-%d", t.Topic, p.Partition)]})
		}
	}
	return parts
}

func ok(hw, start int64, term uint64, bs []storage.StoredBatch) func(*fetchPart) (replication.BatchFetch, error) {
	return func(*fetchPart) (replication.BatchFetch, error) {
		return replication.BatchFetch{Batches: bs, HighWatermark: hw, LastStable: hw, LogStart: start, Term: term}, nil
	}
}

func fails(err error) func(*fetchPart) (replication.BatchFetch, error) {
	return func(*fetchPart) (replication.BatchFetch, error) { return replication.BatchFetch{}, err }
}

// TestKafkaFetchMapping: each partition's answer, in request order, across
// topics: records as Kafka batches, high watermark = last stable offset,
// log start, no preferred replica; errors with offsets -1 and zero-length
// (not null) records; the current leader where the error knows it; a
// just-elected leader as NOT_LEADER_OR_FOLLOWER.
func TestKafkaFetchMapping(t *testing.T) {
	req := fetchReq(12, 1<<20, "a 0", "a 1", "a 2", "b 0", "b 1", "b 2")
	lookup := map[string]error{
		"a-2": kerr.New(kerr.UnknownTopicOrPartition, "partition 2 of topic %q does not exist", "a"),
		"b-2": kerr.NotLeader(3, "h3:1", 9, "no replica here"),
	}
	parts := partsOf(req, lookup)
	f := &fakeRead{results: map[string]func(*fetchPart) (replication.BatchFetch, error){
		"a-0": ok(12, 2, 7, storedBatches(9, 3, 10)),
		"a-1": ok(10, 0, 7, nil),
		"b-0": fails(kerr.OutOfRange(10, 0, 5)),
		"b-1": fails(kerr.New(kerr.LeaderNotAvailable, "just elected")),
	}}
	a := fetchRound(req, parts, f.read)
	if a.failed != true || a.resp.SessionID != 0 || len(a.resp.Topics) != 2 {
		t.Fatalf("answer %+v", a)
	}
	want := []struct {
		code          *fkerr.Error
		hw, lso, ls   int64
		leader, epoch int32
		batches       int
	}{
		{nil, 12, 12, 2, -1, -1, 3},
		{nil, 10, 10, 0, -1, -1, 0},
		{fkerr.UnknownTopicOrPartition, -1, -1, -1, -1, -1, 0},
		{fkerr.OffsetOutOfRange, -1, -1, -1, -1, -1, 0},
		{fkerr.NotLeaderForPartition, -1, -1, -1, -1, -1, 0},
		{fkerr.NotLeaderForPartition, -1, -1, -1, 3, 9, 0},
	}
	i := 0
	for ti, rt := range a.resp.Topics {
		if rt.Topic != req.Topics[ti].Topic {
			t.Fatalf("topic %d is %q", ti, rt.Topic)
		}
		for _, rp := range rt.Partitions {
			w := want[i]
			if rp.Partition != int32(i%3) || rp.ErrorCode != codeOf(w.code) ||
				rp.HighWatermark != w.hw || rp.LastStableOffset != w.lso || rp.LogStartOffset != w.ls ||
				rp.PreferredReadReplica != -1 || rp.AbortedTransactions != nil ||
				rp.CurrentLeader.LeaderID != w.leader || rp.CurrentLeader.LeaderEpoch != w.epoch {
				t.Errorf("partition %d: %+v, want %+v", i, rp, w)
			}
			if rp.RecordBatches == nil {
				t.Errorf("partition %d: null records, want zero-length", i)
			}
			if got := countBatches(t, rp.RecordBatches); got != w.batches {
				t.Errorf("partition %d: %d batches, want %d", i, got, w.batches)
			}
			i++
		}
	}
	if a.codes[3] != kerr.OffsetOutOfRange || a.codes[4] != kerr.NotLeaderOrFollower || a.codes[0] != "" {
		t.Errorf("codes %v", a.codes)
	}
	// read_committed: the partition's last stable offset and its aborted
	// transactions (an empty list when none), as the replica read them.
	req.IsolationLevel = 1
	parts = partsOf(req, lookup)
	f.results["a-0"] = func(p *fetchPart) (replication.BatchFetch, error) {
		if p.isolation != replication.ReadCommitted {
			t.Errorf("read with isolation %d", p.isolation)
		}
		return replication.BatchFetch{Batches: storedBatches(9, 3, 10), HighWatermark: 20, LastStable: 12, LogStart: 2, Term: 7,
			Aborted: []replication.AbortedTxn{{ProducerID: 5, FirstOffset: 9, LastOffset: 11}}}, nil
	}
	f.results["a-1"] = func(*fetchPart) (replication.BatchFetch, error) {
		return replication.BatchFetch{HighWatermark: 10, LastStable: 10, Aborted: []replication.AbortedTxn{}}, nil
	}
	a = fetchRound(req, parts, f.read)
	rp := a.resp.Topics[0].Partitions[0]
	if rp.HighWatermark != 20 || rp.LastStableOffset != 12 || len(rp.AbortedTransactions) != 1 ||
		rp.AbortedTransactions[0].ProducerID != 5 || rp.AbortedTransactions[0].FirstOffset != 9 {
		t.Errorf("read_committed: %+v", rp)
	}
	if rp := a.resp.Topics[0].Partitions[1]; rp.AbortedTransactions == nil || len(rp.AbortedTransactions) != 0 {
		t.Errorf("read_committed: aborted transactions %v, want empty", rp.AbortedTransactions)
	}
}

// codeOf is e's code, 0 for none.
func codeOf(e *fkerr.Error) int16 {
	if e == nil {
		return 0
	}
	return e.Code
}

// countBatches decodes Kafka record batches with kmsg.
func countBatches(t *testing.T, b []byte) int {
	t.Helper()
	n := 0
	for len(b) > 0 {
		var rb kmsg.RecordBatch
		if err := rb.ReadFrom(b); err != nil {
			t.Fatalf("batch %d: %v", n, err)
		}
		b = b[12+int(rb.Length):]
		n++
	}
	return n
}

// TestKafkaFetchBytes: max_bytes bounds all partitions, partition_max_bytes
// each; the first batch of the first partition with records comes whole
// (KIP-74), later partitions get the room left, and answer their high
// watermark even with none.
func TestKafkaFetchBytes(t *testing.T) {
	one := storedBatches(10, 1, 100)
	var kb []byte
	kb, _ = one[0].Batch.AppendKafka(kb, 10)
	k := len(kb) // one batch as Kafka's
	for _, tc := range []struct {
		name        string
		maxBytes    int32
		partMax     [3]int32
		want        [3]int // batches per partition
		wantCalls   []string
		emptyFirstP bool
	}{
		{"room for all", 1 << 20, [3]int32{1 << 20, 1 << 20, 1 << 20}, [3]int{4, 4, 4}, nil, false},
		{"max_bytes smaller than one batch", int32(k - 1), [3]int32{1 << 20, 1 << 20, 1 << 20}, [3]int{1, 0, 0},
			[]string{fmt.Sprintf("t-0 max=%d minOne=true", k-1), "t-1 max=0 minOne=false", "t-2 max=0 minOne=false"}, false},
		{"max_bytes for five", int32(5 * k), [3]int32{1 << 20, 1 << 20, 1 << 20}, [3]int{4, 1, 0}, nil, false},
		{"partition_max_bytes for two", 1 << 20, [3]int32{int32(2 * k), int32(2*k + 1), int32(2*k - 1)}, [3]int{2, 2, 1}, nil, false},
		{"first partition empty: the second gets the whole first batch", int32(k - 1), [3]int32{1 << 20, 1 << 20, 1 << 20}, [3]int{0, 1, 0}, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := fetchReq(11, tc.maxBytes, "t 0", "t 1", "t 2")
			for i := range 3 {
				req.Topics[0].Partitions[i].PartitionMaxBytes = tc.partMax[i]
			}
			first := storedBatches(10, 4, 100)
			if tc.emptyFirstP {
				first = nil
			}
			f := &fakeRead{results: map[string]func(*fetchPart) (replication.BatchFetch, error){
				"t-0": ok(14, 0, 1, first),
				"t-1": ok(14, 0, 1, storedBatches(10, 4, 100)),
				"t-2": ok(14, 0, 1, storedBatches(10, 4, 100)),
			}}
			a := fetchRound(req, partsOf(req, nil), f.read)
			total := 0
			for i, rp := range a.resp.Topics[0].Partitions {
				if got := countBatches(t, rp.RecordBatches); got != tc.want[i] {
					t.Errorf("partition %d: %d batches, want %d (calls %v)", i, got, tc.want[i], f.calls)
				}
				if rp.HighWatermark != 14 || rp.ErrorCode != 0 {
					t.Errorf("partition %d: %+v", i, rp)
				}
				total += len(rp.RecordBatches)
			}
			if total != a.bytes {
				t.Errorf("bytes %d, records hold %d", a.bytes, total)
			}
			if tc.wantCalls != nil && fmt.Sprint(f.calls) != fmt.Sprint(tc.wantCalls) {
				t.Errorf("reads %v, want %v", f.calls, tc.wantCalls)
			}
		})
	}
}

// TestKafkaFetchLeaderEpoch: current_leader_epoch against the Raft term, on
// the leader and on a replica that is not.
func TestKafkaFetchLeaderEpoch(t *testing.T) {
	follower := kerr.NotLeader(2, "h2:1", 5, "broker 1 is not the leader")
	for _, tc := range []struct {
		epoch   int32
		res     func(*fetchPart) (replication.BatchFetch, error)
		want    *fkerr.Error
		current int32 // current leader id answered
	}{
		{-1, ok(3, 0, 5, nil), nil, -1},
		{5, ok(3, 0, 5, nil), nil, -1},
		{4, ok(3, 0, 5, nil), fkerr.FencedLeaderEpoch, -1},
		{6, ok(3, 0, 5, nil), fkerr.UnknownLeaderEpoch, -1},
		{-1, fails(follower), fkerr.NotLeaderForPartition, 2},
		{5, fails(follower), fkerr.NotLeaderForPartition, 2},
		{4, fails(follower), fkerr.FencedLeaderEpoch, 2},
		{6, fails(follower), fkerr.UnknownLeaderEpoch, -1},
		{6, fails(kerr.OutOfRange(10, 0, 3)), fkerr.OffsetOutOfRange, -1},
	} {
		req := fetchReq(12, 1<<20, "t 0")
		req.Topics[0].Partitions[0].CurrentLeaderEpoch = tc.epoch
		f := &fakeRead{results: map[string]func(*fetchPart) (replication.BatchFetch, error){"t-0": tc.res}}
		rp := fetchRound(req, partsOf(req, nil), f.read).resp.Topics[0].Partitions[0]
		if rp.ErrorCode != codeOf(tc.want) || rp.CurrentLeader.LeaderID != tc.current {
			t.Errorf("epoch %d: %v, current leader %d; want %v, %d", tc.epoch, fkerr.ErrorForCode(rp.ErrorCode), rp.CurrentLeader.LeaderID, tc.want, tc.current)
		}
	}
	// Without a local replica nothing is compared (Kafka neither).
	req := fetchReq(12, 1<<20, "t 0")
	req.Topics[0].Partitions[0].CurrentLeaderEpoch = 1
	parts := partsOf(req, map[string]error{"t-0": kerr.NotLeader(2, "h2:1", 5, "no replica")})
	if rp := fetchRound(req, parts, nil).resp.Topics[0].Partitions[0]; fkerr.ErrorForCode(rp.ErrorCode) != fkerr.NotLeaderForPartition {
		t.Errorf("no replica: %v", fkerr.ErrorForCode(rp.ErrorCode))
	}
}

// TestKafkaFetchEncodesEveryVersion: the answer encodes at v4-v12 and
// decodes back with zero-length records where there are none.
func TestKafkaFetchEncodesEveryVersion(t *testing.T) {
	for v := int16(kafkaFetchMin); v <= kafkaFetchMax; v++ {
		req := fetchReq(v, 1<<20, "t 0", "t 1")
		f := &fakeRead{results: map[string]func(*fetchPart) (replication.BatchFetch, error){
			"t-0": ok(12, 2, 7, storedBatches(9, 2, 10)),
			"t-1": ok(3, 3, 7, nil),
		}}
		resp := fetchRound(req, partsOf(req, nil), f.read).resp
		resp.Version = v
		back := kmsg.NewPtrFetchResponse()
		back.Version = v
		if err := back.ReadFrom(resp.AppendTo(nil)); err != nil {
			t.Fatalf("v%d: %v", v, err)
		}
		p0, p1 := back.Topics[0].Partitions[0], back.Topics[0].Partitions[1]
		if countBatches(t, p0.RecordBatches) != 2 || p0.HighWatermark != 12 || p0.LogStartOffset != 2 && v >= 5 {
			t.Errorf("v%d: partition 0 %+v", v, p0)
		}
		if p1.RecordBatches == nil || len(p1.RecordBatches) != 0 {
			t.Errorf("v%d: empty partition's records %v, want zero-length", v, p1.RecordBatches)
		}
	}
}

// TestKafkaFetchSessions: an incremental fetch (a session epoch other than
// 0 and -1, v7+) is FETCH_SESSION_ID_NOT_FOUND: this broker keeps no
// sessions; a full one (epoch 0: create a session; -1: none) is served
// sessionless, and so is every fetch before v7.
func TestKafkaFetchSessions(t *testing.T) {
	for _, tc := range []struct {
		version     int16
		id, epoch   int32
		incremental bool
	}{
		{12, 77, 3, true},
		{7, 0, 1, true},
		{12, 0, 0, false},
		{12, 0, -1, false},
		{12, 77, -1, false},
		{12, 77, 0, false},
		{6, 0, 5, false},
	} {
		req := fetchReq(tc.version, 1<<20, "t 0")
		req.SessionID, req.SessionEpoch = tc.id, tc.epoch
		resp := fetchSessionError(req)
		if !tc.incremental {
			if resp != nil {
				t.Errorf("%+v: answered %+v", tc, resp)
			}
			continue
		}
		if resp == nil || fkerr.ErrorForCode(resp.ErrorCode) != fkerr.FetchSessionIDNotFound || resp.SessionID != 0 || len(resp.Topics) != 0 {
			t.Errorf("%+v: answered %+v", tc, resp)
		}
	}
}
