package group

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
)

// adminCommit commits offset for group's partition p of "orders" as an
// admin (generation -1), which an empty group accepts.
func (e *env) adminCommit(group string, p int32, offset int64) error {
	return e.c.OffsetCommit(ctx(e.t), &tapesv1.OffsetCommitRequest{GroupId: group, GenerationId: -1,
		Offsets: []*tapesv1.OffsetCommitPartition{{Topic: "orders", Partition: p, Offset: offset}}})
}

// offsetsOf fetches group's committed offsets of "orders" partitions ps.
func (e *env) offsetsOf(group string, ps ...int32) map[int32]int64 {
	e.t.Helper()
	resp, err := e.c.OffsetFetch(ctx(e.t), &tapesv1.OffsetFetchRequest{GroupId: group, Partitions: []*tapesv1.TopicPartitions{{Topic: "orders", Partitions: ps}}})
	if err != nil {
		e.t.Fatalf("offset fetch of %s: %v", group, err)
	}
	out := map[int32]int64{}
	for _, o := range resp.Offsets {
		out[o.Partition] = o.Offset
	}
	return out
}

// waitCompacted ticks e's coordinator until l's log start passes from.
func (e *env) waitCompacted(l *memLog, from int64) {
	e.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		l.mu.Lock()
		start := l.start
		l.mu.Unlock()
		if start > from {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("log start still %d after 5 s of ticks", start)
		}
		e.c.tick()
		time.Sleep(time.Millisecond)
	}
}

// TestCompactionKeepsTheState: a partition with many superseded commits,
// two groups and a group record of an older generation that committed
// late is compacted to one record per key, and a coordinator that loads it
// afterwards rebuilds what one that loaded it before would.
func TestCompactionKeepsTheState(t *testing.T) {
	l := &memLog{term: 1}
	e := newEnvCompacting(t, l, 100)
	a, b := e.twoMembers() // group g, generation 2
	for i := range 60 {
		if err := e.commit(a, 2, int64(i)); err != nil {
			t.Fatal(err)
		}
		if err := e.adminCommit("h", int32(i%5), int64(1000+i)); err != nil {
			t.Fatal(err)
		}
	}
	// Generation 1's record committing after generation 2's: load keeps 2.
	if _, err := l.Append(context.Background(), []Record{groupRecord("g", &tapesv1.GroupValue{GenerationId: 1, ProtocolType: "consumer"})}); err != nil {
		t.Fatal(err)
	}
	before := l.copyLog(2)

	e.waitCompacted(l, 0)

	keys := map[string]int{}
	l.mu.Lock()
	for _, r := range l.recs {
		keys[string(r.Key)]++
	}
	kept, start := len(l.recs), l.start
	l.mu.Unlock()
	// g: its group record and orders-0; h: orders-0..4.
	if kept != 7 || len(keys) != 7 {
		t.Fatalf("compacted to %d records with %d keys (%v), want 7 of each", kept, len(keys), keys)
	}
	if start <= 120 {
		t.Fatalf("log start %d, want past the %d records written before", start, 120)
	}

	was, now := newEnv(t, before), newEnv(t, l.copyLog(2))
	for _, c := range []struct {
		group string
		ps    []int32
	}{{"g", []int32{0}}, {"h", []int32{0, 1, 2, 3, 4}}} {
		w, n := was.offsetsOf(c.group, c.ps...), now.offsetsOf(c.group, c.ps...)
		if fmt.Sprint(w) != fmt.Sprint(n) {
			t.Errorf("group %s offsets: %v before compaction, %v after", c.group, w, n)
		}
	}
	if got := now.offsetsOf("g", 0)[0]; got != 59 {
		t.Errorf("g's offset %d, want 59", got)
	}
	dw, _ := was.c.DescribeGroup(ctx(t), "g")
	dn, _ := now.c.DescribeGroup(ctx(t), "g")
	if dn.GenerationId != 2 || dn.State != dw.State || len(dn.Members) != len(dw.Members) {
		t.Errorf("group g after compaction: generation %d %s %d members; before: generation %d %s %d members",
			dn.GenerationId, dn.State, len(dn.Members), dw.GenerationId, dw.State, len(dw.Members))
	}
	// The members carry on with the coordinator that compacted.
	if err := e.heartbeat(b, 2); err != nil {
		t.Fatalf("heartbeat after compaction: %v", err)
	}
}

// TestCompactionUnderConcurrentCommits: commits keep arriving while the
// coordinator compacts over and over; every commit that was acknowledged is
// in the partition afterwards. Each writer also commits, every 32nd round, a
// partition only it commits and only once, so a commit deleted by a compaction that did not
// see it is missing from the rebuilt state.
func TestCompactionUnderConcurrentCommits(t *testing.T) {
	l := &memLog{term: 1}
	e := newEnvCompacting(t, l, 20)
	// Writers go on until 10 compactions happened or 20 s passed (a loaded
	// machine starves the ticker); at least 3 must have raced them.
	const writers, maxRounds, compactions, atLeast = 4, 1_000_000, 10, 3
	deadline := time.Now().Add(20 * time.Second)
	stop := make(chan struct{})
	ticked := make(chan struct{})
	go func() {
		defer close(ticked)
		for {
			select {
			case <-stop:
				return
			default:
			}
			e.c.tick()
			time.Sleep(200 * time.Microsecond)
		}
	}()
	var wg sync.WaitGroup
	rounds := make([]int, writers)
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			for i := 0; i < maxRounds && l.deletions() < compactions && time.Now().Before(deadline); i++ {
				for j := range 3 { // superseded right away: work for compaction
					if err := e.adminCommit("h", int32(w), int64(i*3+j)); err != nil {
						errs <- err
						return
					}
				}
				if i%32 == 0 {
					if err := e.adminCommit("h", int32(1000+w*maxRounds+i), int64(i)); err != nil {
						errs <- err
						return
					}
				}
				rounds[w] = i + 1
			}
		})
	}
	wg.Wait()
	close(stop)
	<-ticked
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n := l.deletions(); n < atLeast {
		t.Fatalf("%d compactions in %v rounds, want at least %d", n, rounds, atLeast)
	}
	var ps []int32
	for w := range int32(writers) {
		ps = append(ps, w)
		for i := int32(0); i < int32(rounds[w]); i += 32 {
			ps = append(ps, 1000+w*maxRounds+i)
		}
	}
	got := newEnv(t, l.copyLog(2)).offsetsOf("h", ps...)
	for w := range int32(writers) {
		if want := int64(rounds[w]*3 - 1); got[w] != want {
			t.Errorf("partition %d: %d, want %d", w, got[w], want)
		}
		for i := int32(0); i < int32(rounds[w]); i += 32 {
			if p := 1000 + w*maxRounds + i; got[p] != int64(i) {
				t.Errorf("partition %d (committed once): %d, want %d", p, got[p], i)
			}
		}
	}
	t.Logf("%d compactions over %v rounds", l.deletions(), rounds)
}
