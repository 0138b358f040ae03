package replication

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"

	"github.com/tapes-dev/tapes/internal/eventually"
	"github.com/tapes-dev/tapes/internal/kerr"
	"github.com/tapes-dev/tapes/internal/metadata"
	"github.com/tapes-dev/tapes/internal/raftlog"
	"github.com/tapes-dev/tapes/internal/raftnet"
	"github.com/tapes-dev/tapes/internal/storage"
)

// faultyLog is a logWriter that fails (fail set) or blocks (gate armed)
// on demand.
type faultyLog struct {
	logWriter
	fail atomic.Bool
	mu   sync.Mutex
	// gate, when set, is waited on by the next Append, which first closes
	// entered.
	gate, entered chan struct{}
}

var errDiskGone = errors.New("input/output error (injected)")

func (f *faultyLog) Append(index uint64, b storage.Batch) (int64, error) {
	if f.fail.Load() {
		return 0, fmt.Errorf("append: %w", errDiskGone)
	}
	f.mu.Lock()
	gate, entered := f.gate, f.entered
	f.gate, f.entered = nil, nil
	f.mu.Unlock()
	if gate != nil {
		close(entered)
		<-gate
	}
	return f.logWriter.Append(index, b)
}

// arm makes the next Append wait for the returned release; entered is
// closed once it does.
func (f *faultyLog) arm() (entered chan struct{}, release func()) {
	gate := make(chan struct{})
	entered = make(chan struct{})
	f.mu.Lock()
	f.gate, f.entered = gate, entered
	f.mu.Unlock()
	var once sync.Once
	return entered, func() { once.Do(func() { close(gate) }) }
}

// openSolo opens a single-replica partition (broker 1, RF 1) in dir over a
// real Raft group and waits until it is a ready leader. fault, if not nil,
// wraps what its FSM writes through; opts change its Config.
func openSolo(t *testing.T, dir string, fault *faultyLog, opts ...func(*Config)) *Replica {
	t.Helper()
	mux, err := raftnet.NewMux(raftnet.Config{LocalID: ServerID(1), Logger: quietLogger(),
		Resolve:    func(a raft.ServerAddress) (string, error) { return "", fmt.Errorf("no peer %s", a) },
		RPCTimeout: time.Second, HeartbeatTimeout: time.Second, SnapshotTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mux.Close() })
	r := openTestReplica(t, mux, dir, 1, []metadata.BrokerID{1}, fault, opts...)
	eventually.True(t, 30*time.Second, "the replica to lead", func() bool {
		r.CheckLeadership()
		return r.ReadyTerm() != 0
	})
	return r
}

