package txn

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tapes-dev/tapes/internal/kerr"
)

// memLog is an in-memory __transaction_state partition whose leadership
// term the test sets. recs[i] is at offset i; those below start are
// deleted (DeleteRecords).
type memLog struct {
	mu    sync.Mutex
	term  uint64
	recs  []Record
	start int64
}

func (l *memLog) Term() uint64 { l.mu.Lock(); defer l.mu.Unlock(); return l.term }

func (l *memLog) setTerm(t uint64) { l.mu.Lock(); l.term = t; l.mu.Unlock() }

func (l *memLog) Append(_ context.Context, recs []Record) (int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.term == 0 {
		return 0, kerr.New(kerr.NotLeaderOrFollower, "not the leader")
	}
	base := int64(len(l.recs))
	l.recs = append(l.recs, recs...)
	return base, nil
}

func (l *memLog) DeleteRecords(_ context.Context, before int64) (int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.start = max(l.start, min(before, int64(len(l.recs))))
	return l.start, nil
}

func (l *memLog) Read(_ context.Context, offset int64) ([]Record, int64, int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	offset = max(offset, l.start)
	end := int64(len(l.recs))
	if offset >= end {
		return nil, offset, end, nil
	}
	stop := min(end, offset+2) // a few at a time, to exercise the loop
	out := slices.Clone(l.recs[offset:stop])
	for i := range out {
		out[i].Offset = offset + int64(i)
	}
	return out, stop, end, nil
}

// live returns the records from the log start on.
func (l *memLog) live() []Record {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.recs[l.start:])
}

// states returns the states the log holds for id, in order.
func (l *memLog) states(t *testing.T, id string) []State {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []State
	for _, r := range l.recs[l.start:] {
		got, v, err := decodeRecord(r)
		if err != nil {
			t.Fatal(err)
		}
		if got == id {
			out = append(out, v.State)
		}
	}
	return out
}

// fakeMarkers records every attempt; fail decides each partition's error.
type fakeMarkers struct {
	mu    sync.Mutex
	calls []Marker
	// fail returns the error of tp on attempt n (1, 2, ...) of m; nil
	// means success.
	fail func(m Marker, tp TopicPartition, n int) error
	// hold, when set, blocks every call until closed or ctx ends.
	hold chan struct{}
	n    map[TopicPartition]int
}

func (f *fakeMarkers) WriteMarkers(ctx context.Context, m Marker) []error {
	f.mu.Lock()
	hold := f.hold
	f.calls = append(f.calls, Marker{ProducerID: m.ProducerID, ProducerEpoch: m.ProducerEpoch, Commit: m.Commit,
		CoordinatorEpoch: m.CoordinatorEpoch, Partitions: slices.Clone(m.Partitions)})
	f.mu.Unlock()
	if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
			return slices.Repeat([]error{ctx.Err()}, len(m.Partitions))
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n == nil {
		f.n = map[TopicPartition]int{}
	}
	errs := make([]error, len(m.Partitions))
	for i, tp := range m.Partitions {
		f.n[tp]++
		if f.fail != nil {
			errs[i] = f.fail(m, tp, f.n[tp])
		}
	}
	return errs
}

