package group

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tapes-dev/tapes/internal/eventually"
	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/kerr"
)

// memLog is an in-memory __consumer_offsets partition whose leadership term
// the test sets. recs[0] is at offset start.
type memLog struct {
	mu    sync.Mutex
	term  uint64
	start int64
	recs  []Record
	fail  error
	// moved counts the DeleteRecords that moved start.
	moved int
}

func (l *memLog) Term() uint64 { l.mu.Lock(); defer l.mu.Unlock(); return l.term }

func (l *memLog) setTerm(t uint64) { l.mu.Lock(); l.term = t; l.mu.Unlock() }

func (l *memLog) Append(_ context.Context, recs []Record) (int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fail != nil {
		return 0, l.fail
	}
	base := l.start + int64(len(l.recs))
	l.recs = append(l.recs, recs...)
	return base, nil
}

func (l *memLog) DeleteRecords(_ context.Context, before int64) (int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if end := l.start + int64(len(l.recs)); before > end {
		return 0, kerr.OutOfRange(before, l.start, end)
	}
	if before > l.start {
		l.recs = l.recs[before-l.start:]
		l.start = before
		l.moved++
	}
	return l.start, nil
}

func (l *memLog) Read(_ context.Context, offset int64) ([]Record, int64, int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	offset = max(offset, l.start)
	end := l.start + int64(len(l.recs))
	if offset >= end {
		return nil, offset, end, nil
	}
	stop := min(end, offset+3) // a few at a time, to exercise the loop
	out := append([]Record(nil), l.recs[offset-l.start:stop-l.start]...)
	for i := range out {
		out[i].Offset = offset + int64(i)
	}
	return out, stop, end, nil
}

// appendMarker appends a transaction marker, as the partition leader's
// WriteTxnMarkers does, and returns its offset.
func (l *memLog) appendMarker(producer int64, epoch int16, commit bool) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.recs = append(l.recs, Record{Marker: &Marker{ProducerID: producer, ProducerEpoch: epoch, Commit: commit}})
	return l.start + int64(len(l.recs)) - 1
}

func (l *memLog) deletions() int { l.mu.Lock(); defer l.mu.Unlock(); return l.moved }

// copyLog returns a copy of l, in term term.
func (l *memLog) copyLog(term uint64) *memLog {
	l.mu.Lock()
	defer l.mu.Unlock()
	return &memLog{term: term, start: l.start, recs: append([]Record(nil), l.recs...)}
}

// clock is a manual clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

func (c *clock) advance(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }

type env struct {
	t   *testing.T
	log *memLog
	clk *clock
	c   *Coordinator
}

func newEnv(t *testing.T, l *memLog) *env {
	t.Helper()
	return newEnvCompacting(t, l, 0)
}

// newEnvCompacting is newEnv with Config.CompactAfter set.
func newEnvCompacting(t *testing.T, l *memLog, compactAfter int64) *env {
	t.Helper()
	clk := &clock{now: time.Unix(1_700_000_000, 0)}
	c, err := New(Config{BrokerID: 1, Partitions: func() int32 { return 1 }, Open: func(int32) Log { return l },
		MinSessionTimeout: time.Second, MaxSessionTimeout: time.Minute, Now: clk.Now, CompactAfter: compactAfter})
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, log: l, clk: clk, c: c}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return c
}

// partitionBytes stands for a member's metadata or assignment: to the
// coordinator they are opaque bytes.
func partitionBytes(ps []int32) []byte {
	return fmt.Appendf(nil, "orders:%v", ps)
}

func joinReq(member string, owned ...int32) *tapesv1.JoinGroupRequest {
	return &tapesv1.JoinGroupRequest{GroupId: "g", MemberId: member, ClientId: "c", ProtocolType: "consumer",
		Protocols:        []*tapesv1.JoinGroupProtocol{{Name: "range", Metadata: partitionBytes(owned)}},
		SessionTimeoutMs: 3000, RebalanceTimeoutMs: 5000}
}

// newMember joins through MEMBER_ID_REQUIRED and returns the member id and a
// channel with the outcome of its (blocking) second join.
func (e *env) newMember() (string, chan joinOutcome) {
	e.t.Helper()
	_, err := e.c.JoinGroup(ctx(e.t), joinReq(""), "h")
	ke, ok := kerr.As(err)
	if !ok || ke.Code() != kerr.MemberIDRequired || ke.Detail.MemberId == "" {
		e.t.Fatalf("first join: %v; want MEMBER_ID_REQUIRED with a member id", err)
	}
	return ke.Detail.MemberId, e.join(ke.Detail.MemberId)
}

