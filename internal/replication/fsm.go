package replication

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"

	"github.com/hashicorp/raft"

	"github.com/tapes-dev/tapes/internal/recordbatch"
	"github.com/tapes-dev/tapes/internal/storage"
)

// applyResult is what fsm.Apply returns through ApplyFuture.Response().
type applyResult struct {
	baseOffset int64 // first offset of the appended batch; -1 for other commands
	// duplicate: an idempotent producer's retried batch, not appended again;
	// baseOffset is where the original went.
	duplicate bool
	err       error // set when the entry was refused (the log is unchanged)
}

// fsm applies committed entries to the partition log. Raft calls Apply,
// Snapshot and Restore from its FSM goroutine, one at a time. Readers use
// the log directly (storage.Log is safe for concurrent reads) and wait for
// new data with changed().
type fsm struct {
	log *storage.Log
	// w is what Apply writes through: log itself, or a wrapper of it that
	// fails on demand (tests).
	w      logWriter
	logger *slog.Logger
	// producers is the idempotent and transactional producers' state
	// (with the last stable offset and the aborted transactions); written
	// on the FSM goroutine only (and Open, before Raft starts).
	producers *producerState
	// onApplied, if set, is told (on the FSM goroutine) after each batch
	// entry how many records it appended (fewer than it carries for a
	// duplicate or a refused batch), so the leader can settle its
	// provisional acks=1 offsets. It must not block.
	onApplied func(term, index uint64, appended int)
	// onFail, if set, is called once, on the FSM goroutine, when a storage
	// I/O error takes this replica out (see fail). It must not block.
	onFail func(err error)
	// failed is the storage failure that took this replica out, nil while
	// healthy. FSM goroutine only. Invariant: once set, Apply changes
	// nothing and Snapshot refuses, so Raft never compacts away an entry
	// the partition log does not hold; a restart re-applies them.
	failed error

	mu sync.Mutex
	// notify is closed and replaced after every change of the log; long-poll
	// fetches wait on it. Guarded by mu.
	notify chan struct{}
}

// logWriter is what the FSM changes the partition log with.
type logWriter interface {
	Append(raftIndex uint64, b storage.Batch) (int64, error)
	DeleteBefore(offset int64, raftIndex uint64) (int, error)
}

// newFSM returns the state machine over l, with the producer state rebuilt
// from l's batch headers.
func newFSM(l *storage.Log, logger *slog.Logger) (*fsm, error) {
	f := &fsm{log: l, w: l, logger: logger, producers: newProducerState(), notify: make(chan struct{})}
	if err := f.producers.rebuild(l); err != nil {
		return nil, fmt.Errorf("rebuild producer state: %w", err)
	}
	return f, nil
}

// changed returns a channel closed at the next change of the log.
func (f *fsm) changed() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.notify
}

func (f *fsm) wake() {
	f.mu.Lock()
	close(f.notify)
	f.notify = make(chan struct{})
	f.mu.Unlock()
}

// deterministic reports whether an error of the log's Append or
// DeleteBefore comes from the entry itself, so that every replica meets it
// alike (a corrupt or oversized batch, an entry already applied); any other
// error is this replica's storage failing.
func deterministic(err error) bool {
	return errors.Is(err, storage.ErrCorruptBatch) || errors.Is(err, storage.ErrBatchTooLarge) || errors.Is(err, storage.ErrAlreadyApplied)
}

// fail takes the replica out after a storage I/O error at index: skipping
// the entry and applying later ones would give every later record another
// offset here than on the other replicas. From now on Apply changes
// nothing and answers the failure; the replica stops serving (onFail).
func (f *fsm) fail(index uint64, err error) applyResult {
	f.failed = fmt.Errorf("%w at Raft index %d: %v", ErrStorageFailed, index, err)
	f.logger.Error("partition storage failed: this replica stops applying and serving until its broker restarts", "index", index, "err", err)
	if f.onFail != nil {
		f.onFail(f.failed)
	}
	f.wake()
	return applyResult{baseOffset: -1, err: f.failed}
}