func (f *fakeMarkers) attempts() []Marker {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

type env struct {
	t   *testing.T
	log *memLog
	mk  *fakeMarkers
	c   *Coordinator
	ids atomic.Int64
}

const tick = time.Second

// newEnv returns a coordinator of one __transaction_state partition over
// log, running until the test ends; opts change its Config. Call inside a
// synctest bubble.
func newEnv(t *testing.T, log *memLog, mk *fakeMarkers, opts ...func(*Config)) *env {
	t.Helper()
	e := &env{t: t, log: log, mk: mk}
	e.ids.Store(1000)
	cfg := Config{BrokerID: 1, Partitions: func() int32 { return 1 }, Open: func(int32) Log { return log },
		AllocProducerID: func(context.Context) (int64, error) { return e.ids.Add(1), nil },
		Markers:         mk, MaxTimeout: 15 * time.Minute, Tick: tick}
	for _, o := range opts {
		o(&cfg)
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.c = c
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go c.Run(ctx)
	e.waitLoaded()
	return e
}

// waitLoaded waits (in the bubble) until the coordinator serves "any".
func (e *env) waitLoaded() {
	e.t.Helper()
	for range 10 {
		if err := e.c.Check("any"); err == nil {
			return
		}
		time.Sleep(tick)
		synctest.Wait()
	}
	e.t.Fatalf("not loaded: %v", e.c.Check("any"))
}

func (e *env) init(id string, pid int64, epoch int16) (int64, int16, error) {
	return e.c.InitProducerID(context.Background(), InitRequest{TransactionalID: id, TimeoutMs: 60_000, ProducerID: pid, ProducerEpoch: epoch})
}

func (e *env) mustInit(id string) (int64, int16) {
	e.t.Helper()
	pid, epoch, err := e.init(id, -1, -1)
	if err != nil {
		e.t.Fatalf("InitProducerId %s: %v", id, err)
	}
	return pid, epoch
}

// add adds parts to id's transaction and fails the test on an error.
func (e *env) add(id string, pid int64, epoch int16, parts ...TopicPartition) {
	e.t.Helper()
	if err := e.c.AddPartitions(context.Background(), id, pid, epoch, parts); err != nil {
		e.t.Fatalf("AddPartitions %s %v: %v", id, parts, err)
	}
}

// end ends id's transaction and fails the test on an error.
func (e *env) end(id string, pid int64, epoch int16, commit bool) {
	e.t.Helper()
	if err := e.c.EndTxn(context.Background(), id, pid, epoch, commit); err != nil {
		e.t.Fatalf("EndTxn %s commit=%v: %v", id, commit, err)
	}
}

func (e *env) state(id string) Description {
	e.t.Helper()
	d, err := e.c.Describe(id)
	if err != nil {
		e.t.Fatalf("describe %s: %v", id, err)
	}
	return d
}

func wantErr(t *testing.T, what string, err error, code kerr.Code) {
	t.Helper()
	if !kerr.Is(err, code) {
		t.Fatalf("%s: %v, want %s", what, err, code)
	}
}

var orders0, orders1 = TopicPartition{"orders", 0}, TopicPartition{"orders", 1}

// TestInitProducerID: a new transactional id gets a new producer id at
// epoch 0; each InitProducerId bumps the epoch; KIP-360's current id and
// epoch: a matching one bumps, a retry of the last bump gets the same
// answer, another is PRODUCER_FENCED; bad timeouts and ids are refused with
// nothing written.
func TestInitProducerID(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		log := &memLog{term: 1}
		e := newEnv(t, log, &fakeMarkers{})
		pid, epoch := e.mustInit("t1")
		if pid != 1001 || epoch != 0 {
			t.Fatalf("first InitProducerId: %d/%d, want 1001/0", pid, epoch)
		}
		if pid2, epoch2 := e.mustInit("t1"); pid2 != pid || epoch2 != 1 {
			t.Fatalf("second: %d/%d, want %d/1", pid2, epoch2, pid)
		}
		if p, ep, err := e.init("t1", pid, 1); err != nil || p != pid || ep != 2 {
			t.Fatalf("KIP-360 with the current epoch: %d/%d %v, want %d/2", p, ep, err, pid)
		}
		if p, ep, err := e.init("t1", pid, 1); err != nil || p != pid || ep != 2 {
			t.Fatalf("a retry of that bump: %d/%d %v, want %d/2 again", p, ep, err, pid)
		}
		_, _, err := e.init("t1", pid, 0)
		wantErr(t, "an older epoch", err, kerr.ProducerFenced)
		_, _, err = e.init("t1", 77, 2)
		wantErr(t, "another producer id", err, kerr.ProducerFenced)
		if p, _ := e.mustInit("t2"); p != 1002 {
			t.Fatalf("t2: producer id %d, want a new one (1002)", p)
		}
		before := len(log.recs)
		_, _, err = e.c.InitProducerID(context.Background(), InitRequest{TransactionalID: "t3", TimeoutMs: int32((16 * time.Minute).Milliseconds()), ProducerID: -1, ProducerEpoch: -1})
		wantErr(t, "timeout above transaction.max.timeout.ms", err, kerr.InvalidTransactionTimeout)
		_, _, err = e.c.InitProducerID(context.Background(), InitRequest{TransactionalID: "t3", TimeoutMs: 0, ProducerID: -1, ProducerEpoch: -1})
		wantErr(t, "timeout 0", err, kerr.InvalidTransactionTimeout)
		_, _, err = e.c.InitProducerID(context.Background(), InitRequest{TransactionalID: "", TimeoutMs: 0, ProducerID: -1, ProducerEpoch: -1})
		wantErr(t, "empty transactional id (checked before the timeout, as Kafka)", err, kerr.InvalidRequest)
		if len(log.recs) != before {
			t.Fatalf("refused calls wrote %d records", len(log.recs)-before)
		}
		if got := log.states(t, "t1"); !slices.Equal(got, []State{Empty, Empty, Empty}) {
			t.Fatalf("t1's records: %v", got)
		}
	})
}

