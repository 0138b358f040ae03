package txn

import (
	"slices"
	"testing"
	"testing/synctest"
	"time"
)

// restarted returns a coordinator over a copy of log as another broker
// would load it in the next term (the log start kept), the old one deposed.
func restarted(t *testing.T, log *memLog) (*env, *memLog) {
	t.Helper()
	log.mu.Lock()
	next := &memLog{term: log.term + 1, recs: slices.Clone(log.recs), start: log.start}
	log.term = 0
	log.mu.Unlock()
	return newEnv(t, next, &fakeMarkers{}), next
}

// TestCompactionKeepsTheLatestStatePerID: 40 transactions of one id (120
// records and more, the last aborted) and an open transaction of another,
// with CompactAfter 20: the partition's log start moves on and it holds a
// few records, not all of them; a coordinator loading it from its log start in the next
// term knows both ids' producer ids, epochs, states and partitions, and
// the open transaction commits there.
func TestCompactionKeepsTheLatestStatePerID(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const after = 20
		log := &memLog{term: 1}
		e := newEnv(t, log, &fakeMarkers{}, func(c *Config) { c.CompactAfter = after })
		pid, epoch := e.mustInit("t")
		for i := range 40 {
			if i%10 == 9 {
				pid, epoch = e.mustInit("t") // an epoch bump now and then
			}
			e.add("t", pid, epoch, orders0)
			e.end("t", pid, epoch, i%3 != 0)
			synctest.Wait() // the markers and Complete*
			time.Sleep(tick)
			synctest.Wait() // a tick: a compaction may run
		}
		upid, uepoch := e.mustInit("u")
		e.add("u", upid, uepoch, orders0, orders1)
		time.Sleep(2 * tick)
		synctest.Wait()
		want := map[string]Description{"t": e.state("t"), "u": e.state("u")}
		if want["t"].ProducerEpoch != 4 || want["t"].State != CompleteAbort || want["u"].State != Ongoing {
			t.Fatalf("before the restart: %+v", want)
		}

		log.mu.Lock()
		total, start := len(log.recs), log.start
		log.mu.Unlock()
		live := log.live()
		if total < 120 || start == 0 || len(live) >= 2*after {
			t.Fatalf("%d records written, log start %d, %d from the log start: not compacted", total, start, len(live))
		}

		e2, _ := restarted(t, log)
		for id, w := range want {
			if got := e2.state(id); got.ProducerID != w.ProducerID || got.ProducerEpoch != w.ProducerEpoch || got.State != w.State ||
				!slices.Equal(got.Partitions, w.Partitions) || got.StartMs != w.StartMs {
				t.Errorf("%s after the restart: %+v, want %+v", id, got, w)
			}
		}
		e2.end("u", upid, uepoch, true)
		synctest.Wait()
		if got := e2.state("u").State; got != CompleteCommit {
			t.Errorf("u's commit after the restart: %s", got)
		}
	})
}
