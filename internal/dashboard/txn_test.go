package dashboard

import (
	"fmt"
	"testing"

	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
)

// TestTapeRecords: the cells of a window from a read_uncommitted read's
// records, markers and aborted transactions. Producer 1's transaction is
// open (0, 3), producer 2's committed above the LSO (1, 2; marker 4),
// producer 3's aborted though it began before the window (5; the fetch
// lists it from first offset -10, marker 6), a plain record (7).
func TestTapeRecords(t *testing.T) {
	rec := func(off, pid int64) *tapesv1.Record {
		return &tapesv1.Record{Offset: off, Value: fmt.Appendf(nil, "v%d", off), Transactional: pid > 0, ProducerId: pid}
	}
	ru := rangeRead{
		recs:    []*tapesv1.Record{rec(0, 1), rec(1, 2), rec(2, 2), rec(3, 1), rec(5, 3), rec(7, 0)},
		markers: []*tapesv1.FetchTransactionMarker{{Offset: 4, ProducerId: 2, Commit: true}, {Offset: 6, ProducerId: 3}},
		aborted: []*tapesv1.FetchAbortedTransaction{{ProducerId: 3, FirstOffset: -10, LastOffset: 6}},
		reached: 8, lso: 0,
	}
	rc := rangeRead{reached: 0, lso: 0}
	got, readers := tapeRecords(ru, rc)
	want := []string{"0 open 1", "1 committed 2", "2 committed 2", "3 open 1", "4 commit 2", "5 aborted 3", "6 abort 3", "7  0"}
	if len(got) != len(want) {
		t.Fatalf("%d cells %+v, want %d", len(got), got, len(want))
	}
	for i, r := range got {
		kind := r.Txn + r.Control
		if s := fmt.Sprintf("%d %s %d", r.Offset, kind, r.ProducerID); s != want[i] {
			t.Errorf("cell %d: %q, want %q", i, s, want[i])
		}
		if r.Control != "" && (r.Value != "" || r.Key != nil) {
			t.Errorf("marker cell %+v carries a value", r)
		}
	}
	wantReaders := []TapeReader{{Isolation: "read_uncommitted", Position: 8, Records: 6, Aborted: 1}, {Isolation: "read_committed", Position: 0}}
	if fmt.Sprint(readers) != fmt.Sprint(wantReaders) {
		t.Errorf("readers %+v, want %+v", readers, wantReaders)
	}

	// A window that starts above the LSO: the read_committed reader reads
	// nothing from the window's start and waits at the LSO.
	_, readers = tapeRecords(rangeRead{reached: 30, lso: 12}, rangeRead{reached: 20, lso: 12})
	if readers[1].Position != 12 {
		t.Errorf("read_committed reader of a window above the LSO at %d, want 12", readers[1].Position)
	}
}