// TestCommitAndAbort: partitions added (twice: the second adds nothing and
// writes nothing), EndTxn answered once PrepareCommit is committed, the
// markers sent with the producer's id and epoch and the coordinator epoch,
// then CompleteCommit; a retried commit succeeds, an abort of it is
// INVALID_TXN_STATE; the next transaction aborts.
func TestCommitAndAbort(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		log := &memLog{term: 7}
		mk := &fakeMarkers{}
		e := newEnv(t, log, mk)
		ctx := context.Background()
		pid, epoch := e.mustInit("t")
		wantErr(t, "EndTxn with no transaction", e.c.EndTxn(ctx, "t", pid, epoch, true), kerr.InvalidTxnState)
		e.add("t", pid, epoch, orders0)
		e.add("t", pid, epoch, orders0, orders1)
		e.add("t", pid, epoch, orders1)
		d := e.state("t")
		if d.State != Ongoing || !slices.Equal(d.Partitions, []TopicPartition{orders0, orders1}) || d.StartMs != time.Now().UnixMilli() {
			t.Fatalf("ongoing: %+v", d)
		}
		e.end("t", pid, epoch, true)
		synctest.Wait()
		if d := e.state("t"); d.State != CompleteCommit || len(d.Partitions) != 0 || d.StartMs != -1 {
			t.Fatalf("after commit: %+v", d)
		}
		calls := mk.attempts()
		if len(calls) != 1 || !calls[0].Commit || calls[0].ProducerID != pid || calls[0].ProducerEpoch != epoch ||
			calls[0].CoordinatorEpoch != 7 || !slices.Equal(calls[0].Partitions, []TopicPartition{orders0, orders1}) {
			t.Fatalf("markers: %+v", calls)
		}
		if err := e.c.EndTxn(ctx, "t", pid, epoch, true); err != nil {
			t.Fatalf("a retried commit: %v", err)
		}
		wantErr(t, "abort after commit", e.c.EndTxn(ctx, "t", pid, epoch, false), kerr.InvalidTxnState)
		e.add("t", pid, epoch, orders1)
		e.end("t", pid, epoch, false)
		synctest.Wait()
		if d := e.state("t"); d.State != CompleteAbort {
			t.Fatalf("after abort: %+v", d)
		}
		if calls := mk.attempts(); len(calls) != 2 || calls[1].Commit || !slices.Equal(calls[1].Partitions, []TopicPartition{orders1}) {
			t.Fatalf("abort markers: %+v", calls)
		}
		want := []State{Empty, Ongoing, Ongoing, PrepareCommit, CompleteCommit, Ongoing, PrepareAbort, CompleteAbort}
		if got := log.states(t, "t"); !slices.Equal(got, want) {
			t.Fatalf("records %v, want %v", got, want)
		}
	})
}