// join sends a (blocking) JoinGroup and returns once the coordinator has
// it or it was answered; the channel gets its outcome.
func (e *env) join(member string, owned ...int32) chan joinOutcome {
	ch := make(chan joinOutcome, 1)
	go func() {
		resp, err := e.c.JoinGroup(ctx(e.t), joinReq(member, owned...), "h")
		ch <- joinOutcome{resp, err}
	}()
	for i := 0; i < 1000 && !e.joining(member) && len(ch) == 0; i++ {
		time.Sleep(time.Millisecond)
	}
	return ch
}

// joining reports whether member's JoinGroup waits in the coordinator.
func (e *env) joining(member string) bool {
	e.c.mu.Lock()
	s := e.c.shards[0]
	e.c.mu.Unlock()
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.groups["g"]
	return g != nil && g.members[member] != nil && g.members[member].join != nil
}

func wait[T any](t *testing.T, ch chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(5 * time.Second):
		t.Fatal("call did not return")
	}
	var zero T
	return zero
}

// sync sends a SyncGroup (the leader's with assignments, encoded by
// partitionBytes) and returns the member's assignment bytes.
func (e *env) sync(member string, gen int32, assignments map[string][]int32) ([]byte, error) {
	req := &tapesv1.SyncGroupRequest{GroupId: "g", GenerationId: gen, MemberId: member}
	for m, ps := range assignments {
		req.Assignments = append(req.Assignments, &tapesv1.MemberAssignment{MemberId: m, Assignment: partitionBytes(ps)})
	}
	resp, err := e.c.SyncGroup(ctx(e.t), req)
	return resp.GetAssignment(), err
}

func (e *env) heartbeat(member string, gen int32) error {
	return e.c.Heartbeat(ctx(e.t), &tapesv1.HeartbeatRequest{GroupId: "g", MemberId: member, GenerationId: gen})
}

func (e *env) commit(member string, gen int32, offset int64) error {
	return e.c.OffsetCommit(ctx(e.t), &tapesv1.OffsetCommitRequest{GroupId: "g", MemberId: member, GenerationId: gen,
		Offsets: []*tapesv1.OffsetCommitPartition{{Topic: "orders", Partition: 0, Offset: offset}}})
}

func (e *env) committed() int64 {
	resp, err := e.c.OffsetFetch(ctx(e.t), &tapesv1.OffsetFetchRequest{GroupId: "g", Partitions: []*tapesv1.TopicPartitions{{Topic: "orders", Partitions: []int32{0}}}})
	if err != nil {
		e.t.Fatal(err)
	}
	return resp.Offsets[0].Offset
}