// Apply implements raft.FSM. Entries at or below the log's last applied Raft
// index are skipped: Raft replays everything after its last snapshot on
// restart (NoSnapshotRestoreOnStart), and the log already holds them.
func (f *fsm) Apply(l *raft.Log) interface{} {
	if f.failed != nil {
		return applyResult{baseOffset: -1, err: f.failed}
	}
	if l.Index <= f.log.LastRaftIndex() {
		return applyResult{baseOffset: -1, err: storage.ErrAlreadyApplied}
	}
	cmd, err := decodeCmd(l.Data)
	if err != nil {
		f.logger.Error("skipping undecodable entry", "index", l.Index, "err", err)
		return applyResult{baseOffset: -1, err: err}
	}
	switch cmd.kind {
	case cmdBatch:
		res, appended := f.applyBatch(l.Index, cmd.batch)
		if f.onApplied != nil {
			f.onApplied(l.Term, l.Index, appended)
		}
		return res
	case cmdDeleteBefore:
		n, err := f.w.DeleteBefore(cmd.offset, l.Index)
		if err != nil {
			if !deterministic(err) {
				return f.fail(l.Index, err)
			}
			return applyResult{baseOffset: -1, err: err}
		}
		if start := f.log.StartOffset(); f.producers.cutByStart(start) {
			// Retention or DeleteRecords cut through a transaction: the
			// state is what the batches kept say (a scan of their headers).
			if err := f.producers.rebuild(f.log); err != nil {
				return f.fail(l.Index, fmt.Errorf("rebuild producer state after the log start moved to %d: %w", start, err))
			}
		} else {
			f.producers.prune(start)
		}
		if n > 0 {
			f.logger.Info("retention deleted segments", "segments", n, "log_start", f.log.StartOffset())
		}
		f.wake()
		return applyResult{baseOffset: -1}
	}
	return applyResult{baseOffset: -1, err: fmt.Errorf("unhandled command kind %d", cmd.kind)}
}

// applyBatch applies one batch entry and says how many records it appended.
// A control batch (a transaction marker, WriteMarker) is checked against the
// producer's epoch and its last marker's coordinator epoch; a producer's batch against its epoch and
// sequences.
func (f *fsm) applyBatch(index uint64, b storage.Batch) (applyResult, int) {
	p, count := b.Producer(), b.Count()
	var marker *recordbatch.Marker
	switch {
	case b.Control():
		mk, err := markerOf(b)
		if err == nil {
			err = f.producers.checkMarker(p, mk)
		}
		if err != nil {
			return applyResult{baseOffset: -1, err: err}, 0
		}
		marker = mk
	case p.ID >= 0:
		dupBase, dup, err := f.producers.check(p, count)
		if err != nil || dup {
			return applyResult{baseOffset: dupBase, duplicate: dup, err: err}, 0
		}
	}
	base, err := f.w.Append(index, b)
	if err != nil {
		if !deterministic(err) {
			return f.fail(index, err), 0
		}
		if !errors.Is(err, storage.ErrAlreadyApplied) {
			f.logger.Warn("batch refused", "index", index, "err", err)
		}
		return applyResult{baseOffset: -1, err: err}, 0
	}
	f.producers.record(storage.BatchMeta{BaseOffset: base, Count: count, Producer: p, Attributes: b.Attributes()}, marker, base+int64(count))
	f.wake()
	return applyResult{baseOffset: base}, count
}

// Snapshot implements raft.FSM: it pins the current segment files (quick);
// Persist links them into the snapshot store (or streams them).
func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	if f.failed != nil {
		return nil, fmt.Errorf("no snapshot of a failed partition log: %w", f.failed)
	}
	s, err := f.log.Snapshot()
	if err != nil {
		return nil, fmt.Errorf("snapshot partition log: %w", err)
	}
	return &fsmSnapshot{snap: s}, nil
}

// Restore implements raft.FSM: the snapshot replaces the whole log (a
// follower too far behind the leader's compacted Raft log is rebuilt so).
func (f *fsm) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	if f.failed != nil {
		return fmt.Errorf("no restore into a failed partition log: %w", f.failed)
	}
	if err := f.log.Restore(rc); err != nil {
		return fmt.Errorf("restore partition log: %w", err)
	}
	if err := f.producers.rebuild(f.log); err != nil {
		return fmt.Errorf("rebuild producer state after restore: %w", err)
	}
	f.logger.Info("partition log restored from snapshot", "log_start", f.log.StartOffset(), "log_end", f.log.EndOffset())
	f.wake()
	return nil
}

type fsmSnapshot struct{ snap *storage.Snapshot }

// snapshotAdopter is a sink that can keep a storage.Snapshot as hard links
// instead of a copy of its stream (snapSink).
type snapshotAdopter interface {
	adopt(*storage.Snapshot) error
}

// Persist implements raft.FSMSnapshot, on raft's snapshot goroutine: a
// snapSink keeps hard links to the segment files (no data copied); any other
// sink gets the whole stream written to it.
func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	if a, ok := sink.(snapshotAdopter); ok {
		if err := a.adopt(s.snap); err != nil {
			sink.Cancel()
			return fmt.Errorf("persist partition snapshot: %w", err)
		}
		return sink.Close()
	}
	if _, err := s.snap.WriteTo(sink); err != nil {
		sink.Cancel()
		return fmt.Errorf("persist partition snapshot: %w", err)
	}
	return sink.Close()
}

func (s *fsmSnapshot) Release() {
	_ = s.snap.Release()
}