// preparedCommit returns a coordinator whose id "t" committed a
// transaction on orders0 whose markers mk holds (state PrepareCommit).
func preparedCommit(t *testing.T) (*env, *fakeMarkers, int64, int16) {
	t.Helper()
	mk := &fakeMarkers{hold: make(chan struct{})}
	e := newEnv(t, &memLog{term: 1}, mk)
	pid, epoch := e.mustInit("t")
	e.add("t", pid, epoch, orders0)
	e.end("t", pid, epoch, true)
	synctest.Wait()
	if d := e.state("t"); d.State != PrepareCommit {
		t.Fatalf("markers held: %+v", d)
	}
	return e, mk, pid, epoch
}

// TestConcurrentTransactions: while a commit's markers are being written,
// the same commit again, AddPartitionsToTxn and InitProducerId are
// CONCURRENT_TRANSACTIONS, an abort INVALID_TXN_STATE; once the markers
// are written the transaction completes and the next call goes through.
func TestConcurrentTransactions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, mk, pid, epoch := preparedCommit(t)
		ctx := context.Background()
		wantErr(t, "commit again", e.c.EndTxn(ctx, "t", pid, epoch, true), kerr.ConcurrentTransactions)
		wantErr(t, "abort", e.c.EndTxn(ctx, "t", pid, epoch, false), kerr.InvalidTxnState)
		wantErr(t, "add partitions", e.c.AddPartitions(ctx, "t", pid, epoch, []TopicPartition{orders1}), kerr.ConcurrentTransactions)
		_, _, err := e.init("t", -1, -1)
		wantErr(t, "InitProducerId", err, kerr.ConcurrentTransactions)
		close(mk.hold)
		synctest.Wait()
		if d := e.state("t"); d.State != CompleteCommit {
			t.Fatalf("markers released: %+v", d)
		}
		if _, ep := e.mustInit("t"); ep != epoch+1 {
			t.Fatalf("epoch %d after completion, want %d", ep, epoch+1)
		}
	})
}

// TestFencing: a second producer's InitProducerId aborts the first one's
// ongoing transaction with the epoch bumped (markers at the bumped epoch)
// and is CONCURRENT_TRANSACTIONS until that abort completed, then gets the
// epoch after it; the first producer is PRODUCER_FENCED on every call, and
// a wrong producer id is INVALID_PRODUCER_ID_MAPPING.
func TestFencing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		log := &memLog{term: 1}
		mk := &fakeMarkers{hold: make(chan struct{})}
		e := newEnv(t, log, mk)
		ctx := context.Background()
		pid, epoch := e.mustInit("t")
		e.add("t", pid, epoch, orders0)
		_, _, err := e.init("t", -1, -1)
		wantErr(t, "the successor's first InitProducerId", err, kerr.ConcurrentTransactions)
		synctest.Wait()
		_, _, err = e.init("t", -1, -1)
		wantErr(t, "while the abort completes", err, kerr.ConcurrentTransactions)
		wantErr(t, "the zombie's commit", e.c.EndTxn(ctx, "t", pid, epoch, true), kerr.ProducerFenced)
		close(mk.hold)
		synctest.Wait()
		p2, e2 := e.mustInit("t")
		if p2 != pid || e2 != epoch+2 {
			t.Fatalf("successor: %d/%d, want %d/%d", p2, e2, pid, epoch+2)
		}
		calls := mk.attempts()
		if len(calls) != 1 || calls[0].Commit || calls[0].ProducerEpoch != epoch+1 {
			t.Fatalf("abort markers: %+v", calls)
		}
		wantErr(t, "the zombie's add", e.c.AddPartitions(ctx, "t", pid, epoch, []TopicPartition{orders1}), kerr.ProducerFenced)
		wantErr(t, "the zombie's abort", e.c.EndTxn(ctx, "t", pid, epoch, false), kerr.ProducerFenced)
		wantErr(t, "another producer id", e.c.AddPartitions(ctx, "t", pid+1, e2, []TopicPartition{orders1}), kerr.InvalidProducerIDMapping)
		wantErr(t, "an unknown transactional id", e.c.EndTxn(ctx, "nobody", pid, e2, true), kerr.InvalidProducerIDMapping)
		if got, want := log.states(t, "t"), []State{Empty, Ongoing, PrepareAbort, CompleteAbort, Empty}; !slices.Equal(got, want) {
			t.Fatalf("records %v, want %v", got, want)
		}
	})
}

