package replication

import (
	"fmt"
	"os"
	"sync/atomic"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/tapes-dev/tapes/internal/storage"
)

// BoltStore is a raft-boltdb store (Raft's log store and stable store) whose
// fsyncs are counted in storage.Fsyncs(storage.FsyncRaftLog). bbolt syncs
// inside each write transaction's Commit: fdatasync after the data pages,
// fdatasync after the meta page, and an fsync when the file grows. So every
// method that commits counts two, plus one when the file's size changed
// (read from a second descriptor: bbolt exposes neither its file nor its
// syncs). Raft calls it from its own goroutines (the main loop stores
// logs and terms, the snapshot goroutine deletes ranges).
type BoltStore struct {
	*raftboltdb.BoltStore
	file *os.File     // the same file, read only: its size shows bbolt's growth
	size atomic.Int64 // the file's size after the last commit this store counted
}

// OpenBoltStore opens (or creates) the raft-boltdb file at path. Replicas
// and the controller quorum of a broker open theirs through it.
func OpenBoltStore(path string) (*BoltStore, error) {
	b, err := raftboltdb.New(raftboltdb.Options{Path: path})
	if err != nil {
		return nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		b.Close()
		return nil, fmt.Errorf("open %s to watch its size: %w", path, err)
	}
	s := &BoltStore{BoltStore: b, file: f}
	s.size.Store(s.fileSize())
	return s, nil
}

var _ interface {
	raft.LogStore
	raft.StableStore
} = (*BoltStore)(nil)

func (s *BoltStore) fileSize() int64 {
	fi, err := s.file.Stat()
	if err != nil {
		return s.size.Load()
	}
	return fi.Size()
}

// committed counts the syncs of one write transaction that has ended.
func (s *BoltStore) committed() {
	n := uint64(2)
	if size := s.fileSize(); s.size.Swap(size) != size {
		n++
	}
	storage.CountFsyncs(storage.FsyncRaftLog, n)
}

func (s *BoltStore) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

func (s *BoltStore) StoreLogs(logs []*raft.Log) error {
	defer s.committed()
	return s.BoltStore.StoreLogs(logs)
}

func (s *BoltStore) DeleteRange(lo, hi uint64) error {
	defer s.committed()
	return s.BoltStore.DeleteRange(lo, hi)
}

func (s *BoltStore) Set(k, v []byte) error {
	defer s.committed()
	return s.BoltStore.Set(k, v)
}

func (s *BoltStore) SetUint64(k []byte, v uint64) error {
	defer s.committed()
	return s.BoltStore.SetUint64(k, v)
}

// Close closes the store and the descriptor that watched its size.
func (s *BoltStore) Close() error {
	s.file.Close()
	return s.BoltStore.Close()
}
