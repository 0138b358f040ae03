package replication

import (
	"context"
	"errors"
	"math"
	"time"

	"github.com/hashicorp/raft"

	"github.com/tapes-dev/tapes/internal/kerr"
	"github.com/tapes-dev/tapes/internal/metadata"
	"github.com/tapes-dev/tapes/internal/storage"
)

// Acks values as Kafka spells them.
const (
	AcksNone   = 0
	AcksLeader = 1
	AcksAll    = -1
)

// ProduceResult is a successful Produce.
type ProduceResult struct {
	// BaseOffset is -1 with acks=0; with acks=1 it is provisional (the
	// offset the entry gets if it commits).
	BaseOffset int64
	LogStart   int64
	Epoch      int64
	// Duplicate: an idempotent producer's retry of a batch already in the
	// log; BaseOffset is the original's.
	Duplicate bool
}

// notLeader builds NOT_LEADER_OR_FOLLOWER with the leader Raft knows.
func (r *Replica) notLeader(why string) error {
	_, id := r.raft.LeaderWithID()
	leader := metadata.BrokerID(-1)
	addr := ""
	if id != "" {
		leader = BrokerOf(id)
		if r.cfg.LeaderAddress != nil {
			addr = r.cfg.LeaderAddress(leader)
		}
	}
	return kerr.NotLeader(int32(leader), addr, int64(r.raft.CurrentTerm()),
		"broker %d %s for %s-%d (leader: %d)", r.cfg.LocalID, why, r.cfg.Topic, r.cfg.Partition, leader)
}

// ReadyTerm returns the term in which this replica is a ready leader (it
// leads and has applied everything earlier terms committed), 0 when it is
// not. It does not block.
func (r *Replica) ReadyTerm() uint64 {
	if r.closed.Load() {
		return 0
	}
	r.lead.mu.Lock()
	defer r.lead.mu.Unlock()
	return r.lead.readyTerm
}

// readyTerm returns the term in which this replica is a ready leader, or a
// NOT_LEADER_OR_FOLLOWER error.
func (r *Replica) readyTerm() (uint64, error) {
	if err := r.storageErr(); err != nil {
		return 0, err
	}
	if r.closed.Load() {
		return 0, r.notLeader("is closing its replica")
	}
	r.lead.mu.Lock()
	term := r.lead.readyTerm
	r.lead.mu.Unlock()
	if term == 0 {
		if r.raft.State() == raft.Leader {
			return 0, kerr.New(kerr.LeaderNotAvailable, "broker %d was just elected leader of %s-%d and is catching up", r.cfg.LocalID, r.cfg.Topic, r.cfg.Partition)
		}
		return 0, r.notLeader("is not the leader")
	}
	return term, nil
}

// LeaderEpoch is a Raft term as Kafka's int32 leader epoch, capped at
// MaxInt32 so that it never goes backwards; what a Kafka batch appended in
// that term carries as its partitionLeaderEpoch.
func LeaderEpoch(term uint64) int32 {
	return int32(min(term, math.MaxInt32))
}

// Produce appends one batch. The batch must have passed Validate (and a
// Kafka batch, storage format version 3, recordbatch.Validate: the FSM
// checks its CRCs only). b is not modified.
//
//   - acks=0: answered once Raft accepted the entry for replication.
//   - acks=1: answered when the entry is in the leader's own Raft log,
//     before any follower has it; the offset is provisional.
//   - acks=all: refused with NOT_ENOUGH_REPLICAS (nothing appended) when the
//     ISR is smaller than min.insync.replicas; answered when Raft committed
//     and applied the entry and at least min.insync.replicas members of the
//     ISR (the leader counts) store it (awaitCopies);
//     NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR shrank below the
//     minimum first.
//
// Produce is Propose followed by its wait.
func (r *Replica) Produce(ctx context.Context, acks int, b storage.Batch) (ProduceResult, error) {
	wait, err := r.Propose(ctx, acks, b)
	if err != nil {
		return ProduceResult{}, err
	}
	return wait(ctx)
}