// TestTimeoutAbortsAndFences: an ongoing transaction is left alone until
// its timeout passed, then aborted by the coordinator with the epoch
// bumped; the producer is PRODUCER_FENCED.
func TestTimeoutAbortsAndFences(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		log := &memLog{term: 1}
		mk := &fakeMarkers{}
		e := newEnv(t, log, mk)
		ctx := context.Background()
		pid, epoch, err := e.c.InitProducerID(ctx, InitRequest{TransactionalID: "t", TimeoutMs: 10_000, ProducerID: -1, ProducerEpoch: -1})
		if err != nil {
			t.Fatal(err)
		}
		e.add("t", pid, epoch, orders0)
		time.Sleep(9 * time.Second)
		synctest.Wait()
		if d := e.state("t"); d.State != Ongoing || len(mk.attempts()) != 0 {
			t.Fatalf("before the timeout: %+v, markers %+v", d, mk.attempts())
		}
		time.Sleep(2*tick + time.Millisecond)
		synctest.Wait()
		d := e.state("t")
		if d.State != CompleteAbort || d.ProducerEpoch != epoch+1 {
			t.Fatalf("after the timeout: %+v", d)
		}
		if calls := mk.attempts(); len(calls) != 1 || calls[0].Commit || calls[0].ProducerEpoch != epoch+1 {
			t.Fatalf("markers: %+v", calls)
		}
		wantErr(t, "the producer's commit", e.c.EndTxn(ctx, "t", pid, epoch, true), kerr.ProducerFenced)
	})
}

// TestMarkerRetries: a partition whose leader moved (NOT_LEADER_OR_FOLLOWER)
// or cannot be reached is retried with backoff until it holds its marker;
// one that no longer exists is dropped; the transaction then completes.
func TestMarkerRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		gone := TopicPartition{"deleted", 0}
		mk := &fakeMarkers{fail: func(_ Marker, tp TopicPartition, n int) error {
			switch {
			case tp == gone:
				return fmt.Errorf("deleted-0: %w", ErrPartitionGone)
			case tp == orders1 && n <= 3:
				return kerr.New(kerr.NotLeaderOrFollower, "moved")
			case tp == orders0 && n <= 1:
				return errors.New("dial tcp: connection refused")
			}
			return nil
		}}
		e := newEnv(t, &memLog{term: 1}, mk)
		pid, epoch := e.mustInit("t")
		e.add("t", pid, epoch, orders0, orders1, gone)
		e.end("t", pid, epoch, true)
		synctest.Wait()
		time.Sleep(time.Minute)
		synctest.Wait()
		if d := e.state("t"); d.State != CompleteCommit {
			t.Fatalf("%+v", d)
		}
		calls := mk.attempts()
		if len(calls) != 4 || len(calls[0].Partitions) != 3 || !slices.Equal(calls[1].Partitions, []TopicPartition{orders0, orders1}) ||
			!slices.Equal(calls[3].Partitions, []TopicPartition{orders1}) {
			t.Fatalf("attempts: %+v", calls)
		}
	})
}

