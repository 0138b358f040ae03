package txn

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tapes-dev/tapes/internal/client"
	"github.com/tapes-dev/tapes/internal/group"
	"github.com/tapes-dev/tapes/internal/kerr"
)

// writeTimeout bounds a write the coordinator makes on its own behalf (a
// completion, a timeout's abort), independent of any request.
const writeTimeout = 10 * time.Second

// epochExhausted is Kafka's isProducerEpochExhausted: from this epoch on, a
// bump allocates a new producer id.
const epochExhausted = math.MaxInt16 - 1

// shard is the coordinator's state for one __transaction_state partition it
// leads in one Raft term.
type shard struct {
	c    *Coordinator
	p    int32
	term uint64
	log  Log

	// ready is closed when load finished; err is its outcome (read only
	// after ready is closed).
	ready chan struct{}
	err   error
	// done is closed by close: completions stop, writes fail.
	done      chan struct{}
	closeOnce sync.Once
	// stale is set when a write's outcome is unknown (it may have
	// committed without this shard applying it): the Coordinator then
	// replaces the shard, whose load reads the truth from the log.
	stale atomic.Bool

	// writes orders appends against compaction (compact.go): append
	// holds it shared for the whole write, compact exclusively.
	writes sync.RWMutex

	mu sync.Mutex
	// txns: every transactional id of the partition. Guarded by mu.
	txns map[string]*txnMeta
	// waiters: requests held on an id until its next committed write
	// (see hold). Guarded by mu.
	waiters map[string]chan struct{}
	// sched counts the partition's records from its log start and says
	// when to compact it (compact.go).
	sched group.CompactSchedule
}

// txnMeta is one transactional id's state. Guarded by shard.mu.
type txnMeta struct {
	// v is the committed state; fresh is set while the first write of a
	// new id is in flight (v is then not committed: the id is not shown).
	v     value
	fresh bool
	// pending: a write of this id is in flight. Invariant: at most one
	// at a time, so records of one id are in the log in state order.
	pending bool
}

func newShard(c *Coordinator, p int32, term uint64, l Log) *shard {
	return &shard{c: c, p: p, term: term, log: l, ready: make(chan struct{}), done: make(chan struct{}), txns: map[string]*txnMeta{}}
}

func (s *shard) close() { s.closeOnce.Do(func() { close(s.done) }) }

func (s *shard) isStale() bool { return s.stale.Load() }

func (s *shard) failed() bool {
	select {
	case <-s.ready:
		return s.err != nil
	default:
		return false
	}
}

func (s *shard) loaded() bool {
	select {
	case <-s.ready:
		return s.err == nil
	default:
		return false
	}
}

// loadErr is nil once the shard is loaded, else
// COORDINATOR_LOAD_IN_PROGRESS.
func (s *shard) loadErr(id string) error {
	select {
	case <-s.ready:
	default:
		return kerr.New(kerr.CoordinatorLoadInProgress, "broker %d is loading %s-%d (transactional id %q)", s.c.cfg.BrokerID, StateTopic, s.p, id)
	}
	if s.err != nil {
		return kerr.New(kerr.CoordinatorLoadInProgress, "broker %d failed to load %s-%d (transactional id %q): %v", s.c.cfg.BrokerID, StateTopic, s.p, id, s.err)
	}
	return nil
}

