package dashboard_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tapes-dev/tapes/internal/dashboard"
	"github.com/tapes-dev/tapes/internal/testcluster"
)

// TestLiveTransactions: against real brokers, a committed, an aborted and
// an open transaction written by franz-go's transactional producer show on
// the tape as the page's state: each marker a cell of its own (commit,
// abort), the aborted records flagged, the open ones pending, the last
// stable offset at the open transaction's first offset (lagging the high
// watermark since a time), and the page's read_committed reader at the
// LSO, given only the committed records, beside its read_uncommitted one
// at the high watermark, given all eight; records written after the open
// transaction grow the lag, not the LSO's time; its commit ends the lag.
func TestLiveTransactions(t *testing.T) {
	e := testcluster.Start(t, dashboard.BuildCluster(t), 3, testcluster.FastBrokerArgs...)
	e.CreateTopic("payments", 1, 3, nil)
	base, _ := dashboard.ServePage(t, e, dashboard.Config{})

	p, err := kgo.NewClient(kgo.SeedBrokers(e.KafkaBootstrap()...), kgo.TransactionalID("page-txn"),
		kgo.TransactionTimeout(5*time.Minute), kgo.RecordRetries(100), kgo.DefaultProduceTopic("payments"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	pctx, pcancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer pcancel()
	commit, abort := kgo.TryCommit, kgo.TryAbort
	// Offsets: c-0..c-2 at 0-2, the commit marker at 3; a-0..a-2 at 4-6,
	// the abort marker at 7; o-0, o-1 at 8-9, left open.
	for _, tx := range []struct {
		prefix string
		n      int
		end    *kgo.TransactionEndTry
	}{{"c", 3, &commit}, {"a", 3, &abort}, {"o", 2, nil}} {
		if err := p.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for i := range tx.n {
			v := fmt.Sprintf("%s-%d", tx.prefix, i)
			if err := p.ProduceSync(pctx, &kgo.Record{Key: []byte(v), Value: []byte(v)}).FirstErr(); err != nil {
				t.Fatalf("produce %s: %v", v, err)
			}
		}
		if tx.end != nil {
			if err := p.EndTransaction(pctx, *tx.end); err != nil {
				t.Fatalf("end transaction %s: %v", tx.prefix, err)
			}
		}
	}

	want := []struct {
		value, control, txn string
	}{{"c-0", "", "committed"}, {"c-1", "", "committed"}, {"c-2", "", "committed"}, {"", "commit", ""},
		{"a-0", "", "aborted"}, {"a-1", "", "aborted"}, {"a-2", "", "aborted"}, {"", "abort", ""},
		{"o-0", "", "open"}, {"o-1", "", "open"}}
	s := dashboard.WaitState(t, base, "the three transactions on the tape of payments", 60*time.Second, func(s *dashboard.Snapshot) bool {
		return len(s.Topics) == 1 && len(s.Topics[0].Partitions) == 1 && s.Topics[0].Partitions[0].HighWatermark == 10 &&
			len(s.Topics[0].Partitions[0].Records) == 10
	})
	pp := s.Topics[0].Partitions[0]
	for i, w := range want {
		r := pp.Records[i]
		if r.Offset != int64(i) || r.Value != w.value || r.Control != w.control || r.Txn != w.txn {
			t.Errorf("offset %d: %+v, want value %q control %q txn %q", i, r, w.value, w.control, w.txn)
		}
		if r.ProducerID != pp.Records[0].ProducerID {
			t.Errorf("offset %d: producer %d, the first record's %d", i, r.ProducerID, pp.Records[0].ProducerID)
		}
	}
	if pp.LastStable != 8 || pp.LastStableLag != 2 {
		t.Errorf("last stable offset %d lag %d, want 8 (the open transaction's first offset) and 2", pp.LastStable, pp.LastStableLag)
	}
	if since := time.UnixMilli(pp.LastStableSince); pp.LastStableSince == 0 || time.Since(since) < 0 || time.Since(since) > time.Minute {
		t.Errorf("lastStableSince %d: want when the page first saw the LSO at 8", pp.LastStableSince)
	}
	wantReaders := []dashboard.TapeReader{{Isolation: "read_uncommitted", Position: 10, Records: 8, Aborted: 3},
		{Isolation: "read_committed", Position: 8, Records: 3}}
	if fmt.Sprint(pp.Readers) != fmt.Sprint(wantReaders) {
		t.Errorf("readers %+v, want %+v", pp.Readers, wantReaders)
	}

	// The same on the page, in Chromium when there is one.
	if chrome := chromePath(); chrome != "" {
		pg := newPage(t, chrome, 2*time.Minute)
		pg.navigate(base + "/")
		const tape = `document.querySelector('.tape[data-topic="payments"][data-partition="0"]')`
		pg.wait("payments-0's transactions on the page", `(() => { const t = `+tape+`; if (!t) return false;
		  const offs = (sel) => [...t.querySelectorAll(sel)].map(c => c.dataset.offset).join(',');
		  const lso = t.querySelector('.lso-line');
		  return offs('.cell.marker.commit') === '3' && offs('.cell.marker.abort') === '7' && offs('.cell.txn-aborted') === '4,5,6' &&
		    offs('.cell.txn-open') === '8,9' && offs('.cell.txn-committed') === '0,1,2' &&
		    getComputedStyle(t.querySelector('.cell[data-offset="5"]')).textDecorationLine === 'line-through' &&
		    lso && lso.dataset.offset === '8' && t.querySelector('.hw-line').dataset.offset === '10' && t.querySelector('.lso-lag').dataset.lag === '2' &&
		    t.querySelector('.cursor.reader[data-isolation="read_committed"]').dataset.position === '8' &&
		    t.querySelector('.cursor.reader[data-isolation="read_uncommitted"]').dataset.position === '10' })()`, 30*time.Second)
		pg.shot("transactions")
		pg.checkClean()
	} else {
		t.Log("no chromium or chrome on $PATH: the page's rendering of the transactions is not checked here (TestBrowserPageFakeServer skips too)")
	}

	// A hanging transaction: records written after it (10-11, outside
	// transactions) move the high watermark, not the LSO, which keeps the
	// time it stopped at; read_committed readers wait at it.
	since := pp.LastStableSince
	e.ProduceN("payments", 0, "plain", 2)
	s = dashboard.WaitState(t, base, "two more records behind the open transaction", 30*time.Second, func(s *dashboard.Snapshot) bool {
		return s.Topics[0].Partitions[0].LastStableLag == 4
	})
	pp = s.Topics[0].Partitions[0]
	if pp.LastStable != 8 || pp.LastStableSince != since || len(pp.Records) != 12 || pp.Records[10].Txn != "" || pp.Records[11].Txn != "" ||
		pp.Readers[1] != (dashboard.TapeReader{Isolation: "read_committed", Position: 8, Records: 3}) {
		t.Errorf("behind the open transaction: LSO %d since %d (was %d), records %+v, readers %+v", pp.LastStable, pp.LastStableSince, since, pp.Records[10:], pp.Readers)
	}

	// The open transaction commits: the LSO reaches the high watermark
	// (past the new marker), its records are committed, the lag is gone.
	if err := p.EndTransaction(pctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	s = dashboard.WaitState(t, base, "the open transaction committed", 30*time.Second, func(s *dashboard.Snapshot) bool {
		pp := s.Topics[0].Partitions[0]
		return pp.HighWatermark == 13 && len(pp.Records) == 13 && pp.LastStable == 13 && pp.LastStableLag == 0
	})
	pp = s.Topics[0].Partitions[0]
	if pp.Records[8].Txn != "committed" || pp.Records[9].Txn != "committed" || pp.Records[12].Control != "commit" || pp.LastStableSince != 0 {
		t.Errorf("after the commit: %+v %+v %+v, lastStableSince %d", pp.Records[8], pp.Records[9], pp.Records[12], pp.LastStableSince)
	}
	if r := pp.Readers[1]; r.Position != 13 || r.Records != 7 {
		t.Errorf("read_committed reader after the commit: %+v, want position 13 and 7 records", r)
	}
}
