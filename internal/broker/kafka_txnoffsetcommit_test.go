package broker

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	fkerr "github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tapes-dev/tapes/internal/eventually"
	"github.com/tapes-dev/tapes/internal/group"
	"github.com/tapes-dev/tapes/internal/kafkawire"
	"github.com/tapes-dev/tapes/internal/metadata"
	"github.com/tapes-dev/tapes/internal/raftlog"
	"github.com/tapes-dev/tapes/internal/raftnet"
	"github.com/tapes-dev/tapes/internal/recordbatch"
	"github.com/tapes-dev/tapes/internal/replication"
	"github.com/tapes-dev/tapes/internal/storage"
)

// txnCommitReq is a TxnOffsetCommit of producer pid (epoch 0) for group at
// the offsets given per topic (partition i at offsets[i]).
func txnCommitReq(group string, pid int64, member string, gen int32, offsets map[string][]int64) *kmsg.TxnOffsetCommitRequest {
	req := kmsg.NewPtrTxnOffsetCommitRequest()
	req.TransactionalID, req.Group, req.ProducerID, req.Generation, req.MemberID = fmt.Sprint("tx-", pid), group, pid, gen, member
	for _, topic := range slices.Sorted(maps.Keys(offsets)) {
		kt := kmsg.NewTxnOffsetCommitRequestTopic()
		kt.Topic = topic
		for p, o := range offsets[topic] {
			kp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
			kp.Partition, kp.Offset = int32(p), o
			kt.Partitions = append(kt.Partitions, kp)
		}
		req.Topics = append(req.Topics, kt)
	}
	return req
}

func txnCommitCodes(resp *kmsg.TxnOffsetCommitResponse) []error {
	var out []error
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			out = append(out, fkerr.ErrorForCode(p.ErrorCode))
		}
	}
	return out
}

// fetchStable fetches group's orders-0 with OffsetFetch v (7 or later),
// require_stable as given: the partition's offset and error.
func (k *kconn) fetchStable(group string, v int16, requireStable bool) (int64, error) {
	k.t.Helper()
	req := kmsg.NewPtrOffsetFetchRequest()
	req.RequireStable = requireStable
	if v >= 8 {
		g := kmsg.NewOffsetFetchRequestGroup()
		g.Group = group
		g.Topics = []kmsg.OffsetFetchRequestGroupTopic{{Topic: "orders", Partitions: []int32{0}}}
		req.Groups = append(req.Groups, g)
		resp := k.do(req, v).(*kmsg.OffsetFetchResponse)
		if len(resp.Groups) != 1 || resp.Groups[0].ErrorCode != 0 || len(resp.Groups[0].Topics) != 1 {
			k.t.Fatalf("OffsetFetch v%d: %+v", v, resp)
		}
		p := resp.Groups[0].Topics[0].Partitions[0]
		return p.Offset, fkerr.ErrorForCode(p.ErrorCode)
	}
	req.Group = group
	req.Topics = []kmsg.OffsetFetchRequestTopic{{Topic: "orders", Partitions: []int32{0}}}
	resp := k.do(req, v).(*kmsg.OffsetFetchResponse)
	if resp.ErrorCode != 0 || len(resp.Topics) != 1 {
		k.t.Fatalf("OffsetFetch v%d: %+v", v, resp)
	}
	p := resp.Topics[0].Partitions[0]
	return p.Offset, fkerr.ErrorForCode(p.ErrorCode)
}