// TestNewLeaderFinishesPrepareCommit: a coordinator that wrote PrepareCommit
// but could not write the markers loses the leadership; the next leader
// rebuilds the state from the partition (latest record per id wins),
// writes the commit markers (with its own coordinator epoch) and
// CompleteCommit; the transactions in other states are as they were.
func TestNewLeaderFinishesPrepareCommit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		log1 := &memLog{term: 3}
		unreachable := &fakeMarkers{fail: func(Marker, TopicPartition, int) error { return errors.New("connection refused") }}
		e1 := newEnv(t, log1, unreachable)
		ctx := context.Background()
		pid, epoch := e1.mustInit("t")
		e1.add("t", pid, epoch, orders0, orders1)
		e1.end("t", pid, epoch, true)
		opid, oepoch, err := e1.c.InitProducerID(ctx, InitRequest{TransactionalID: "open", TimeoutMs: 600_000, ProducerID: -1, ProducerEpoch: -1})
		if err != nil {
			t.Fatal(err)
		}
		e1.add("open", opid, oepoch, orders1)
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if d := e1.state("t"); d.State != PrepareCommit {
			t.Fatalf("unreachable leaders: %+v", d)
		}
		// The leadership moves: the old leader's term ends, a replica with
		// the same records becomes leader in term 4.
		log1.mu.Lock()
		log2 := &memLog{term: 4, recs: slices.Clone(log1.recs)}
		log1.term = 0
		log1.mu.Unlock()
		time.Sleep(2 * tick)
		synctest.Wait()
		wantErr(t, "the old coordinator", e1.c.Check("t"), kerr.NotCoordinator)
		tried := len(unreachable.attempts())
		time.Sleep(time.Minute)
		synctest.Wait()
		if n := len(unreachable.attempts()); n != tried {
			t.Fatalf("the deposed coordinator went on sending markers: %d attempts after %d", n, tried)
		}
		mk := &fakeMarkers{}
		e2 := newEnv(t, log2, mk)
		synctest.Wait()
		if d := e2.state("t"); d.State != CompleteCommit || d.ProducerID != pid || d.ProducerEpoch != epoch {
			t.Fatalf("the new coordinator: %+v", d)
		}
		calls := mk.attempts()
		if len(calls) != 1 || !calls[0].Commit || calls[0].CoordinatorEpoch != 4 || !slices.Equal(calls[0].Partitions, []TopicPartition{orders0, orders1}) {
			t.Fatalf("markers of the new coordinator: %+v", calls)
		}
		if d := e2.state("open"); d.State != Ongoing || !slices.Equal(d.Partitions, []TopicPartition{orders1}) {
			t.Fatalf("the open transaction: %+v", d)
		}
		if got, want := log2.states(t, "t"), []State{Empty, Ongoing, PrepareCommit, CompleteCommit}; !slices.Equal(got, want) {
			t.Fatalf("records %v, want %v", got, want)
		}
		if err := e2.c.AddPartitions(ctx, "t", pid, epoch, []TopicPartition{orders0}); err != nil {
			t.Fatalf("the producer goes on with the new coordinator: %v", err)
		}
	})
}