// ProduceWait waits for the outcome of a proposed batch (Propose) as acks
// says, until ctx is done (REQUEST_TIMED_OUT). It is called exactly once.
type ProduceWait func(ctx context.Context) (ProduceResult, error)

// Propose does the part of Produce that decides the batch's place: the
// checks (leadership, acks, max.message.bytes, min.insync.replicas), the
// idempotent producer's turn, and handing the entry to Raft. It returns
// without waiting for the entry to be stored or committed; the returned
// ProduceWait does that. A caller that proposes batches one after another
// from one goroutine (a Kafka connection's request goroutine) gets them
// into the Raft log in that order, while the waits run concurrently. It
// blocks only while Raft's queue is full (up to ctx's deadline, or a
// second) or an idempotent batch waits for its predecessor (sequencerWait).
func (r *Replica) Propose(ctx context.Context, acks int, b storage.Batch) (ProduceWait, error) {
	term, err := r.readyTerm()
	if err != nil {
		return nil, err
	}
	if acks != AcksNone && acks != AcksLeader && acks != AcksAll {
		return nil, kerr.New(kerr.InvalidRequiredAcks, "acks=%d: use 0, 1 or -1 (all)", acks)
	}
	if p := b.Producer(); p.ID >= 0 && acks != AcksAll { // Kafka's rule
		return nil, kerr.New(kerr.InvalidRequiredAcks, "acks=%d with producer id %d: an idempotent producer needs acks=-1 (all), as in Kafka", acks, p.ID)
	}
	// max.message.bytes applies to the batch as sent: a Kafka batch's own
	// bytes, without the storage format's five.
	size := len(b)
	if kb, ok := b.Kafka(); ok {
		size = len(kb)
	}
	if int64(size) > r.cfg.TopicConfig.MaxMessageBytes {
		return nil, kerr.New(kerr.RecordTooLarge, "batch of %d bytes exceeds max.message.bytes=%d of topic %s", size, r.cfg.TopicConfig.MaxMessageBytes, r.cfg.Topic)
	}
	minISR := r.cfg.TopicConfig.MinInsyncReplicas
	if acks == AcksAll {
		if isr := r.ISR(); len(isr) < minISR {
			return nil, kerr.New(kerr.NotEnoughReplicas, "%s-%d has ISR %s (%d), min.insync.replicas=%d", r.cfg.Topic, r.cfg.Partition, metadata.JoinIDs(isr), len(isr), minISR)
		}
	}
	var id uint64
	var stored chan int64
	forget := func() {}
	if acks == AcksLeader {
		id = nextRequestID.Add(1)
		stored = make(chan int64, 1)
		r.lead.mu.Lock()
		r.lead.waiters[id] = stored
		r.lead.mu.Unlock()
		forget = func() {
			r.lead.mu.Lock()
			delete(r.lead.waiters, id)
			r.lead.mu.Unlock()
		}
	}
	enqueue := time.Second
	if d, ok := ctx.Deadline(); ok {
		enqueue = time.Until(d)
	}
	p := b.Producer()
	// A marker (control batch) has no sequence: it never waits its turn.
	sequenced := p.ID >= 0 && !b.Control()
	if sequenced {
		r.seq.waitTurn(ctx, term, p, r.fsm.producers.position)
	}
	cmd := encodeBatchCmd(id, b)
	// A Kafka batch carries the leader epoch it was appended in: set here,
	// on the entry's own copy, so that every replica stores the same bytes.
	storage.Batch(cmd[batchCmdHeader:]).SetLeaderEpoch(LeaderEpoch(term))
	future := r.raft.Apply(cmd, enqueue)
	if sequenced {
		r.seq.proposed(term, p, b.Count())
	}
	res := ProduceResult{BaseOffset: -1, LogStart: r.log.StartOffset(), Epoch: int64(term)}
	return func(ctx context.Context) (ProduceResult, error) {
		defer forget()
		return r.await(ctx, acks, term, minISR, future, stored, res)
	}, nil
}

