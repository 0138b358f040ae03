package storage

import (
	"testing"
)

// TestOffsetForTimestamp compares OffsetForTimestamp with a linear search
// over timestamps that go back and forth, across many segments with dense
// time indexes, before and after a restart and a DeleteBefore.
func TestOffsetForTimestamp(t *testing.T) {
	l := openLog(t, t.TempDir(), Config{SegmentBytes: 3000, IndexIntervalBytes: 200})
	tsOf := func(n int64) int64 { return 10*n + 300*((n*37)%5) - 600 }
	var (
		ts   []int64
		raft uint64
	)
	for len(ts) < 1500 {
		recs := make([]Record, 1+len(ts)%9)
		for i := range recs {
			n := int64(len(ts))
			recs[i] = Record{Timestamp: tsOf(n), Value: make([]byte, 30)}
			ts = append(ts, tsOf(n))
		}
		raft++
		if _, err := l.Append(raft, EncodeBatch(recs)); err != nil {
			t.Fatal(err)
		}
	}
	lo, hi := ts[0], ts[0]
	for _, x := range ts {
		lo, hi = min(lo, x), max(hi, x)
	}
	check := func(start int64) {
		t.Helper()
		for target := lo - 10; target <= hi+10; target += 7 {
			want := int64(-1)
			for n := start; n < int64(len(ts)); n++ {
				if ts[n] >= target {
					want = n
					break
				}
			}
			o, got, ok := l.OffsetForTimestamp(target)
			if want < 0 {
				if ok {
					t.Fatalf("OffsetForTimestamp(%d) = %d, want none", target, o)
				}
				continue
			}
			if !ok || o != want || got != ts[want] {
				t.Fatalf("OffsetForTimestamp(%d) = %d (ts %d, %v), want %d (ts %d)", target, o, got, ok, want, ts[want])
			}
		}
	}
	check(0)
	l = reopen(t, l)
	check(0)

	l.mu.RLock()
	entries := 0
	for _, s := range l.segs {
		entries += len(s.timeIdx)
	}
	segments := len(l.segs)
	for _, s := range l.segs {
		// The time index's promise: records below an entry's offset are
		// no later than its timestamp.
		for _, e := range s.timeIdx {
			for n := s.base; n < s.base+int64(e.rel); n++ {
				if ts[n] > e.ts {
					t.Fatalf("time entry %d@%d, but record %d has timestamp %d", e.ts, e.rel, n, ts[n])
				}
			}
		}
	}
	l.mu.RUnlock()
	if entries < 3*segments {
		t.Fatalf("%d time index entries in %d segments: the test needs them dense", entries, segments)
	}

	raft++
	if _, err := l.DeleteBefore(777, raft); err != nil {
		t.Fatal(err)
	}
	check(777)
}
