package replication

import (
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/tapes-dev/tapes/internal/storage"
)

// BoltStore is a raft-boltdb store (Raft's log store and stable store) whose
// fsyncs are counted in storage.Fsyncs(storage.FsyncRaftLog). bbolt syncs
// inside each write transaction's Commit: fdatasync after the data pages,
// then fdatasync after the meta page; so every method that commits counts
// two. Not counted: the fsync bbolt adds when a commit grows the file past
// the size it last set (truncate, then fsync), which bbolt does not expose
// and a file size does not show (pages written past the end extend the
// file without it). Raft calls it from its own goroutines (the main loop
// stores logs and terms, the snapshot goroutine deletes ranges).
type BoltStore struct {
	*raftboltdb.BoltStore
}

// OpenBoltStore opens (or creates) the raft-boltdb file at path. Replicas
// and the controller quorum of a broker open theirs through it.
func OpenBoltStore(path string) (*BoltStore, error) {
	b, err := raftboltdb.New(raftboltdb.Options{Path: path})
	if err != nil {
		return nil, err
	}
	return &BoltStore{BoltStore: b}, nil
}

var _ interface {
	raft.LogStore
	raft.StableStore
} = (*BoltStore)(nil)

// boltSyncsPerCommit: bbolt's Tx.Commit fdatasyncs the data pages, then
// the meta page.
const boltSyncsPerCommit = 2

// committed counts the syncs of one write transaction that has ended.
func committed() { storage.CountFsyncs(storage.FsyncRaftLog, boltSyncsPerCommit) }

func (s *BoltStore) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

func (s *BoltStore) StoreLogs(logs []*raft.Log) error {
	defer committed()
	return s.BoltStore.StoreLogs(logs)
}

func (s *BoltStore) DeleteRange(lo, hi uint64) error {
	defer committed()
	return s.BoltStore.DeleteRange(lo, hi)
}

func (s *BoltStore) Set(k, v []byte) error {
	defer committed()
	return s.BoltStore.Set(k, v)
}

func (s *BoltStore) SetUint64(k []byte, v uint64) error {
	defer committed()
	return s.BoltStore.SetUint64(k, v)
}
