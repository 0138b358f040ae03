package replication

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"

	"github.com/hashicorp/raft"

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
	log    *storage.Log
	logger *slog.Logger
	// producers is the idempotent producers' state; FSM goroutine only
	// (and Open, before Raft starts).
	producers *producerState
	// onShort, if set, is told (on the FSM goroutine) when a batch entry of
	// term appended fewer records than it carries (a duplicate or a refused
	// batch), so the leader can correct its provisional acks=1 offsets.
	onShort func(term uint64, missing int)

	mu sync.Mutex
	// notify is closed and replaced after every change of the log; long-poll
	// fetches wait on it. Guarded by mu.
	notify chan struct{}
}

// newFSM returns the state machine over l, with the producer state rebuilt
// from l's batch headers.
func newFSM(l *storage.Log, logger *slog.Logger) (*fsm, error) {
	f := &fsm{log: l, logger: logger, producers: newProducerState(), notify: make(chan struct{})}
	if err := f.producers.rebuild(l); err != nil {
		return nil, fmt.Errorf("rebuild producer state: %w", err)
	}
	return f, nil
}

func (f *fsm) short(term uint64, missing int) {
	if f.onShort != nil && missing > 0 {
		f.onShort(term, missing)
	}
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

// Apply implements raft.FSM. Entries at or below the log's last applied Raft
// index are skipped: Raft replays everything after its last snapshot on
// restart (NoSnapshotRestoreOnStart), and the log already holds them.
func (f *fsm) Apply(l *raft.Log) interface{} {
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
		p, count := cmd.batch.Producer(), cmd.batch.Count()
		if p.ID >= 0 {
			dupBase, dup, err := f.producers.check(p, count)
			if err != nil || dup {
				f.short(l.Term, count)
				return applyResult{baseOffset: dupBase, duplicate: dup, err: err}
			}
		}
		base, err := f.log.Append(l.Index, cmd.batch)
		if err != nil {
			if !errors.Is(err, storage.ErrAlreadyApplied) {
				f.logger.Error("append failed", "index", l.Index, "err", err)
			}
			f.short(l.Term, count)
			return applyResult{baseOffset: -1, err: err}
		}
		f.producers.record(p, count, base)
		f.wake()
		return applyResult{baseOffset: base}
	case cmdDeleteBefore:
		n, err := f.log.DeleteBefore(cmd.offset, l.Index)
		if err != nil {
			f.logger.Error("retention delete failed", "offset", cmd.offset, "err", err)
			return applyResult{baseOffset: -1, err: err}
		}
		f.producers.prune(f.log.StartOffset())
		if n > 0 {
			f.logger.Info("retention deleted segments", "segments", n, "log_start", f.log.StartOffset())
		}
		f.wake()
		return applyResult{baseOffset: -1}
	}
	return applyResult{baseOffset: -1, err: fmt.Errorf("unhandled command kind %d", cmd.kind)}
}

// Snapshot implements raft.FSM: it pins the current segment files (quick);
// Persist links them into the snapshot store (or streams them).
func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
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