// openTestReplica opens broker id's replica of partition t-0 (min.insync
// 2 when RF > 1) in dir over mux, closed with the test. fault, if not nil,
// wraps what its FSM writes through.
func openTestReplica(t *testing.T, mux *raftnet.Mux, dir string, id metadata.BrokerID, replicas []metadata.BrokerID, fault *faultyLog, opts ...func(*Config)) *Replica {
	t.Helper()
	trans, err := mux.Group("t-0@1")
	if err != nil {
		t.Fatal(err)
	}
	tc := metadata.DefaultTopicConfig()
	tc.MinInsyncReplicas = min(2, len(replicas))
	cfg := Config{Topic: "t", TopicID: 1, Dir: dir, LocalID: id, Replicas: replicas,
		TopicConfig: tc, Raft: DefaultRaftTimings(), ReplicaLagTimeMax: 10 * time.Second,
		RetentionCheckInterval: time.Hour, Transport: trans, Logger: quietLogger(),
		RaftLog: testRaftLog(t, dir+".wal"), NewRaftLog: testRaftLogKind}
	if fault != nil {
		cfg.wrapLog = func(w logWriter) logWriter { fault.logWriter = w; return fault }
	}
	for _, o := range opts {
		o(&cfg)
	}
	r, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// testRaftLogKind is where openTestReplica's new groups keep their Raft
// log (tests that compare the stores change it; none runs in parallel).
var testRaftLogKind = RaftLogWAL

var testRaftLogs = struct {
	sync.Mutex
	m map[string]*raftlog.Log
}{m: map[string]*raftlog.Log{}}

// testRaftLog returns the shared Raft log in dir, opened once per test
// (as a broker's stays open while its replicas close and reopen) and
// closed after the test's replicas.
func testRaftLog(t *testing.T, dir string) *raftlog.Log {
	t.Helper()
	testRaftLogs.Lock()
	defer testRaftLogs.Unlock()
	if l, ok := testRaftLogs.m[dir]; ok {
		return l
	}
	l, err := raftlog.Open(dir, raftlog.Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	testRaftLogs.m[dir] = l
	t.Cleanup(func() {
		testRaftLogs.Lock()
		delete(testRaftLogs.m, dir)
		testRaftLogs.Unlock()
		l.Close()
	})
	return l
}

func produceValues(t *testing.T, r *Replica, acks int, p storage.ProducerInfo, values ...string) (ProduceResult, error) {
	t.Helper()
	recs := make([]storage.Record, len(values))
	for i, v := range values {
		recs[i] = storage.Record{Timestamp: 1, Value: []byte(v)}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return r.Produce(ctx, acks, storage.EncodeProducerBatch(p, recs))
}

func valuesAt(t *testing.T, r *Replica) []string {
	t.Helper()
	recs, err := r.log.Read(r.log.StartOffset(), 1<<20, r.log.EndOffset())
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(recs))
	for i, rec := range recs {
		if rec.Offset != int64(i) {
			t.Fatalf("record %d at offset %d", i, rec.Offset)
		}
		out[i] = string(rec.Value)
	}
	return out
}

// TestStorageFailureTakesReplicaOut: a storage I/O error while applying a
// committed entry takes the replica out: that request and every later one
// answer KAFKA_STORAGE_ERROR, nothing later is appended at shifted
// offsets, Raft stops; reopened from disk (a broker restart), the replica
// re-applies the entry it missed and every record is at its offset.
func TestStorageFailureTakesReplicaOut(t *testing.T) {
	dir := t.TempDir()
	fault := &faultyLog{}
	r := openSolo(t, dir, fault)
	if res, err := produceValues(t, r, AcksAll, storage.NoProducer, "a"); err != nil || res.BaseOffset != 0 {
		t.Fatalf("first batch: %+v, %v", res, err)
	}
	fault.fail.Store(true)
	if _, err := produceValues(t, r, AcksAll, storage.NoProducer, "b"); !kerr.Is(err, kerr.KafkaStorageError) {
		t.Fatalf("batch the storage failed to append: %v, want %s", err, kerr.KafkaStorageError)
	}
	fault.fail.Store(false) // the disk "works" again: the replica must still stay out
	for _, acks := range []int{AcksAll, AcksLeader} {
		if res, err := produceValues(t, r, acks, storage.NoProducer, "c"); !kerr.Is(err, kerr.KafkaStorageError) {
			t.Fatalf("acks=%d after the failure: %+v, %v; want %s", acks, res, err, kerr.KafkaStorageError)
		}
	}
	if _, err := r.Fetch(context.Background(), 0, 1<<20, 0); !kerr.Is(err, kerr.KafkaStorageError) {
		t.Fatalf("fetch after the failure: %v, want %s", err, kerr.KafkaStorageError)
	}
	eventually.True(t, 30*time.Second, "raft to stop", func() bool { return r.Raft().State() == raft.Shutdown })
	if got := valuesAt(t, r); len(got) != 1 {
		t.Fatalf("the failed replica's log holds %q, want only the first record", got)
	}
	if err := r.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}

	r = openSolo(t, dir, nil)
	eventually.True(t, 30*time.Second, "the missed entry to be re-applied", func() bool { return r.HighWatermark() == 2 })
	if res, err := produceValues(t, r, AcksAll, storage.NoProducer, "d"); err != nil || res.BaseOffset != 2 {
		t.Fatalf("after the restart: %+v, %v", res, err)
	}
	if got := fmt.Sprint(valuesAt(t, r)); got != "[a b d]" {
		t.Fatalf("log after the restart: %s, want [a b d]", got)
	}
}

// TestAcks1OffsetBehindDuplicate: another producer's retried batch is
// stored, unapplied, before an acks=1 batch; it applies as a duplicate
// (appends nothing), and the offset acks=1 answers is the one its record
// gets.
func TestAcks1OffsetBehindDuplicate(t *testing.T) {
	fault := &faultyLog{}
	r := openSolo(t, t.TempDir(), fault)
	idem := storage.ProducerInfo{ID: 5}
	if res, err := produceValues(t, r, AcksAll, idem, "p0"); err != nil || res.BaseOffset != 0 {
		t.Fatalf("idempotent batch: %+v, %v", res, err)
	}
	entered, release := fault.arm()
	defer release()
	if _, err := produceValues(t, r, AcksNone, storage.NoProducer, "y"); err != nil {
		t.Fatal(err)
	}
	<-entered // the FSM is now held applying "y": later entries are stored, unapplied
	last := r.Raft().LastIndex()
	dup := make(chan error, 1)
	go func() {
		res, err := produceValues(t, r, AcksAll, idem, "p0") // the retry
		if err == nil && (!res.Duplicate || res.BaseOffset != 0) {
			err = fmt.Errorf("retry answered %+v, want a duplicate of offset 0", res)
		}
		dup <- err
	}()
	eventually.True(t, 20*time.Second, "the retry to be stored", func() bool { return r.Raft().LastIndex() > last })
	type answer struct {
		res ProduceResult
		err error
	}
	one := make(chan answer, 1)
	go func() {
		res, err := produceValues(t, r, AcksLeader, storage.NoProducer, "x")
		one <- answer{res, err}
	}()
	eventually.True(t, 20*time.Second, "x to be stored", func() bool { return r.Raft().LastIndex() > last+1 })
	release()
	a := <-one
	if a.err != nil {
		t.Fatalf("acks=1: %v", a.err)
	}
	if err := <-dup; err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 20*time.Second, "x to apply", func() bool { return r.HighWatermark() == 3 })
	got := valuesAt(t, r)
	if a.res.BaseOffset < 0 || a.res.BaseOffset >= int64(len(got)) || got[a.res.BaseOffset] != "x" {
		t.Fatalf("acks=1 answered offset %d; the log is %q", a.res.BaseOffset, got)
	}
}

