package group

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tapes-dev/tapes/internal/eventually"
	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/kerr"
)

// txnCommit is a TxnOffsetCommit of producer pid (epoch 0) for group g,
// orders-p at offset, without group metadata (v0-v2).
func (e *env) txnCommit(group string, pid int64, p int32, offset int64) error {
	return e.c.TxnOffsetCommit(ctx(e.t), TxnOffsetCommitRequest{TransactionalID: fmt.Sprint("tx-", pid), GroupID: group,
		ProducerID: pid, GenerationID: -1,
		Offsets: []*tapesv1.OffsetCommitPartition{{Topic: "orders", Partition: p, Offset: offset}}})
}

// stable fetches group's orders-p with, beside it, whether it is unstable.
func (e *env) stable(group string, p int32) (int64, bool) {
	e.t.Helper()
	resp, unstable, err := e.c.OffsetFetchStable(ctx(e.t), &tapesv1.OffsetFetchRequest{GroupId: group,
		Partitions: []*tapesv1.TopicPartitions{{Topic: "orders", Partitions: []int32{p}}}})
	if err != nil {
		e.t.Fatalf("offset fetch of %s: %v", group, err)
	}
	return resp.Offsets[0].Offset, unstable[0]
}

// waitStable ticks e's coordinator (whose tail reads the markers) until
// group's orders-p is stable at want.
func (e *env) waitStable(group string, p int32, want int64) {
	e.t.Helper()
	eventually.True(e.t, 10*time.Second, fmt.Sprintf("%s orders-%d stable at %d", group, p, want), func() bool {
		e.c.tick()
		got, unstable := e.stable(group, p)
		return !unstable && got == want
	})
}

// TestTxnCommitWaitsForTheMarker: a transactional commit is pending (the
// old offset answered, require_stable unstable) until its producer's
// marker: commit makes it the committed offset, abort leaves the old one.
// A later transaction of the same producer is not completed by the earlier
// marker, and a plain commit of the same group still works.
func TestTxnCommitWaitsForTheMarker(t *testing.T) {
	l := &memLog{term: 1}
	e := newEnv(t, l)
	if err := e.adminCommit("g", 0, 5); err != nil {
		t.Fatal(err)
	}
	if err := e.txnCommit("g", 7, 0, 10); err != nil {
		t.Fatal(err)
	}
	if got, unstable := e.stable("g", 0); got != 5 || !unstable {
		t.Fatalf("pending: offset %d unstable %v; want 5, unstable", got, unstable)
	}
	// Another producer's marker completes nothing.
	l.appendMarker(8, 0, true)
	e.c.tick()
	if got, unstable := e.stable("g", 0); got != 5 || !unstable {
		t.Fatalf("after producer 8's marker: offset %d unstable %v; want 5, unstable", got, unstable)
	}
	l.appendMarker(7, 0, true)
	e.waitStable("g", 0, 10)

	// Aborted: the committed offset stays.
	if err := e.txnCommit("g", 7, 0, 20); err != nil {
		t.Fatal(err)
	}
	l.appendMarker(7, 0, false)
	e.waitStable("g", 0, 10)

	// Non-transactional commits of the group still work beside.
	if err := e.adminCommit("g", 1, 3); err != nil {
		t.Fatal(err)
	}
	if got := e.offsetsOf("g", 1)[1]; got != 3 {
		t.Fatalf("plain commit: %d, want 3", got)
	}
}

// TestTxnMarkerCompletesOnlyEarlierCommits: a marker completes the pending
// commits written before it, not those of the producer's next transaction
// written after it (the tail may read the marker late).
func TestTxnMarkerCompletesOnlyEarlierCommits(t *testing.T) {
	l := &memLog{term: 1}
	e := newEnv(t, l)
	if err := e.txnCommit("g", 7, 0, 10); err != nil {
		t.Fatal(err)
	}
	l.appendMarker(7, 0, true)
	// The next transaction's commit lands before the tail reads the marker.
	if err := e.txnCommit("g", 7, 0, 30); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 10*time.Second, "the first transaction completed", func() bool {
		e.c.tick()
		got, unstable := e.stable("g", 0)
		return got == 10 && unstable
	})
}