// waitState waits until the group is in state st (a join runs in a
// goroutine of its own).
func (e *env) waitState(st State) {
	e.t.Helper()
	for i := 0; i < 500; i++ {
		d, err := e.c.DescribeGroup(ctx(e.t), "g")
		if err == nil && d.State == string(st) {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	e.t.Fatalf("group never reached %s", st)
}

func wantCode(t *testing.T, err error, code kerr.Code) {
	t.Helper()
	if !kerr.Is(err, code) {
		t.Fatalf("err = %v; want %s", err, code)
	}
}

// twoMembers brings a group to a stable generation 2 with members a (the
// leader, partition 0) and b (partition 1).
func (e *env) twoMembers() (a, b string) {
	t := e.t
	a, ja := e.newMember()
	r := wait(t, ja)
	if r.err != nil || r.resp.GenerationId != 1 || r.resp.LeaderId != a || len(r.resp.Members) != 1 {
		t.Fatalf("first member's join: %+v %v", r.resp, r.err)
	}
	if _, err := e.sync(a, 1, map[string][]int32{a: {0, 1}}); err != nil {
		t.Fatal(err)
	}
	b, jb := e.newMember()
	e.waitState(PreparingRebalance)
	wantCode(t, e.heartbeat(a, 1), kerr.RebalanceInProgress)
	ja = e.join(a, 0, 1)
	ra, rb := wait(t, ja), wait(t, jb)
	if ra.err != nil || rb.err != nil {
		t.Fatal(ra.err, rb.err)
	}
	if ra.resp.GenerationId != 2 || rb.resp.GenerationId != 2 || ra.resp.LeaderId != a || len(ra.resp.Members) != 2 || len(rb.resp.Members) != 0 {
		t.Fatalf("second generation: leader %+v, follower %+v", ra.resp, rb.resp)
	}
	done := make(chan []byte, 1)
	go func() {
		got, err := e.sync(b, 2, nil)
		if err != nil {
			t.Error(err)
		}
		done <- got
	}()
	if got, err := e.sync(a, 2, map[string][]int32{a: {0}, b: {1}}); err != nil || string(got) != string(partitionBytes([]int32{0})) {
		t.Fatalf("leader's sync: %v %v", got, err)
	}
	if got := wait(t, done); string(got) != string(partitionBytes([]int32{1})) {
		t.Fatalf("follower's assignment %v", got)
	}
	return a, b
}

func TestJoinSyncAndRebalance(t *testing.T) {
	e := newEnv(t, &memLog{term: 1})
	a, b := e.twoMembers()
	d, err := e.c.DescribeGroup(ctx(t), "g")
	if err != nil || d.State != string(Stable) || d.GenerationId != 2 || len(d.Members) != 2 || d.Protocol != "range" {
		t.Fatalf("describe: %+v %v", d, err)
	}
	if err := e.heartbeat(b, 2); err != nil {
		t.Fatal(err)
	}
	wantCode(t, e.heartbeat(b, 1), kerr.IllegalGeneration)
	wantCode(t, e.heartbeat("nobody", 2), kerr.UnknownMemberID)
	_, err = e.c.JoinGroup(ctx(t), joinReq("made-up"), "h")
	wantCode(t, err, kerr.UnknownMemberID)

	// b leaves: a is told to rejoin and is alone in generation 3.
	if err := e.c.LeaveGroup(ctx(t), &tapesv1.LeaveGroupRequest{GroupId: "g", MemberId: b}); err != nil {
		t.Fatal(err)
	}
	wantCode(t, e.heartbeat(a, 2), kerr.RebalanceInProgress)
	r := wait(t, e.join(a, 0))
	if r.err != nil || r.resp.GenerationId != 3 || len(r.resp.Members) != 1 {
		t.Fatalf("after leave: %+v %v", r.resp, r.err)
	}
}

func TestSessionTimeoutFencesCommits(t *testing.T) {
	e := newEnv(t, &memLog{term: 1})
	a, b := e.twoMembers()
	if err := e.commit(b, 2, 10); err != nil {
		t.Fatal(err)
	}
	// a keeps heartbeating, b (paused) does not: after its 3 s session it
	// is removed, and its late commit is rejected.
	for i := 0; i < 4; i++ {
		e.clk.advance(time.Second)
		if err := e.heartbeat(a, 2); err != nil && !kerr.Is(err, kerr.RebalanceInProgress) {
			t.Fatal(err)
		}
		e.c.tick()
	}
	wantCode(t, e.heartbeat(a, 2), kerr.RebalanceInProgress)
	wantCode(t, e.commit(b, 2, 20), kerr.UnknownMemberID)
	r := wait(t, e.join(a, 0))
	if r.err != nil || r.resp.GenerationId != 3 {
		t.Fatalf("rejoin: %+v %v", r.resp, r.err)
	}
	if _, err := e.sync(a, 3, map[string][]int32{a: {0, 1}}); err != nil {
		t.Fatal(err)
	}
	wantCode(t, e.commit(a, 2, 30), kerr.IllegalGeneration)
	if err := e.commit(a, 3, 30); err != nil {
		t.Fatal(err)
	}
	if got := e.committed(); got != 30 {
		t.Fatalf("committed %d, want 30 (the fenced commit must not land)", got)
	}
	// An admin commit is refused while the group has members.
	wantCode(t, e.commit("", -1, 0), kerr.UnknownMemberID)
}

func TestRebalanceTimeoutRemovesMembersThatDoNotRejoin(t *testing.T) {
	e := newEnv(t, &memLog{term: 1})
	a, b := e.twoMembers()
	_, jc := e.newMember() // a third member starts a rebalance
	e.waitState(PreparingRebalance)
	ja := e.join(a, 0)
	_ = b // b keeps heartbeating but never rejoins
	for i := 0; i < 6; i++ {
		e.clk.advance(time.Second)
		_ = e.heartbeat(b, 2)
		e.c.tick()
	}
	ra, rc := wait(t, ja), wait(t, jc)
	if ra.err != nil || rc.err != nil || ra.resp.GenerationId != 3 || len(ra.resp.Members) != 2 {
		t.Fatalf("after the rebalance timeout: %+v %v / %+v %v", ra.resp, ra.err, rc.resp, rc.err)
	}
	wantCode(t, e.heartbeat(b, 3), kerr.UnknownMemberID)
}

func TestNewCoordinatorRebuildsFromTheLog(t *testing.T) {
	l := &memLog{term: 1}
	e := newEnv(t, l)
	a, b := e.twoMembers()
	if err := e.commit(a, 2, 42); err != nil {
		t.Fatal(err)
	}
	if err := e.commit(b, 2, 7); err != nil { // same partition, later commit wins
		t.Fatal(err)
	}
	// Leadership moves: the old coordinator answers NOT_COORDINATOR...
	l.setTerm(0)
	wantCode(t, e.heartbeat(a, 2), kerr.NotCoordinator)
	// ...and a coordinator in a later term rebuilds offsets and the
	// generation; the members carry on without rejoining.
	l.setTerm(2)
	e2 := newEnv(t, l)
	if got := e2.committed(); got != 7 {
		t.Fatalf("rebuilt offset %d, want 7", got)
	}
	if err := e2.heartbeat(a, 2); err != nil {
		t.Fatalf("heartbeat after failover: %v", err)
	}
	if err := e2.commit(b, 2, 8); err != nil {
		t.Fatal(err)
	}
	d, _ := e2.c.DescribeGroup(ctx(t), "g")
	if d.GenerationId != 2 || d.State != string(Stable) || len(d.Members) != 2 ||
		string(d.Members[0].Assignment) == string(d.Members[1].Assignment) ||
		!slices.ContainsFunc(d.Members, func(m *tapesv1.GroupMember) bool { return string(m.Assignment) == string(partitionBytes([]int32{1})) }) {
		t.Fatalf("rebuilt group %+v", d)
	}
}

func TestLeadershipLossAnswersWaitingJoins(t *testing.T) {
	l := &memLog{term: 1}
	e := newEnv(t, l)
	a, _ := e.twoMembers()
	_, jc := e.newMember()
	e.waitState(PreparingRebalance)
	l.setTerm(3)
	e.c.tick() // the tick notices the new term and drops the old shard
	if r := wait(t, jc); !kerr.Is(r.err, kerr.NotCoordinator) {
		t.Fatalf("waiting join: %v; want NOT_COORDINATOR", r.err)
	}
	_ = a
}

func TestEmptyGroupAcceptsAdminCommits(t *testing.T) {
	e := newEnv(t, &memLog{term: 1})
	if err := e.commit("", -1, 5); err != nil {
		t.Fatal(err)
	}
	if got := e.committed(); got != 5 {
		t.Fatalf("committed %d", got)
	}
	wantCode(t, e.commit("", -1, -3), kerr.InvalidRequest)
	_, err := e.c.JoinGroup(ctx(t), &tapesv1.JoinGroupRequest{GroupId: "g", ProtocolType: "consumer", SessionTimeoutMs: 10}, "h")
	wantCode(t, err, kerr.InvalidSessionTimeout)
}

func TestPartitionForMatchesKafka(t *testing.T) {
	// Java: Math.abs("demo".hashCode()) % 50 == 3079651 % 50.
	for _, c := range []struct {
		group string
		n     int32
		want  int32
	}{{"demo", 50, 3079651 % 50}, {"", 50, 0}, {"console-consumer-1", 7, -1}} {
		got := PartitionFor(c.group, c.n)
		if c.want >= 0 && got != c.want {
			t.Errorf("PartitionFor(%q, %d) = %d, want %d", c.group, c.n, got, c.want)
		}
		if got < 0 || got >= c.n {
			t.Errorf("PartitionFor(%q, %d) = %d out of range", c.group, c.n, got)
		}
	}
}

// blockingLog is a memLog whose reads wait until release is closed: a
// partition the coordinator is still loading.
type blockingLog struct {
	*memLog
	release chan struct{}
}

func (l blockingLog) Read(ctx context.Context, offset int64) ([]Record, int64, int64, error) {
	select {
	case <-l.release:
	case <-ctx.Done():
		return nil, offset, 0, ctx.Err()
	}
	return l.memLog.Read(ctx, offset)
}

// TestCheckDoesNotWaitForTheLoad: Check answers at once,
// COORDINATOR_LOAD_IN_PROGRESS while the partition loads, nil once it has,
// NOT_COORDINATOR when this broker does not lead the partition, and the
// topic's absence COORDINATOR_NOT_AVAILABLE.
func TestCheckDoesNotWaitForTheLoad(t *testing.T) {
	l := blockingLog{memLog: &memLog{term: 1}, release: make(chan struct{})}
	var n atomic.Int32
	var led atomic.Bool
	led.Store(true)
	c, err := New(Config{BrokerID: 1, Partitions: func() int32 { return n.Load() },
		Open: func(int32) Log {
			if led.Load() {
				return l
			}
			return nil
		},
		MinSessionTimeout: time.Second, MaxSessionTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Check("g"); !kerr.Is(err, kerr.CoordinatorNotAvailable) {
		t.Fatalf("without the topic: %v", err)
	}
	n.Store(1)
	if err := c.Check(""); !kerr.Is(err, kerr.InvalidGroupID) {
		t.Fatalf("empty group id: %v", err)
	}
	if err := c.Check("g"); !kerr.Is(err, kerr.CoordinatorLoadInProgress) {
		t.Fatalf("while loading: %v", err)
	}
	close(l.release)
	eventually.Nil(t, 10*time.Second, "the load to finish", func() error { return c.Check("g") })
	led.Store(false)
	if err := c.Check("g"); !kerr.Is(err, kerr.NotCoordinator) {
		t.Fatalf("not leading: %v", err)
	}
}
