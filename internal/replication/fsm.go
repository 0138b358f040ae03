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
	err        error // set when the entry was refused (the log is unchanged)
}

// fsm applies committed entries to the partition log. Raft calls Apply,
// Snapshot and Restore from its FSM goroutine, one at a time. Readers use
// the log directly (storage.Log is safe for concurrent reads) and wait for
// new data with changed().
type fsm struct {
	log    *storage.Log
	logger *slog.Logger

	mu sync.Mutex
	// notify is closed and replaced after every change of the log; long-poll
	// fetches wait on it. Guarded by mu.
	notify chan struct{}
}

func newFSM(l *storage.Log, logger *slog.Logger) *fsm {
	return &fsm{log: l, logger: logger, notify: make(chan struct{})}
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
		base, err := f.log.Append(l.Index, cmd.batch)
		if err != nil {
			if !errors.Is(err, storage.ErrAlreadyApplied) {
				f.logger.Error("append failed", "index", l.Index, "err", err)
			}
			return applyResult{baseOffset: -1, err: err}
		}
		f.wake()
		return applyResult{baseOffset: base}
	case cmdDeleteBefore:
		n, err := f.log.DeleteBefore(cmd.offset, l.Index)
		if err != nil {
			f.logger.Error("retention delete failed", "offset", cmd.offset, "err", err)
			return applyResult{baseOffset: -1, err: err}
		}
		if n > 0 {
			f.logger.Info("retention deleted segments", "segments", n, "log_start", f.log.StartOffset())
		}
		f.wake()
		return applyResult{baseOffset: -1}
	}
	return applyResult{baseOffset: -1, err: fmt.Errorf("unhandled command kind %d", cmd.kind)}
}

// Snapshot implements raft.FSM: it pins the current segment files (quick);
// Persist streams them.
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
	f.logger.Info("partition log restored from snapshot", "log_start", f.log.StartOffset(), "log_end", f.log.EndOffset())
	f.wake()
	return nil
}

type fsmSnapshot struct{ snap *storage.Snapshot }

func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := s.snap.WriteTo(sink); err != nil {
		sink.Cancel()
		return fmt.Errorf("persist partition snapshot: %w", err)
	}
	return sink.Close()
}

func (s *fsmSnapshot) Release() {
	_ = s.snap.Release()
}
