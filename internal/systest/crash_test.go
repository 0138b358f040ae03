package systest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/tapes-dev/tapes/internal/eventually"
	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/testcluster"
)

// TestKillEveryBrokerKeepsAcknowledged: under acks=all load on three
// partitions (RF 3, min.insync.replicas=2, two producers each), every
// broker is SIGKILLed at once; once all of them restarted, every batch
// that was acknowledged is in its partition at the offset its answer gave.
// A process crash keeps the page cache, so this proves that no broker
// answers before its Raft log store has written what it acknowledges (and
// that restart recovers it); that the write was also fsynced is shown by
// the log store's own tests (internal/raftlog TestGroupCommit).
func TestKillEveryBrokerKeepsAcknowledged(t *testing.T) {
	e := start(t, 3)
	const parts, writers, perBatch = 3, 2, 20
	e.CreateTopic("crash", parts, 3, map[string]string{"min.insync.replicas": "2"})
	type ack struct {
		offset int64
		values []string
	}
	var (
		mu    sync.Mutex
		acked = make([][]ack, parts)
		total int
	)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	for p := range parts {
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ctx.Err() == nil; i++ {
					recs := testcluster.Records(fmt.Sprintf("p%d-w%d-b%d", p, w, i), 0, perBatch)
					rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
					resp, err := e.Client.Produce(rctx, &tapesv1.ProduceRequest{Topic: "crash", Partition: int32(p), Acks: -1, Records: recs})
					rcancel()
					if err != nil {
						continue
					}
					mu.Lock()
					acked[p] = append(acked[p], ack{resp.BaseOffset, testcluster.Values(recs)})
					total++
					mu.Unlock()
				}
			}()
		}
	}
	acks := func() int {
		mu.Lock()
		defer mu.Unlock()
		return total
	}
	if err := eventually.WaitEvery(60*time.Second, 50*time.Millisecond, func() error {
		if n := acks(); n < 150 {
			return fmt.Errorf("%d batches acknowledged", n)
		}
		return nil
	}); err != nil {
		t.Fatalf("load before the crash: %v", err)
	}
	var kills sync.WaitGroup
	for _, b := range e.Brokers() {
		kills.Add(1)
		go func() {
			defer kills.Done()
			if err := e.C.Kill(b.Name); err != nil {
				t.Errorf("kill %s: %v", b.Name, err)
			}
		}()
	}
	kills.Wait()
	cancel() // nothing is acknowledged after the crash: every broker is gone
	wg.Wait()
	t.Logf("%d batches acknowledged before every broker was SIGKILLed", acks())
	for _, b := range e.Brokers() {
		if err := e.C.Restart(b.Name); err != nil {
			t.Fatalf("restart %s: %v", b.Name, err)
		}
	}
	e.WaitSettled("crash", 90*time.Second)
	for p := range parts {
		got := map[int64]string{}
		for _, r := range e.ReadAll("crash", int32(p)) {
			got[r.Offset] = string(r.Value)
		}
		lost := 0
		for _, a := range acked[p] {
			for i, v := range a.values {
				if got[a.offset+int64(i)] != v {
					if lost < 5 {
						t.Errorf("partition %d offset %d: acknowledged %q, after the restart %q", p, a.offset+int64(i), v, got[a.offset+int64(i)])
					}
					lost++
				}
			}
		}
		if lost > 0 {
			t.Errorf("partition %d: %d acknowledged records not where their answers put them (of %d batches)", p, lost, len(acked[p]))
		}
	}
	// The Raft logs these records went through are the broker's shared
	// log (the default, --raft-log wal), and their terms and votes the
	// broker's shared stable store (DATA/stable.db): a partition's
	// directory has neither raft.db nor stable.db.
	dataDirs := map[string]string{}
	for _, b := range e.Brokers() {
		dataDirs[b.Name] = b.DataDir
		if _, err := os.Stat(filepath.Join(b.DataDir, "stable.db")); err != nil {
			t.Errorf("%s: no shared stable store: %v", b.Name, err)
		}
	}
	for b, dirs := range partitionDirs(t, e, "crash") {
		for _, d := range dirs {
			dir := filepath.Join(dataDirs[b], "partitions", d)
			if _, err := os.Stat(filepath.Join(dir, "stable.db")); err == nil {
				t.Errorf("%s has a stable.db: its term and vote are not in the shared stable store", dir)
			}
			if _, err := os.Stat(filepath.Join(dir, "raft.db")); err == nil {
				t.Errorf("%s has a raft.db: its Raft log is not in the shared log", dir)
			}
		}
	}
}