// TestKafkaTxnOffsetCommit: every version of TxnOffsetCommit is answered
// per partition (UNKNOWN_TOPIC_OR_PARTITION, NOT_COORDINATOR,
// COORDINATOR_LOAD_IN_PROGRESS as OffsetCommit); v3's group metadata
// fences (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID) and v0-v2 carry none; the
// pending commit makes OffsetFetch with require_stable answer
// UNSTABLE_OFFSET_COMMIT, without it the offset committed before.
func TestKafkaTxnOffsetCommit(t *testing.T) {
	f := newGroupsFixture(t)
	c := f.dial()
	if err := commitCodes(c.do(commitReq(f.here, "", -1, map[string][]int64{"orders": {5}}), 9).(*kmsg.OffsetCommitResponse))[0]; err != nil {
		t.Fatalf("plain commit: %v", err)
	}
	for v := int16(0); v <= 3; v++ {
		resp := c.do(txnCommitReq(f.here, 7, "", -1, map[string][]int64{"orders": {10 + int64(v)}, "nope": {1}}), v).(*kmsg.TxnOffsetCommitResponse)
		if got := txnCommitCodes(resp); !slices.Equal(got, []error{fkerr.UnknownTopicOrPartition, nil}) {
			t.Fatalf("TxnOffsetCommit v%d: %v", v, got)
		}
		for g, want := range map[string]error{f.elsewhere: fkerr.NotCoordinator, f.loading: fkerr.CoordinatorLoadInProgress} {
			resp := c.do(txnCommitReq(g, 7, "", -1, map[string][]int64{"orders": {1}}), v).(*kmsg.TxnOffsetCommitResponse)
			if got := txnCommitCodes(resp); !slices.Equal(got, []error{want}) {
				t.Fatalf("TxnOffsetCommit v%d of group %s: %v, want %v", v, g, got, want)
			}
		}
	}
	for _, v := range []int16{7, 8, 9} {
		if o, err := c.fetchStable(f.here, v, true); o != -1 || err != fkerr.UnstableOffsetCommit {
			t.Fatalf("OffsetFetch v%d require_stable: %d %v; want -1 UNSTABLE_OFFSET_COMMIT", v, o, err)
		}
		if o, err := c.fetchStable(f.here, v, false); o != 5 || err != nil {
			t.Fatalf("OffsetFetch v%d: %d %v; want the committed 5", v, o, err)
		}
	}

	// v3's group metadata fences; v2's (none sent) does not.
	g := onPartition0("member-group")
	j := c.join(g, "", []byte("m"), 9)
	wantCode(t, "sync", c.sync(g, j.MemberID, j.Generation, map[string][]byte{j.MemberID: []byte("x")}, 5).ErrorCode, nil)
	for _, tc := range []struct {
		member string
		gen    int32
		v      int16
		want   error
	}{
		{j.MemberID, j.Generation - 1, 3, fkerr.IllegalGeneration},
		{"nobody", j.Generation, 3, fkerr.UnknownMemberID},
		{j.MemberID, j.Generation, 3, nil},
		{"nobody", j.Generation - 1, 2, nil}, // not sent before v3
	} {
		resp := c.do(txnCommitReq(g, 8, tc.member, tc.gen, map[string][]int64{"orders": {1}}), tc.v).(*kmsg.TxnOffsetCommitResponse)
		if got := txnCommitCodes(resp); !slices.Equal(got, []error{tc.want}) {
			t.Fatalf("TxnOffsetCommit v%d member %q generation %d: %v, want %v", tc.v, tc.member, tc.gen, got, tc.want)
		}
	}
	unknown := onPartition0("no-such-group")
	resp := c.do(txnCommitReq(unknown, 8, "", 3, map[string][]int64{"orders": {1}}), 3).(*kmsg.TxnOffsetCommitResponse)
	if got := txnCommitCodes(resp); !slices.Equal(got, []error{fkerr.IllegalGeneration}) {
		t.Fatalf("TxnOffsetCommit v3 of an unknown group with a generation: %v", got)
	}
}

// openSoloOffsets opens a one-replica __consumer_offsets-0 in dir, led
// here once it returns.
func openSoloOffsets(t *testing.T, dir string) *replication.Replica {
	t.Helper()
	quiet := slog.New(slog.DiscardHandler)
	mux, err := raftnet.NewMux(raftnet.Config{LocalID: replication.ServerID(1), Logger: quiet,
		Resolve:    func(a raft.ServerAddress) (string, error) { return "", fmt.Errorf("no peer %s", a) },
		RPCTimeout: time.Second, HeartbeatTimeout: time.Second, SnapshotTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mux.Close() })
	trans, err := mux.Group(group.OffsetsTopic + "-0@1")
	if err != nil {
		t.Fatal(err)
	}
	wal, err := raftlog.Open(dir+"/wal", raftlog.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { wal.Close() })
	tc := metadata.DefaultTopicConfig()
	tc.MinInsyncReplicas = 1
	r, err := replication.Open(replication.Config{Topic: group.OffsetsTopic, TopicID: 1, Dir: dir + "/replica", LocalID: 1,
		Replicas: []metadata.BrokerID{1}, TopicConfig: tc, Raft: replication.DefaultRaftTimings(), ReplicaLagTimeMax: 10 * time.Second,
		RetentionCheckInterval: time.Hour, Transport: trans, Logger: quiet, RaftLog: wal, NewRaftLog: replication.RaftLogWAL})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	eventually.True(t, 30*time.Second, "the replica to lead", func() bool {
		r.CheckLeadership()
		return r.ReadyTerm() != 0
	})
	return r
}

