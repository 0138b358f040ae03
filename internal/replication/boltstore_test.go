package replication

import (
	"fmt"
	"os"
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

// TestReplicaKeepsItsRaftLogStore: a group keeps the Raft log store it was
// created with whatever new groups use (raft.db, or the shared log with
// stable.db), so a data dir of either kind keeps working; a deleted
// replica's entries leave the shared log.
func TestReplicaKeepsItsRaftLogStore(t *testing.T) {
	defer func(k RaftLogKind) { testRaftLogKind = k }(testRaftLogKind)
	for _, tc := range []struct {
		created, then RaftLogKind
		file          string
	}{
		{RaftLogBolt, RaftLogWAL, boltLogFile},
		{RaftLogWAL, RaftLogBolt, boltStableFile},
	} {
		t.Run(string(tc.created)+" then "+string(tc.then), func(t *testing.T) {
			dir := t.TempDir()
			wal := testRaftLog(t, dir+".wal")
			testRaftLogKind = tc.created
			r := openSolo(t, dir, nil)
			if _, err := produceValues(t, r, AcksAll, storage.NoProducer, "a"); err != nil {
				t.Fatal(err)
			}
			inWAL := len(wal.Groups()) == 1
			if inWAL != (tc.created == RaftLogWAL) {
				t.Fatalf("created with %s: groups in the shared log %v", tc.created, wal.Groups())
			}
			if err := r.Close(); err != nil {
				t.Fatal(err)
			}
			testRaftLogKind = tc.then
			r = openSolo(t, dir, nil)
			if _, err := produceValues(t, r, AcksAll, storage.NoProducer, "b"); err != nil {
				t.Fatal(err)
			}
			if got := fmt.Sprint(valuesAt(t, r)); got != "[a b]" {
				t.Fatalf("log after reopening with %s: %s", tc.then, got)
			}
			if _, err := os.Stat(filepath.Join(dir, tc.file)); err != nil {
				t.Fatalf("reopened with %s: %v", tc.then, err)
			}
			if (len(wal.Groups()) == 1) != inWAL {
				t.Fatalf("reopened with %s: groups in the shared log %v", tc.then, wal.Groups())
			}
			if err := r.Delete(); err != nil {
				t.Fatal(err)
			}
			if g := wal.Groups(); len(g) != 0 {
				t.Fatalf("deleted replica's group still in the shared log: %v", g)
			}
		})
	}
}