// TestTxnCommitsRebuiltOnLoad: a new coordinator reading the partition
// applies a committed transaction, drops an aborted one and keeps a
// commit without marker pending, which its marker then completes.
func TestTxnCommitsRebuiltOnLoad(t *testing.T) {
	l := &memLog{term: 1}
	e := newEnv(t, l)
	for p, pid := range []int64{1, 2, 3} {
		if err := e.adminCommit("g", int32(p), 1); err != nil {
			t.Fatal(err)
		}
		if err := e.txnCommit("g", pid, int32(p), 100); err != nil {
			t.Fatal(err)
		}
	}
	l.appendMarker(1, 0, true)
	l.appendMarker(2, 0, false)
	// producer 3's transaction is still open.
	e2 := newEnv(t, l.copyLog(2))
	for p, want := range []struct {
		offset   int64
		unstable bool
	}{{100, false}, {1, false}, {1, true}} {
		if got, unstable := e2.stable("g", int32(p)); got != want.offset || unstable != want.unstable {
			t.Errorf("orders-%d after load: offset %d unstable %v; want %d %v", p, got, unstable, want.offset, want.unstable)
		}
	}
	// A pending commit survives the reload: its marker completes it.
	e2.log.appendMarker(3, 0, true)
	e2.waitStable("g", 2, 100)
}

// TestTxnCommitFencing: with v3's group metadata a transactional commit is
// fenced by member and generation (not by a rebalance in progress); without
// it anything goes; an older producer epoch than one seen is
// INVALID_PRODUCER_EPOCH; an unknown group with a generation is
// ILLEGAL_GENERATION.
func TestTxnCommitFencing(t *testing.T) {
	e := newEnv(t, &memLog{term: 1})
	a, _ := e.twoMembers() // generation 2
	req := func(member string, gen int32, instance *string, epoch int16) TxnOffsetCommitRequest {
		return TxnOffsetCommitRequest{TransactionalID: "tx", GroupID: "g", ProducerID: 9, ProducerEpoch: epoch,
			GenerationID: gen, MemberID: member, GroupInstanceID: instance,
			Offsets: []*tapesv1.OffsetCommitPartition{{Topic: "orders", Partition: 0, Offset: 4}}}
	}
	inst := "i-1"
	for _, c := range []struct {
		name string
		req  TxnOffsetCommitRequest
		want kerr.Code
	}{
		{"old generation", req(a, 1, nil, 1), kerr.IllegalGeneration},
		{"unknown member", req("nobody", 2, nil, 1), kerr.UnknownMemberID},
		{"instance id", req(a, 2, &inst, 1), kerr.UnknownMemberID},
		{"member of generation 2", req(a, 2, nil, 1), ""},
		{"no group metadata", req("", -1, nil, 1), ""},
		{"older epoch", req(a, 2, nil, 0), kerr.InvalidProducerEpoch},
	} {
		err := e.c.TxnOffsetCommit(ctx(t), c.req)
		if c.want == "" {
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
			}
			continue
		}
		if !kerr.Is(err, c.want) {
			t.Errorf("%s: %v; want %s", c.name, err, c.want)
		}
	}
	r := req("", 0, nil, 1)
	r.GroupID = "nope"
	wantCode(t, e.c.TxnOffsetCommit(ctx(t), r), kerr.IllegalGeneration)
	r.GenerationID = -1
	if err := e.c.TxnOffsetCommit(ctx(t), r); err != nil {
		t.Fatalf("unknown group without generation: %v", err)
	}
	// A rebalance in progress does not fence a transactional commit of
	// the current generation.
	_, _ = e.newMember()
	e.waitState(PreparingRebalance)
	if err := e.c.TxnOffsetCommit(ctx(t), req(a, 2, nil, 1)); err != nil {
		t.Fatalf("commit while rebalancing: %v", err)
	}
}