// TestDescribeAndList: Describe of an unknown id is
// TRANSACTIONAL_ID_NOT_FOUND; List filters by state, producer id and
// duration; a partition still loading makes both
// COORDINATOR_LOAD_IN_PROGRESS, one led elsewhere NOT_COORDINATOR.
func TestDescribeAndList(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, &memLog{term: 1}, &fakeMarkers{})
		pa, ea := e.mustInit("a")
		pb, _ := e.mustInit("b")
		e.add("a", pa, ea, orders0)
		_, err := e.c.Describe("nobody")
		wantErr(t, "describe unknown", err, kerr.TransactionalIDNotFound)
		time.Sleep(5 * time.Second)
		ids := func(f ListFilter) []string {
			l, err := e.c.List(f)
			if err != nil {
				t.Fatal(err)
			}
			var out []string
			for _, d := range l {
				out = append(out, d.TransactionalID)
			}
			return out
		}
		for _, c := range []struct {
			f    ListFilter
			want []string
		}{
			{ListFilter{}, []string{"a", "b"}},
			{ListFilter{States: []State{Ongoing}}, []string{"a"}},
			{ListFilter{ProducerIDs: []int64{pb}}, []string{"b"}},
			{ListFilter{MinDuration: 4 * time.Second}, []string{"a"}},
			{ListFilter{MinDuration: 6 * time.Second}, nil},
		} {
			if got := ids(c.f); !slices.Equal(got, c.want) {
				t.Errorf("%+v: %v, want %v", c.f, got, c.want)
			}
		}
	})
	hold := make(chan struct{})
	defer close(hold)
	logs := map[int32]Log{0: &holdLog{memLog: memLog{term: 1}, hold: hold}}
	c, err := New(Config{BrokerID: 1, Partitions: func() int32 { return 2 }, Open: func(p int32) Log { return logs[p] },
		AllocProducerID: func(context.Context) (int64, error) { return 1, nil }, Markers: &fakeMarkers{}, MaxTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	var loading, elsewhere string
	for i := 0; loading == "" || elsewhere == ""; i++ {
		id := fmt.Sprintf("id%d", i)
		if PartitionFor(id, 2) == 0 {
			loading = id
		} else {
			elsewhere = id
		}
	}
	wantErr(t, "check while loading", c.Check(loading), kerr.CoordinatorLoadInProgress)
	_, err = c.List(ListFilter{})
	wantErr(t, "list while loading", err, kerr.CoordinatorLoadInProgress)
	_, err = c.Describe(elsewhere)
	wantErr(t, "describe elsewhere", err, kerr.NotCoordinator)
}

// holdLog is a memLog whose reads wait for hold.
type holdLog struct {
	memLog
	hold chan struct{}
}

func (l *holdLog) Read(ctx context.Context, offset int64) ([]Record, int64, int64, error) {
	select {
	case <-l.hold:
	case <-ctx.Done():
		return nil, offset, 0, ctx.Err()
	}
	return l.memLog.Read(ctx, offset)
}

// TestRecordFormat: the record is readable JSON and a bad one is skipped.
func TestRecordFormat(t *testing.T) {
	r := encodeRecord("t", value{ProducerID: 5, LastProducerID: -1, ProducerEpoch: 2, LastProducerEpoch: -1, TimeoutMs: 60000,
		State: Ongoing, Partitions: []TopicPartition{orders0}, StartMs: 10, UpdateMs: 11})
	if string(r.Key) != `{"transactional_id":"t"}` {
		t.Fatalf("key %s", r.Key)
	}
	var m map[string]any
	if err := json.Unmarshal(r.Value, &m); err != nil || m["state"] != "Ongoing" || m["producer_id"] != float64(5) {
		t.Fatalf("value %s: %v", r.Value, err)
	}
	if _, _, err := decodeRecord(Record{Key: r.Key, Value: []byte(`{"state":"Sleeping"}`)}); err == nil {
		t.Fatal("an unknown state decoded")
	}
}

// TestRecoveringProducerIsBumpedAfterItsAbort: a producer that recovers
// with KIP-360 (InitProducerId naming its own id and epoch, as franz-go
// does after a produce error while a transaction is open) gets its
// transaction aborted with the epoch bumped and CONCURRENT_TRANSACTIONS;
// its retry with the same epoch once the abort completed gets the epoch
// bumped past the abort markers' one, not PRODUCER_FENCED (which left
// TestKafkaEOSReadProcessWrite's pipeline with no usable epoch: the
// coordinator stayed at CompleteAbort, epoch+1, forever).
func TestRecoveringProducerIsBumpedAfterItsAbort(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		log := &memLog{term: 1}
		mk := &fakeMarkers{hold: make(chan struct{})}
		e := newEnv(t, log, mk)
		pid, epoch := e.mustInit("t")
		e.add("t", pid, epoch, orders0)
		_, _, err := e.init("t", pid, epoch)
		wantErr(t, "the recovering producer's InitProducerId", err, kerr.ConcurrentTransactions)
		synctest.Wait()
		_, _, err = e.init("t", pid, epoch)
		wantErr(t, "its retry while the abort completes", err, kerr.ConcurrentTransactions)
		close(mk.hold)
		synctest.Wait()
		p2, e2, err := e.init("t", pid, epoch)
		if err != nil || p2 != pid || e2 != epoch+2 {
			t.Fatalf("retry after the abort: %d/%d %v, want %d/%d", p2, e2, err, pid, epoch+2)
		}
		if calls := mk.attempts(); len(calls) != 1 || calls[0].Commit || calls[0].ProducerEpoch != epoch+1 {
			t.Fatalf("abort markers: %+v", calls)
		}
		e.add("t", p2, e2, orders1)
		wantErr(t, "the old epoch's add", e.c.AddPartitions(context.Background(), "t", pid, epoch, []TopicPartition{orders0}), kerr.ProducerFenced)
		if got, want := log.states(t, "t"), []State{Empty, Ongoing, PrepareAbort, CompleteAbort, Empty, Ongoing}; !slices.Equal(got, want) {
			t.Fatalf("records %v, want %v", got, want)
		}
	})
}