// trio is three brokers' Muxes on loopback gRPC servers, with one replica
// each of an RF 3 partition.
type trio struct {
	t     *testing.T
	dirs  [3]string
	muxes [3]*raftnet.Mux
	reps  [3]*Replica
}

func newTrio(t *testing.T, fault *faultyLog, faulty int) *trio {
	t.Helper()
	tr := &trio{t: t}
	muxes := newMuxes(t, 3)
	for i := range 3 {
		tr.muxes[i], tr.dirs[i] = muxes[i], t.TempDir()
	}
	for i := range 3 {
		var f *faultyLog
		if i == faulty {
			f = fault
		}
		tr.open(i, f)
	}
	return tr
}

// newMuxes returns n brokers' Muxes (ids 1..n) on loopback gRPC servers,
// each resolving the others.
func newMuxes(t *testing.T, n int) []*raftnet.Mux {
	t.Helper()
	var addrs sync.Map
	out := make([]*raftnet.Mux, n)
	for i := range n {
		id := metadata.BrokerID(i + 1)
		mux, err := raftnet.NewMux(raftnet.Config{LocalID: ServerID(id), Logger: quietLogger(),
			Resolve: func(a raft.ServerAddress) (string, error) {
				if v, ok := addrs.Load(a); ok {
					return v.(string), nil
				}
				return "", fmt.Errorf("no peer %s", a)
			},
			RPCTimeout: time.Second, HeartbeatTimeout: time.Second, SnapshotTimeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := grpc.NewServer(raftnet.ServerOptions()...)
		mux.Register(srv)
		go srv.Serve(lis)
		t.Cleanup(func() { mux.Close(); srv.Stop() })
		addrs.Store(raft.ServerAddress(ServerID(id)), lis.Addr().String())
		out[i] = mux
	}
	return out
}

// open opens broker i+1's replica (again).
func (tr *trio) open(i int, fault *faultyLog) {
	tr.reps[i] = openTestReplica(tr.t, tr.muxes[i], tr.dirs[i], metadata.BrokerID(i+1), []metadata.BrokerID{1, 2, 3}, fault)
}

// leader waits until one replica other than skip (index, -1: none) is a
// ready leader and returns its index. The broker's observer calls
// CheckLeadership on Raft's state changes; the test does it here.
func (tr *trio) leader(skip int) int {
	tr.t.Helper()
	return readyLeader(tr.t, tr.reps[:], skip)
}

// readyLeader waits until one of reps (nil entries and index skip left
// out) is a ready leader and returns its index.
func readyLeader(t *testing.T, reps []*Replica, skip int) int {
	t.Helper()
	found := -1
	eventually.True(t, 30*time.Second, "a ready leader", func() bool {
		for i, r := range reps {
			if i == skip || r == nil {
				continue
			}
			r.CheckLeadership()
			if r.ReadyTerm() != 0 {
				found = i
				return true
			}
		}
		return false
	})
	return found
}

// TestStorageFailureHandsLeadershipOver: the leader whose storage fails
// answers KAFKA_STORAGE_ERROR and hands its leadership over; the other
// replicas go on, with the committed batch at the same offset, and the
// failed one, reopened, catches up to the same log.
func TestStorageFailureHandsLeadershipOver(t *testing.T) {
	fault := &faultyLog{}
	tr := newTrio(t, fault, 0)
	// Broker 1 is the preferred replica of the new group and leads first.
	if got := tr.leader(-1); got != 0 {
		t.Fatalf("replica %d leads first, want 0", got)
	}
	eventually.True(t, 30*time.Second, "a full ISR", func() bool { return len(tr.reps[0].ISR()) == 3 })
	if res, err := produceValues(t, tr.reps[0], AcksAll, storage.NoProducer, "a"); err != nil || res.BaseOffset != 0 {
		t.Fatalf("first batch: %+v, %v", res, err)
	}
	fault.fail.Store(true)
	if _, err := produceValues(t, tr.reps[0], AcksAll, storage.NoProducer, "b"); !kerr.Is(err, kerr.KafkaStorageError) {
		t.Fatalf("batch the leader's storage failed to append: %v, want %s", err, kerr.KafkaStorageError)
	}
	fault.fail.Store(false)
	next := tr.leader(0)
	eventually.True(t, 30*time.Second, "the failed replica's Raft to stop", func() bool { return tr.reps[0].Raft().State() == raft.Shutdown })
	if _, err := produceValues(t, tr.reps[0], AcksAll, storage.NoProducer, "x"); !kerr.Is(err, kerr.KafkaStorageError) {
		t.Fatalf("the failed replica after the handover: %v, want %s", err, kerr.KafkaStorageError)
	}
	res, err := produceValues(t, tr.reps[next], AcksAll, storage.NoProducer, "c")
	if err != nil || res.BaseOffset != 2 {
		t.Fatalf("new leader %d: %+v, %v; want offset 2 (after the committed batch b)", next+1, res, err)
	}
	if err := tr.reps[0].Close(); err != nil {
		t.Fatal(err)
	}
	tr.open(0, nil) // the broker restarts
	for i := range tr.reps {
		eventually.True(t, 30*time.Second, fmt.Sprintf("replica %d to apply everything", i+1), func() bool { return tr.reps[i].HighWatermark() == 3 })
		if got := fmt.Sprint(valuesAt(t, tr.reps[i])); got != "[a b c]" {
			t.Fatalf("replica %d holds %s, want [a b c]", i+1, got)
		}
	}
}