// await is a ProduceWait: the outcome of the proposed entry future.
func (r *Replica) await(ctx context.Context, acks int, term uint64, minISR int, future raft.ApplyFuture, stored chan int64, res ProduceResult) (ProduceResult, error) {
	switch acks {
	case AcksNone:
		return res, nil
	case AcksLeader:
		done := make(chan error, 1)
		go func() { done <- future.Error() }()
		select {
		case base := <-stored:
			res.BaseOffset = base
			return res, nil
		case err := <-done:
			// The entry failed, or committed before the store hook saw it
			// (leadership changed in between): use the applied result.
			if err != nil {
				return ProduceResult{}, r.applyErr(err)
			}
			return r.committed(future, res)
		case <-ctx.Done():
			return ProduceResult{}, kerr.New(kerr.RequestTimedOut, "acks=1: the leader's log did not take the batch in time: %v", ctx.Err())
		}
	default:
		if err := waitFuture(ctx, future); err != nil {
			if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
				return ProduceResult{}, kerr.New(kerr.RequestTimedOut, "acks=all: not committed in time (a quorum of %s-%d may be unreachable); the batch may still commit", r.cfg.Topic, r.cfg.Partition)
			}
			return ProduceResult{}, r.applyErr(err)
		}
		res, err := r.committed(future, res)
		if err != nil {
			return ProduceResult{}, err
		}
		if minISR > 1 {
			if err := r.awaitCopies(ctx, term, future.Index(), minISR, res.BaseOffset); err != nil {
				return ProduceResult{}, err
			}
		}
		return res, nil
	}
}

// committed reads the FSM's answer of a committed, applied entry.
func (r *Replica) committed(future raft.ApplyFuture, res ProduceResult) (ProduceResult, error) {
	ar, ok := future.Response().(applyResult)
	if !ok {
		return ProduceResult{}, kerr.New(kerr.UnknownServerError, "unexpected apply response %T", future.Response())
	}
	if ar.err != nil {
		if _, ok := kerr.As(ar.err); ok {
			return ProduceResult{}, ar.err // the producer state refused it
		}
		switch {
		case errors.Is(ar.err, storage.ErrCorruptBatch):
			return ProduceResult{}, kerr.New(kerr.CorruptMessage, "%v", ar.err)
		case errors.Is(ar.err, storage.ErrBatchTooLarge):
			return ProduceResult{}, kerr.New(kerr.RecordTooLarge, "%v", ar.err)
		case errors.Is(ar.err, ErrStorageFailed):
			return ProduceResult{}, kerr.New(kerr.KafkaStorageError, "the batch was committed by Raft, but broker %d could not store it in %s-%d and stops serving it (%v); the other replicas hold it",
				r.cfg.LocalID, r.cfg.Topic, r.cfg.Partition, ar.err)
		}
		return ProduceResult{}, kerr.New(kerr.KafkaStorageError, "%v", ar.err)
	}
	res.BaseOffset = ar.baseOffset
	res.Duplicate = ar.duplicate
	res.LogStart = r.log.StartOffset()
	return res, nil
}

// applyErr maps a Raft future's error to a Kafka error. Leadership lost
// after the entry was accepted is an unknown outcome: REQUEST_TIMED_OUT, not
// NOT_LEADER_OR_FOLLOWER (which promises nothing was appended).
func (r *Replica) applyErr(err error) error {
	if serr := r.storageErr(); serr != nil {
		return serr
	}
	switch {
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrRaftShutdown):
		return r.notLeader("is not the leader")
	case errors.Is(err, raft.ErrLeadershipTransferInProgress):
		// Refused before it was appended.
		return r.notLeader("is handing leadership to another replica")
	case isLeadershipErr(err):
		return kerr.New(kerr.RequestTimedOut, "leadership of %s-%d was lost before the batch committed; it may or may not be in the log", r.cfg.Topic, r.cfg.Partition)
	case errors.Is(err, raft.ErrEnqueueTimeout):
		return kerr.New(kerr.RequestTimedOut, "the leader of %s-%d is overloaded: %v", r.cfg.Topic, r.cfg.Partition, err)
	}
	return kerr.New(kerr.UnknownServerError, "%v", err)
}
