package replication

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/tapes-dev/tapes/internal/eventually"
	"github.com/tapes-dev/tapes/internal/metadata"
	"github.com/tapes-dev/tapes/internal/storage"
)

// TestSharedStableGroupCommit: the term and vote writes of many groups
// queued while a commit runs share the next one: 200 groups' SetUint64
// calls, queued behind a held commit, cost two commits (four fdatasyncs)
// instead of 200, every caller returns only after its commit, and the
// values survive a reopen. With a bolt file per group each call was a
// commit of its own (TestBoltStoreCountsFsyncs: two fsyncs per call).
func TestSharedStableGroupCommit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "stable.db")
	s, err := OpenSharedStable(path)
	if err != nil {
		t.Fatal(err)
	}
	hold := make(chan struct{})
	var mu sync.Mutex
	var sizes []int
	commitsStarted := func() int { mu.Lock(); defer mu.Unlock(); return len(sizes) }
	var held sync.Once
	s.beforeCommit = func(n int) {
		mu.Lock()
		sizes = append(sizes, n)
		mu.Unlock()
		held.Do(func() { <-hold })
	}
	const groups = 200
	fsyncsBefore := storage.Fsyncs(storage.FsyncRaftLog)
	var wg sync.WaitGroup
	returned := make(chan int, groups)
	for i := range groups {
		wg.Go(func() {
			if err := s.Group(fmt.Sprintf("g-%d@1", i)).SetUint64([]byte("CurrentTerm"), uint64(i+1)); err != nil {
				t.Errorf("group %d: %v", i, err)
			}
			returned <- i
		})
		if i == 0 {
			// The first write is the held commit's; the others queue.
			eventually.True(t, 10*time.Second, "the first commit to start", func() bool { return commitsStarted() == 1 })
		}
	}
	eventually.True(t, 10*time.Second, "every other write to queue", func() bool { return len(s.reqs) == groups-1 })
	if len(returned) != 0 {
		t.Fatalf("%d writers returned before their commit", len(returned))
	}
	close(hold)
	wg.Wait()
	if got := s.commits.Load(); got != 2 {
		t.Errorf("%d groups' writes took %d commits (sizes %v), want 2", groups, got, sizes)
	}
	if got := storage.Fsyncs(storage.FsyncRaftLog) - fsyncsBefore; got != 2*boltSyncsPerCommit {
		t.Errorf("counted %d fsyncs, want %d", got, 2*boltSyncsPerCommit)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s, err = OpenSharedStable(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range groups {
		g := s.Group(fmt.Sprintf("g-%d@1", i))
		if v, err := g.GetUint64([]byte("CurrentTerm")); err != nil || v != uint64(i+1) {
			t.Fatalf("group %d after reopen: %d, %v; want %d", i, v, err, i+1)
		}
	}
	if _, err := s.Group("g-0@1").Get([]byte("LastVoteCand")); err == nil || err.Error() != "not found" {
		t.Errorf("a key never set: %v, want raft's \"not found\"", err)
	}
	if err := s.Group("g-7@1").Drop(); err != nil {
		t.Fatal(err)
	}
	if s.Has("g-7@1") || !s.Has("g-8@1") {
		t.Errorf("after dropping g-7: Has(g-7)=%v Has(g-8)=%v", s.Has("g-7@1"), s.Has("g-8@1"))
	}
	if names, _ := s.Groups(); len(names) != groups-1 {
		t.Errorf("%d groups listed after a drop, want %d", len(names), groups-1)
	}
}

// TestReplicaTermInSharedStable: a new group whose log is in the shared log
// keeps its term and vote in the broker's shared stable store (no
// stable.db), and finds them there when reopened; a group with a stable.db
// keeps that file.
func TestReplicaTermInSharedStable(t *testing.T) {
	root := t.TempDir()
	stable, err := OpenSharedStable(filepath.Join(root, "stable.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer stable.Close()
	dir := filepath.Join(root, "t-0@1")
	r := openSolo(t, dir, nil, func(c *Config) { c.Stable = stable })
	term := r.raft.CurrentTerm()
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if fileExists(filepath.Join(dir, boltStableFile)) {
		t.Fatalf("a new group made %s beside the shared stable store", boltStableFile)
	}
	if !stable.Has("t-0@1") {
		t.Fatal("the group's term is not in the shared stable store")
	}
	r = openSolo(t, dir, nil, func(c *Config) { c.Stable = stable })
	if got := r.raft.CurrentTerm(); got < term {
		t.Fatalf("reopened at term %d, below %d: the term was not kept", got, term)
	}
	r.Close()

	// A group created with a stable.db keeps it when the broker has a
	// shared store.
	old := filepath.Join(root, "old")
	r = openSolo(t, old, nil)
	r.Close()
	other, err := OpenSharedStable(filepath.Join(root, "other.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	r = openSolo(t, old, nil, func(c *Config) { c.Stable = other })
	r.Close()
	if names, _ := other.Groups(); len(names) != 0 || !fileExists(filepath.Join(old, boltStableFile)) {
		t.Fatalf("a group with a stable.db moved to the shared store (%v)", names)
	}
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// TestFirstElectionTimeout: a group that has not seen a leader since it was
// opened waits firstElectionTimeout for votes (a thousand groups electing
// at once answer votes late), and gets its configured timeouts back once a
// leader is known. A replica of three whose peers never answer keeps the
// long one; a trio that elects goes back to the configured 500 ms.
func TestFirstElectionTimeout(t *testing.T) {
	configured := DefaultRaftTimings().ElectionTimeout
	if configured >= firstElectionTimeout {
		t.Fatalf("the configured election timeout %v is not below %v: nothing to show", configured, firstElectionTimeout)
	}
	alone := newMuxes(t, 1)[0] // peers 2 and 3 resolve to nothing
	lonely := openTestReplica(t, alone, t.TempDir(), 1, []metadata.BrokerID{1, 2, 3}, nil)
	if got := lonely.raft.ReloadableConfig().ElectionTimeout; got != firstElectionTimeout {
		t.Errorf("leaderless group's election timeout %v, want %v", got, firstElectionTimeout)
	}

	tr := newTrio(t, nil, -1)
	readyLeader(t, tr.reps[:], -1)
	for i, r := range tr.reps {
		eventually.True(t, 30*time.Second, fmt.Sprintf("replica %d's configured timeouts back", i+1), func() bool {
			c := r.raft.ReloadableConfig()
			return c.ElectionTimeout == configured && c.HeartbeatTimeout == DefaultRaftTimings().HeartbeatTimeout
		})
	}
	if got := lonely.raft.ReloadableConfig().ElectionTimeout; got != firstElectionTimeout {
		t.Errorf("still leaderless, the group's election timeout became %v, want %v", got, firstElectionTimeout)
	}
}
