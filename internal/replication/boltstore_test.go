package replication

import (
	"path/filepath"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/tapes-dev/tapes/internal/storage"
)

// TestBoltStoreCountsFsyncs: every write of the Raft log store (logs,
// deletes, the stable store's terms) counts bbolt's two fdatasyncs of its
// commit, and reads count none.
func TestBoltStoreCountsFsyncs(t *testing.T) {
	s, err := OpenBoltStore(filepath.Join(t.TempDir(), "raft.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	count := func(what string, want func(uint64) bool, op func() error) {
		t.Helper()
		before := storage.Fsyncs(storage.FsyncRaftLog)
		if err := op(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if n := storage.Fsyncs(storage.FsyncRaftLog) - before; !want(n) {
			t.Errorf("%s counted %d fsyncs", what, n)
		}
	}
	two := func(n uint64) bool { return n == 2 }
	small := []*raft.Log{{Index: 1, Term: 1, Data: []byte("a")}, {Index: 2, Term: 1, Data: []byte("b")}}
	count("StoreLogs", two, func() error { return s.StoreLogs(small) })
	count("StoreLog", two, func() error { return s.StoreLog(&raft.Log{Index: 3, Term: 1, Data: []byte("c")}) })
	count("SetUint64", two, func() error { return s.SetUint64([]byte("CurrentTerm"), 2) })
	count("Set", two, func() error { return s.Set([]byte("LastVoteCand"), []byte("1")) })
	count("DeleteRange", two, func() error { return s.DeleteRange(1, 2) })
	count("GetUint64", func(n uint64) bool { return n == 0 }, func() error { _, err := s.GetUint64([]byte("CurrentTerm")); return err })
}