// context returns a context that ends after timeout (none when 0) or when
// the shard closes.
func (s *shard) context(parent context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(parent)
	if timeout > 0 {
		ctx, cancel = context.WithTimeout(parent, timeout)
	}
	go func() {
		select {
		case <-s.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// load rebuilds the partition's transactions from its log (the latest
// record of each id wins), then finishes every prepared transaction.
func (s *shard) load() {
	start := time.Now()
	ctx, cancel := s.context(context.Background(), time.Minute)
	defer cancel()
	n, err := s.scan(ctx)
	if err != nil {
		s.err = err
		close(s.ready)
		return
	}
	var prepared []string
	s.mu.Lock()
	s.sched.Loaded(int64(n), s.c.cfg.CompactAfter)
	ids := len(s.txns)
	for id, t := range s.txns {
		if t.v.State == PrepareCommit || t.v.State == PrepareAbort {
			prepared = append(prepared, id)
		}
	}
	s.mu.Unlock()
	close(s.ready)
	slices.Sort(prepared)
	s.c.log.Info("transaction coordinator loaded", "partition", s.p, "epoch", s.term, "transactional_ids", ids,
		"records", n, "prepared", len(prepared), "took", time.Since(start).Round(time.Millisecond))
	for _, id := range prepared {
		go func() {
			if s.complete(id) {
				s.c.log.Info("finished a transaction prepared before this coordinator", "transactional_id", id, "partition", s.p, "epoch", s.term)
			}
		}()
	}
}

// scan reads the partition from its log start to its high watermark when
// the scan began into s.txns (a tombstone, an expired id, removes its id);
// it returns how many records it read.
func (s *shard) scan(ctx context.Context) (int, error) {
	n, _, err := s.readLog(ctx, 0, func(id string, v value, _ Record) {
		if v.State == Dead {
			delete(s.txns, id)
			return
		}
		s.txns[id] = &txnMeta{v: v}
	})
	return n, err
}

// readLog reads the partition from offset from up to its high watermark
// when the read began and calls fn with every record it can decode. It
// returns how many records it read, decodable or not, and the offset after
// the last.
func (s *shard) readLog(ctx context.Context, from int64, fn func(id string, v value, r Record)) (int, int64, error) {
	n, end, err := group.ScanLog(ctx, s.log, from, func(r Record) {
		id, v, err := decodeRecord(r)
		if err != nil {
			s.c.log.Warn("skipping an undecodable record", "partition", s.p, "offset", r.Offset, "err", err)
			return
		}
		fn(id, v, r)
	})
	if err != nil {
		return n, end, fmt.Errorf("read %s-%d %w", StateTopic, s.p, err)
	}
	return n, end, nil
}

// live checks, under s.mu, that this shard still coordinates id.
func (s *shard) live(id string) error {
	select {
	case <-s.done:
	default:
		if s.log.Term() == s.term && !s.isStale() {
			return nil
		}
	}
	return kerr.New(kerr.NotCoordinator, "broker %d is no longer the coordinator of transactional id %s (%s-%d)", s.c.cfg.BrokerID, id, StateTopic, s.p)
}

// write appends v as id's new state and applies it once committed. The
// caller set t.pending under s.mu (and holds no lock); write clears it.
// A lost leadership is NOT_COORDINATOR; another failure is
// COORDINATOR_NOT_AVAILABLE (the client retries) and, unless nothing was
// appended, makes the shard stale.
func (s *shard) write(ctx context.Context, id string, t *txnMeta, v value) error {
	err := s.append(ctx, id, v)
	s.mu.Lock()
	defer s.mu.Unlock()
	t.pending = false
	defer s.notify(id)
	if err != nil {
		if t.fresh && s.txns[id] == t {
			delete(s.txns, id)
		}
		return err
	}
	t.v, t.fresh = v, false
	return nil
}

func (s *shard) append(ctx context.Context, id string, v value) error {
	return s.appendRecords(ctx, "transactional id "+id, []Record{encodeRecord(id, v)})
}

// appendRecords appends recs (what names them in errors) as one batch,
// held off while a compaction runs, and counts them once committed. Errors
// as write's.
func (s *shard) appendRecords(ctx context.Context, what string, recs []Record) error {
	s.writes.RLock()
	defer s.writes.RUnlock()
	if s.log.Term() != s.term {
		return kerr.New(kerr.NotCoordinator, "broker %d no longer leads %s-%d", s.c.cfg.BrokerID, StateTopic, s.p)
	}
	_, err := s.log.Append(ctx, recs)
	switch {
	case err == nil:
		s.sched.Wrote(len(recs))
		return nil
	case kerr.Is(err, kerr.NotLeaderOrFollower) || kerr.Is(err, kerr.LeaderNotAvailable) || s.log.Term() != s.term:
		s.stale.Store(true)
		return kerr.New(kerr.NotCoordinator, "broker %d lost the leadership of %s-%d while writing %s: %v", s.c.cfg.BrokerID, StateTopic, s.p, what, err)
	case kerr.Is(err, kerr.NotEnoughReplicas):
		// Nothing appended: the state is as it was.
	default:
		s.stale.Store(true)
	}
	return kerr.New(kerr.CoordinatorNotAvailable, "writing %s to %s-%d: %v", what, StateTopic, s.p, err)
}

// fenced returns PRODUCER_FENCED for a producer at epoch against t.
func fenced(id string, epoch int16, t *txnMeta) error {
	return kerr.New(kerr.ProducerFenced, "transactional id %s: producer epoch %d is not the current one (%d): a newer producer with the same transactional id fenced this one",
		id, epoch, t.v.ProducerEpoch)
}

func concurrent(id string, t *txnMeta) error {
	return kerr.New(kerr.ConcurrentTransactions, "transactional id %s: the previous transaction (%s) is still completing; retry", id, t.v.State)
}

// initProducerID: see Coordinator.InitProducerID.
func (s *shard) initProducerID(ctx context.Context, req InitRequest) (int64, int16, error) {
	id := req.TransactionalID
	now := millis(s.c.cfg.Now())
	s.mu.Lock()
	if err := s.live(id); err != nil {
		s.mu.Unlock()
		return -1, -1, err
	}
	t := s.txns[id]
	if t == nil {
		t = &txnMeta{fresh: true, pending: true}
		s.txns[id] = t
		s.mu.Unlock()
		pid, err := s.c.cfg.AllocProducerID(ctx)
		if err != nil {
			s.mu.Lock()
			t.pending = false
			if s.txns[id] == t {
				delete(s.txns, id)
			}
			s.mu.Unlock()
			return -1, -1, err
		}
		v := value{ProducerID: pid, LastProducerID: -1, ProducerEpoch: 0, LastProducerEpoch: -1, TimeoutMs: req.TimeoutMs, State: Empty, StartMs: -1, UpdateMs: now}
		if err := s.write(ctx, id, t, v); err != nil {
			return -1, -1, err
		}
		s.c.log.Info("transactional id registered", "transactional_id", id, "producer_id", pid, "epoch", 0)
		return pid, 0, nil
	}
	if t.pending {
		s.mu.Unlock()
		return -1, -1, concurrent(id, t)
	}
	cur := t.v
	expected := req.ProducerID >= 0
	if expected && !(cur.ProducerEpoch < 0 || req.ProducerID == cur.ProducerID ||
		(req.ProducerID == cur.LastProducerID && req.ProducerEpoch >= epochExhausted)) {
		s.mu.Unlock()
		return -1, -1, kerr.New(kerr.ProducerFenced, "transactional id %s: producer id %d (epoch %d) is not the current one (%d, epoch %d)",
			id, req.ProducerID, req.ProducerEpoch, cur.ProducerID, cur.ProducerEpoch)
	}
	switch cur.State {
	case PrepareCommit, PrepareAbort:
		s.mu.Unlock()
		return -1, -1, concurrent(id, t)
	case Ongoing:
		// The previous incarnation's transaction: abort it with the epoch
		// bumped (fencing it); the caller retries until it completed.
		v := s.fence(t, now)
		if expected && req.ProducerID == cur.ProducerID && req.ProducerEpoch == cur.ProducerEpoch {
			// KIP-360: the current producer itself recovers (franz-go
			// does after a produce error); it retries with the same
			// epoch once the abort completed, and must then get a bump.
			v.LastProducerEpoch = cur.ProducerEpoch
		}
		t.pending = true
		s.mu.Unlock()
		if err := s.write(ctx, id, t, v); err != nil {
			return -1, -1, err
		}
		s.c.log.Info("aborting the ongoing transaction of a new producer's predecessor", "transactional_id", id,
			"producer_id", v.ProducerID, "fenced_epoch", cur.ProducerEpoch)
		go s.complete(id)
		return -1, -1, kerr.New(kerr.ConcurrentTransactions, "transactional id %s: aborting the previous producer's ongoing transaction; retry", id)
	}
	// Empty, CompleteCommit, CompleteAbort: bump.
	v := cur
	v.TimeoutMs, v.UpdateMs, v.State, v.Partitions, v.StartMs = req.TimeoutMs, now, Empty, nil, -1
	switch {
	case cur.ProducerEpoch >= epochExhausted && (!expected || req.ProducerEpoch == cur.ProducerEpoch):
		t.pending = true
		s.mu.Unlock()
		return s.rotate(ctx, id, t, v, expected)
	case !expected:
		v.ProducerEpoch, v.LastProducerEpoch = cur.ProducerEpoch+1, -1
	case cur.ProducerEpoch < 0 || req.ProducerEpoch == cur.ProducerEpoch:
		v.ProducerEpoch, v.LastProducerEpoch = cur.ProducerEpoch+1, cur.ProducerEpoch
	case cur.State == CompleteAbort && req.ProducerEpoch >= 0 && req.ProducerEpoch == cur.LastProducerEpoch:
		// The retry of a KIP-360 InitProducerId whose first attempt
		// aborted the producer's own transaction with the epoch bumped
		// (answered CONCURRENT_TRANSACTIONS): bump past the abort
		// markers' epoch. Answering PRODUCER_FENCED here left the
		// producer with no usable epoch.
		v.ProducerEpoch, v.LastProducerEpoch = cur.ProducerEpoch+1, cur.ProducerEpoch
	case req.ProducerEpoch == cur.LastProducerEpoch:
		// A retry of a bump whose answer was lost: the same answer.
		s.mu.Unlock()
		return cur.ProducerID, cur.ProducerEpoch, nil
	default:
		s.mu.Unlock()
		return -1, -1, fenced(id, req.ProducerEpoch, t)
	}
	t.pending = true
	s.mu.Unlock()
	if err := s.write(ctx, id, t, v); err != nil {
		return -1, -1, err
	}
	s.c.log.Info("producer epoch bumped", "transactional_id", id, "producer_id", v.ProducerID, "epoch", v.ProducerEpoch)
	return v.ProducerID, v.ProducerEpoch, nil
}

// rotate gives id a new producer id with epoch 0 (the epoch is
// exhausted). The caller set t.pending.
func (s *shard) rotate(ctx context.Context, id string, t *txnMeta, v value, recordLast bool) (int64, int16, error) {
	pid, err := s.c.cfg.AllocProducerID(ctx)
	if err != nil {
		s.mu.Lock()
		t.pending = false
		s.mu.Unlock()
		return -1, -1, err
	}
	v.LastProducerID, v.LastProducerEpoch = v.ProducerID, -1
	if recordLast {
		v.LastProducerEpoch = v.ProducerEpoch
	}
	v.ProducerID, v.ProducerEpoch = pid, 0
	if err := s.write(ctx, id, t, v); err != nil {
		return -1, -1, err
	}
	return pid, 0, nil
}

// fence returns t's ongoing transaction as PrepareAbort with the epoch
// bumped (Kafka's prepareFenceProducerEpoch then abort). Caller holds s.mu.
func (s *shard) fence(t *txnMeta, now int64) value {
	v := t.v
	v.Partitions = slices.Clone(v.Partitions)
	if v.ProducerEpoch < math.MaxInt16 {
		v.ProducerEpoch++
	}
	v.LastProducerEpoch = -1
	v.State, v.UpdateMs = PrepareAbort, now
	return v
}

// checkProducer checks, under s.mu, that the caller is id's current
// producer.
func (s *shard) checkProducer(id string, producerID int64, epoch int16) (*txnMeta, error) {
	if err := s.live(id); err != nil {
		return nil, err
	}
	t := s.txns[id]
	if t == nil || t.fresh {
		return nil, kerr.New(kerr.InvalidProducerIDMapping, "transactional id %s is not known to this coordinator: call InitProducerId first", id)
	}
	if producerID != t.v.ProducerID {
		return nil, kerr.New(kerr.InvalidProducerIDMapping, "transactional id %s has producer id %d, not %d", id, t.v.ProducerID, producerID)
	}
	if epoch != t.v.ProducerEpoch {
		return nil, fenced(id, epoch, t)
	}
	if t.pending {
		return nil, concurrent(id, t)
	}
	return t, nil
}

// addPartitions: see Coordinator.AddPartitions.
func (s *shard) addPartitions(ctx context.Context, id string, producerID int64, epoch int16, parts []TopicPartition) error {
	now := millis(s.c.cfg.Now())
	s.mu.Lock()
	t, err := s.checkProducer(id, producerID, epoch)
	if err != nil {
		s.mu.Unlock()
		return err
	}
	switch t.v.State {
	case PrepareCommit, PrepareAbort:
		s.mu.Unlock()
		return concurrent(id, t)
	}
	v := t.v
	v.Partitions = slices.Clone(v.Partitions)
	if v.State != Ongoing {
		v.Partitions, v.StartMs = nil, now
	}
	added := false
	for _, tp := range parts {
		if !slices.Contains(v.Partitions, tp) {
			v.Partitions = append(v.Partitions, tp)
			added = true
		}
	}
	if v.State == Ongoing && !added {
		s.mu.Unlock()
		return nil // every partition is in already
	}
	v.State, v.UpdateMs = Ongoing, now
	t.pending = true
	s.mu.Unlock()
	return s.write(ctx, id, t, v)
}

// endTxn: see Coordinator.EndTxn.
func (s *shard) endTxn(ctx context.Context, id string, producerID int64, epoch int16, commit bool) error {
	now := millis(s.c.cfg.Now())
	outcome := map[bool]string{true: "commit", false: "abort"}[commit]
	s.mu.Lock()
	t, err := s.checkProducer(id, producerID, epoch)
	if err != nil {
		s.mu.Unlock()
		return err
	}
	invalid := func() error {
		return kerr.New(kerr.InvalidTxnState, "transactional id %s: cannot %s a transaction in state %s", id, outcome, t.v.State)
	}
	state := t.v.State
	switch {
	case state == Ongoing:
	case state == PrepareCommit && commit, state == PrepareAbort && !commit:
		s.mu.Unlock()
		return concurrent(id, t)
	case state == CompleteCommit && commit, state == CompleteAbort && !commit:
		s.mu.Unlock()
		return nil // a retry of an end that completed
	default:
		s.mu.Unlock()
		return invalid()
	}
	v := t.v
	v.Partitions = slices.Clone(v.Partitions)
	v.State, v.UpdateMs = PrepareAbort, now
	if commit {
		v.State = PrepareCommit
	}
	t.pending = true
	s.mu.Unlock()
	if err := s.write(ctx, id, t, v); err != nil {
		return err
	}
	go s.complete(id)
	return nil
}

// abortTimedOut aborts, with the epoch bumped, every ongoing transaction
// older than its timeout (Kafka's abortTimedOutTransactions). Called by the
// ticker; the writes go on their own goroutines.
func (s *shard) abortTimedOut(now time.Time) {
	ms := millis(now)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.live("") != nil {
		return
	}
	for id, t := range s.txns {
		if t.pending || t.v.State != Ongoing || t.v.StartMs < 0 || ms-t.v.StartMs <= int64(t.v.TimeoutMs) {
			continue
		}
		v := s.fence(t, ms)
		t.pending = true
		s.c.log.Info("aborting a transaction past its timeout", "transactional_id", id, "producer_id", v.ProducerID,
			"fenced_epoch", t.v.ProducerEpoch, "timeout_ms", t.v.TimeoutMs, "age", time.Duration(ms-t.v.StartMs)*time.Millisecond)
		go func() {
			ctx, cancel := s.context(context.Background(), writeTimeout)
			defer cancel()
			if err := s.write(ctx, id, t, v); err != nil {
				s.c.log.Warn("could not abort a timed-out transaction", "transactional_id", id, "err", err)
				return
			}
			s.complete(id)
		}()
	}
}

// complete finishes id's prepared transaction: its markers written on
// every partition, then CompleteCommit or CompleteAbort. It runs on its own
// goroutine until done or the shard closes (the next coordinator then
// finishes it), and reports whether it completed the transaction.
func (s *shard) complete(id string) bool {
	s.mu.Lock()
	t := s.txns[id]
	if t == nil || (t.v.State != PrepareCommit && t.v.State != PrepareAbort) {
		s.mu.Unlock()
		return false
	}
	v := t.v
	s.mu.Unlock()
	ctx, cancel := s.context(context.Background(), 0)
	defer cancel()
	commit := v.State == PrepareCommit
	m := Marker{ProducerID: v.ProducerID, ProducerEpoch: v.ProducerEpoch, Commit: commit,
		CoordinatorEpoch: int32(min(s.term, math.MaxInt32)), Partitions: v.Partitions}
	start := time.Now()
	if err := s.writeMarkers(ctx, id, m); err != nil {
		s.c.log.Warn("transaction markers not written", "transactional_id", id, "state", v.State, "err", err)
		return false
	}
	next := v
	next.State, next.Partitions, next.StartMs, next.UpdateMs = CompleteAbort, nil, -1, millis(s.c.cfg.Now())
	if commit {
		next.State = CompleteCommit
	}
	s.mu.Lock()
	if s.txns[id] != t || t.pending || t.v.State != v.State {
		s.mu.Unlock()
		return false // cannot happen while Prepare* refuses every change
	}
	t.pending = true
	s.mu.Unlock()
	// Retried while nothing was appended (NOT_ENOUGH_REPLICAS); a write of
	// unknown outcome makes the shard stale, and its reload completes it.
	bo := client.NewBackoff(s.c.cfg.RetryBackoff, s.c.cfg.MaxRetryBackoff)
	for {
		wctx, wcancel := s.context(ctx, writeTimeout)
		err := s.write(wctx, id, t, next)
		wcancel()
		if err == nil {
			break
		}
		s.c.log.Warn("could not complete a transaction", "transactional_id", id, "state", next.State, "err", err)
		if kerr.Is(err, kerr.NotCoordinator) || s.isStale() || bo.Wait(ctx) != nil {
			return false
		}
		s.mu.Lock()
		t.pending = true
		s.mu.Unlock()
	}
	s.c.log.Info("transaction completed", "transactional_id", id, "producer_id", v.ProducerID, "epoch", v.ProducerEpoch,
		"state", next.State, "partitions", len(v.Partitions), "markers_took", time.Since(start).Round(time.Millisecond))
	return true
}

// writeMarkers writes m on every partition, retrying those that failed
// with client.Backoff until all hold it or ctx ends. A partition that
// answers INVALID_PRODUCER_EPOCH or TRANSACTION_COORDINATOR_FENCED knows a
// newer producer or coordinator: this coordinator stops (Kafka too), and
// the error is returned.
func (s *shard) writeMarkers(ctx context.Context, id string, m Marker) error {
	bo := client.NewBackoff(s.c.cfg.RetryBackoff, s.c.cfg.MaxRetryBackoff)
	left := slices.Clone(m.Partitions)
	for attempt := 1; len(left) > 0; attempt++ {
		m.Partitions = left
		errs := s.c.cfg.Markers.WriteMarkers(ctx, m)
		var again []TopicPartition
		var last error
		for i, tp := range left {
			var err error
			if i < len(errs) {
				err = errs[i]
			} else {
				err = fmt.Errorf("no answer for %s", tp)
			}
			switch {
			case err == nil:
			case errors.Is(err, ErrPartitionGone):
				s.c.log.Info("no marker needed: the partition is gone", "transactional_id", id, "partition", tp.String())
			case kerr.Is(err, kerr.InvalidProducerEpoch) || kerr.Is(err, kerr.TransactionCoordinatorFenced):
				return fmt.Errorf("marker on %s refused: %w", tp, err)
			default:
				again, last = append(again, tp), err
			}
		}
		left = again
		if len(left) == 0 {
			break
		}
		if attempt == 1 || attempt%10 == 0 {
			s.c.log.Info("retrying transaction markers", "transactional_id", id, "partitions", len(left), "attempt", attempt, "err", last)
		}
		if err := bo.Wait(ctx); err != nil {
			return fmt.Errorf("%d partitions without marker (last error %v): %w", len(left), last, err)
		}
	}
	return nil
}

// describe: see Coordinator.Describe.
func (s *shard) describe(id string) (Description, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.txns[id]
	if t == nil || t.fresh || t.v.State == Dead {
		return Description{}, kerr.New(kerr.TransactionalIDNotFound, "transactional id %s is not known to coordinator %d", id, s.c.cfg.BrokerID)
	}
	return s.description(id, t), nil
}

func (s *shard) description(id string, t *txnMeta) Description {
	return Description{TransactionalID: id, Coordinator: s.c.cfg.BrokerID, ProducerID: t.v.ProducerID, ProducerEpoch: t.v.ProducerEpoch,
		State: t.v.State, TimeoutMs: t.v.TimeoutMs, StartMs: t.v.StartMs, Partitions: slices.Clone(t.v.Partitions)}
}

// list: the shard's transactions f selects.
func (s *shard) list(f ListFilter, now int64) []Description {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Description
	for id, t := range s.txns {
		if t.fresh ||
			(len(f.States) > 0 && !slices.Contains(f.States, t.v.State)) ||
			(len(f.ProducerIDs) > 0 && !slices.Contains(f.ProducerIDs, t.v.ProducerID)) ||
			(f.MinDuration > 0 && (t.v.StartMs < 0 || now-t.v.StartMs <= f.MinDuration.Milliseconds())) {
			continue
		}
		out = append(out, s.description(id, t))
	}
	return out
}