// TestCompactionKeepsPendingTxnCommits: compaction drops completed
// transactional commits (keeping what a commit made committed) and keeps
// pending ones, so that a coordinator loading the compacted partition has
// the same offsets and pending commits, which their marker then completes.
func TestCompactionKeepsPendingTxnCommits(t *testing.T) {
	l := &memLog{term: 1}
	e := newEnvCompacting(t, l, 100)
	for i := range 40 {
		if err := e.adminCommit("g", 0, int64(i)); err != nil {
			t.Fatal(err)
		}
		if err := e.txnCommit("g", 1, 1, int64(100+i)); err != nil {
			t.Fatal(err)
		}
		l.appendMarker(1, 0, i%2 == 0) // commits the even ones
	}
	if err := e.txnCommit("g", 2, 2, 500); err != nil {
		t.Fatal(err)
	}
	for i := range 30 {
		if err := e.adminCommit("g", 3, int64(i)); err != nil {
			t.Fatal(err)
		}
	}
	before := l.copyLog(2)
	e.waitCompacted(l, 0)
	l.mu.Lock()
	var markers, txn int
	for _, r := range l.recs {
		switch {
		case r.Marker != nil:
			markers++
		case r.Value != nil && strings.HasPrefix(string(r.Key), `{"kind":"txn-offset"`):
			txn++
		}
	}
	kept := len(l.recs)
	l.mu.Unlock()
	// orders-0, orders-1 (committed by the 39th transaction), orders-3,
	// and producer 2's pending commit of orders-2.
	if kept != 4 || markers != 0 || txn != 1 {
		t.Fatalf("compacted to %d records, %d markers, %d txn-offset records; want 4, 0, 1", kept, markers, txn)
	}
	was, now := newEnv(t, before), newEnv(t, l.copyLog(2))
	for p := range int32(4) {
		wo, wu := was.stable("g", p)
		no, nu := now.stable("g", p)
		if wo != no || wu != nu {
			t.Errorf("orders-%d: offset %d unstable %v before compaction, %d %v after", p, wo, wu, no, nu)
		}
	}
	if got, unstable := now.stable("g", 1); got != 138 || unstable {
		t.Errorf("orders-1 %d unstable %v, want 138 (the last committed transaction)", got, unstable)
	}
	now.log.appendMarker(2, 0, true)
	now.waitStable("g", 2, 500)
	// The compacting coordinator completes it too.
	l.appendMarker(2, 0, true)
	e.waitStable("g", 2, 500)
}

// TestCompactionRepairsAMarkerInTheWindow: a marker that lands after
// compaction's last read and before its rewritten records completes the
// pending commit it rewrote; what it did is appended, so that the
// compacted partition reads as the live coordinator's state.
func TestCompactionRepairsAMarkerInTheWindow(t *testing.T) {
	l := &memLog{term: 1}
	e := newEnv(t, l)
	if err := e.txnCommit("g", 1, 0, 10); err != nil {
		t.Fatal(err)
	}
	if err := e.txnCommit("g", 2, 1, 20); err != nil {
		t.Fatal(err)
	}
	s := e.c.shards[0]
	var f fold
	_, end, err := s.scan(ctx(t), 0, f.add)
	if err != nil {
		t.Fatal(err)
	}
	l.appendMarker(1, 0, true) // in the window
	first, err := s.write(ctx(t), f.records())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.tail(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if err := s.repairPending(ctx(t), &f, end, first); err != nil {
		t.Fatal(err)
	}
	if _, err := l.DeleteRecords(ctx(t), first); err != nil {
		t.Fatal(err)
	}
	now := newEnv(t, l.copyLog(2))
	for p, want := range []struct {
		offset   int64
		unstable bool
	}{{10, false}, {-1, true}} {
		lo, lu := e.stable("g", int32(p))
		no, nu := now.stable("g", int32(p))
		if lo != want.offset || lu != want.unstable || no != want.offset || nu != want.unstable {
			t.Errorf("orders-%d: live %d %v, reloaded %d %v; want %d %v", p, lo, lu, no, nu, want.offset, want.unstable)
		}
	}
}
