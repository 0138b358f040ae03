package txn

import (
	"context"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tapes-dev/tapes/internal/kerr"
)

// TestExpireUnusedTransactionalIDs: IDExpiration 10 minutes. "done" (a
// committed transaction), "aborted" and "empty" (InitProducerId only) are
// unused from the start; "open" has a transaction open (its timeout 15
// minutes) and "recent" came 5 minutes later. At 11 minutes the first
// three are gone (a tombstone each in the log; Describe
// TRANSACTIONAL_ID_NOT_FOUND, not listed), the other two are kept, and an
// expired id's next InitProducerId starts afresh: a new producer id, epoch
// 0. A coordinator loading the partition in the next term does not know
// the expired ids either.
func TestExpireUnusedTransactionalIDs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		log := &memLog{term: 1}
		e := newEnv(t, log, &fakeMarkers{}, func(c *Config) { c.IDExpiration = 10 * time.Minute })
		done, depoch := e.mustInit("done")
		e.add("done", done, depoch, orders0)
		e.end("done", done, depoch, true)
		ab, aepoch := e.mustInit("aborted")
		e.add("aborted", ab, aepoch, orders1)
		e.end("aborted", ab, aepoch, false)
		e.mustInit("empty")
		open, oepoch, err := e.c.InitProducerID(context.Background(), InitRequest{TransactionalID: "open", TimeoutMs: 900_000, ProducerID: -1, ProducerEpoch: -1})
		if err != nil {
			t.Fatal(err)
		}
		e.add("open", open, oepoch, orders0)
		synctest.Wait()
		time.Sleep(5 * time.Minute)
		e.mustInit("recent")
		time.Sleep(6 * time.Minute)
		synctest.Wait()

		for _, id := range []string{"done", "aborted", "empty"} {
			_, err := e.c.Describe(id)
			wantErr(t, id+" after 11 minutes unused", err, kerr.TransactionalIDNotFound)
			if got := log.states(t, id); got[len(got)-1] != Dead {
				t.Errorf("%s: the log holds %v, not a tombstone last", id, got)
			}
		}
		if got := e.state("open"); got.State != Ongoing {
			t.Errorf("open: %+v, want still Ongoing", got)
		}
		if got := e.state("recent"); got.State != Empty {
			t.Errorf("recent: %+v, want Empty (unused for 6 minutes only)", got)
		}
		l, err := e.c.List(ListFilter{})
		if err != nil {
			t.Fatal(err)
		}
		var listed []string
		for _, d := range l {
			listed = append(listed, d.TransactionalID)
		}
		if !slices.Equal(listed, []string{"open", "recent"}) {
			t.Errorf("listed %v, want [open recent]", listed)
		}

		pid, epoch := e.mustInit("done")
		if pid == done || epoch != 0 {
			t.Errorf("done's InitProducerId after it expired: producer id %d epoch %d, want a new producer id (not %d), epoch 0", pid, epoch, done)
		}

		e2, _ := restarted(t, log)
		_, err = e2.c.Describe("empty")
		wantErr(t, "empty after a reload", err, kerr.TransactionalIDNotFound)
		if got := e2.state("done"); got.ProducerID != pid || got.ProducerEpoch != 0 || got.State != Empty {
			t.Errorf("done after a reload: %+v", got)
		}
	})
}

// TestCompactionDropsExpiredIDs: "gone" expires (a tombstone), then "busy"
// commits transactions until the partition is compacted: nothing of
// "gone" is left from the log start on, neither its states nor its
// tombstone, and a coordinator loading the partition does not know it.
func TestCompactionDropsExpiredIDs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		log := &memLog{term: 1}
		e := newEnv(t, log, &fakeMarkers{}, func(c *Config) { c.IDExpiration, c.CompactAfter = 10*time.Minute, 20 })
		gpid, gepoch := e.mustInit("gone")
		e.add("gone", gpid, gepoch, orders0)
		e.end("gone", gpid, gepoch, true)
		synctest.Wait()
		time.Sleep(11 * time.Minute)
		synctest.Wait()
		if got := log.states(t, "gone"); got[len(got)-1] != Dead {
			t.Fatalf("gone: %v, want a tombstone last", got)
		}
		pid, epoch := e.mustInit("busy")
		for range 10 {
			e.add("busy", pid, epoch, orders1)
			e.end("busy", pid, epoch, true)
			synctest.Wait()
			time.Sleep(tick)
			synctest.Wait()
		}
		if got := log.states(t, "gone"); len(got) != 0 {
			t.Errorf("gone from the log start on: %v, want nothing (log start %d)", got, log.start)
		}
		e2, _ := restarted(t, log)
		_, err := e2.c.Describe("gone")
		wantErr(t, "gone after a reload", err, kerr.TransactionalIDNotFound)
		if got := e2.state("busy"); got.ProducerID != pid || got.State != CompleteCommit {
			t.Errorf("busy after a reload: %+v", got)
		}
	})
}