// appendMarker appends the seq-th (from 0) transaction marker of producer
// pid to r as the partition leader's WriteTxnMarkers writes it: a Kafka v2
// control batch (attributes transactional and control) with the
// producer's id and epoch and one record keyed version 0, type 1 (commit)
// or 0 (abort). Kafka's markers have base sequence -1; the replication
// layer before transactions (branch txnpart) checks a control batch's
// sequence as an idempotent batch's and would take a second marker of -1
// for a duplicate of the first, so this one numbers them.
func appendMarker(t *testing.T, r *replication.Replica, pid int64, seq int32, commit bool) {
	t.Helper()
	key := []byte{0, 0, 0, 0}
	if commit {
		key[3] = 1
	}
	kb := recordbatch.Encode(recordbatch.Producer{ID: pid, BaseSequence: seq},
		[]recordbatch.Record{{Timestamp: time.Now().UnixMilli(), Key: key, Value: []byte{0, 0, 0, 0, 0, 0}}})
	binary.BigEndian.PutUint16(kb[21:], 0x30) // Kafka's attributes: transactional | control
	recordbatch.Seal(kb)
	b, err := storage.WrapKafka(kb)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := r.Produce(ctx, replication.AcksAll, b); err != nil {
		t.Fatalf("appending the marker: %v", err)
	}
}

// TestKafkaTxnOffsetCommitOverAReplica: over a real replica of
// __consumer_offsets (offsetsLog, reading batches), a pending
// transactional commit answers UNSTABLE_OFFSET_COMMIT under require_stable
// and the old offset without; a commit marker appended to the partition
// makes it the committed offset, an abort marker leaves the offset; a new
// coordinator loading the partition rebuilds both outcomes and keeps a
// commit without marker pending.
func TestKafkaTxnOffsetCommitOverAReplica(t *testing.T) {
	r := openSoloOffsets(t, t.TempDir())
	serve := func(t *testing.T) *kconn {
		coord, err := group.New(group.Config{BrokerID: 1, Partitions: func() int32 { return 1 },
			Open:              func(int32) group.Log { return offsetsLog{r} },
			MinSessionTimeout: time.Second, MaxSessionTimeout: time.Minute, Tick: 20 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		go coord.Run(ctx)
		srv := kafkawire.NewServer(kafkawire.Config{})
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		k := &kafkaGroups{coord: coord, log: slog.New(slog.DiscardHandler), notReady: func() string { return "" },
			partitionExists: func(topic string, p int32) bool { return topic == "orders" && p == 0 }}
		k.register(srv)
		k.registerTxnOffsetCommit(srv)
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Close(); cancel() })
		eventually.Nil(t, 10*time.Second, "the partition loaded", func() error { return coord.Check("g") })
		f := &groupsFixture{t: t, addr: ln.Addr().String()}
		return f.dial()
	}
	c := serve(t)
	txn := func(c *kconn, pid, offset int64) {
		t.Helper()
		resp := c.do(txnCommitReq("g", pid, "", -1, map[string][]int64{"orders": {offset}}), 3).(*kmsg.TxnOffsetCommitResponse)
		if got := txnCommitCodes(resp); !slices.Equal(got, []error{nil}) {
			t.Fatalf("TxnOffsetCommit of producer %d: %v", pid, got)
		}
	}
	stableAt := func(c *kconn, want int64) {
		t.Helper()
		eventually.Nil(t, 20*time.Second, fmt.Sprintf("orders-0 stable at %d", want), func() error {
			if o, err := c.fetchStable("g", 8, true); err != nil || o != want {
				return fmt.Errorf("offset %d, %v", o, err)
			}
			return nil
		})
	}
	if err := commitCodes(c.do(commitReq("g", "", -1, map[string][]int64{"orders": {5}}), 9).(*kmsg.OffsetCommitResponse))[0]; err != nil {
		t.Fatalf("plain commit: %v", err)
	}
	txn(c, 7, 10)
	if o, err := c.fetchStable("g", 7, true); o != -1 || err != fkerr.UnstableOffsetCommit {
		t.Fatalf("require_stable with a pending commit: %d %v", o, err)
	}
	if o, err := c.fetchStable("g", 7, false); o != 5 || err != nil {
		t.Fatalf("without require_stable: %d %v; want 5", o, err)
	}
	appendMarker(t, r, 7, 0, true)
	stableAt(c, 10)
	txn(c, 7, 20)
	appendMarker(t, r, 7, 1, false)
	stableAt(c, 10)
	txn(c, 8, 30) // left pending

	// A coordinator loading the partition: 10 committed, 30 pending,
	// completed by its marker.
	c2 := serve(t)
	if o, err := c2.fetchStable("g", 7, true); o != -1 || err != fkerr.UnstableOffsetCommit {
		t.Fatalf("after load, require_stable: %d %v; want UNSTABLE_OFFSET_COMMIT", o, err)
	}
	if o, err := c2.fetchStable("g", 7, false); o != 10 || err != nil {
		t.Fatalf("after load: %d %v; want 10", o, err)
	}
	appendMarker(t, r, 8, 0, true)
	stableAt(c2, 30)
	stableAt(c, 30)
}