// TestHoldConcurrent: an AddPartitionsToTxn that arrives while the previous
// commit's markers are being written is held and answered success once the
// transaction completed (not CONCURRENT_TRANSACTIONS); when completion
// takes longer than the hold, it is CONCURRENT_TRANSACTIONS after
// concurrentHold, counted by ConcurrentAnswers.
func TestHoldConcurrent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, mk, pid, epoch := preparedCommit(t)
		ctx := context.Background()
		errc := make(chan error, 1)
		start := time.Now()
		go func() { errc <- e.c.AddPartitions(ctx, "t", pid, epoch, []TopicPartition{orders1}) }()
		time.Sleep(concurrentHold / 2)
		synctest.Wait()
		select {
		case err := <-errc:
			t.Fatalf("answered before completion: %v", err)
		default:
		}
		close(mk.hold)
		if err := <-errc; err != nil {
			t.Fatalf("AddPartitions held over the completion: %v", err)
		}
		if d := e.state("t"); d.State != Ongoing || !slices.Equal(d.Partitions, []TopicPartition{orders1}) {
			t.Fatalf("after the held AddPartitions: %+v", d)
		}
		if got := time.Since(start); got != concurrentHold/2 {
			t.Fatalf("answered after %v, want %v (at completion)", got, concurrentHold/2)
		}
		if n := e.c.ConcurrentAnswers(); len(n) != 0 {
			t.Fatalf("CONCURRENT_TRANSACTIONS answers %v, want none", n)
		}

		// Completion slower than the hold.
		mk.mu.Lock()
		mk.hold = make(chan struct{})
		mk.mu.Unlock()
		e.end("t", pid, epoch, true)
		synctest.Wait()
		start = time.Now()
		err := e.c.AddPartitions(ctx, "t", pid, epoch, []TopicPartition{orders1})
		wantErr(t, "add partitions past the hold", err, kerr.ConcurrentTransactions)
		if got := time.Since(start); got != concurrentHold {
			t.Fatalf("CONCURRENT_TRANSACTIONS after %v, want %v", got, concurrentHold)
		}
		if n := e.c.ConcurrentAnswers(); n[KindAddPartitions] != 1 {
			t.Fatalf("CONCURRENT_TRANSACTIONS answers %v, want 1 AddPartitionsToTxn", n)
		}
		close(mk.hold)
		synctest.Wait()
		e.add("t", pid, epoch, orders1)
	})
}
