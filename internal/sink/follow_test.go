package sink

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"reflect"
	"testing"
)

// TestFollowerCountsAsComputeStats: polled in steps, with histories read
// in between, a Follower counts what ComputeStats counts at the end, and
// flags the effects it returns.
func TestFollowerCountsAsComputeStats(t *testing.T) {
	const a = "producer-1-0000abcd"
	id := func(n int) string { return fmt.Sprintf("%s-%d", a, n) }
	dir := t.TempDir()
	path := filepath.Join(dir, "sink.db")
	f := NewFollower(path)
	defer f.Close()
	if _, err := f.Poll(testCtx(t), 10); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Poll before the file exists = %v, want fs.ErrNotExist", err)
	}

	s := openSink(t, path, false)
	apply := func(offset int64, ids ...int) {
		for _, n := range ids {
			if _, err := s.Apply(testCtx(t), effect(id(n), "key-1", offset)); err != nil {
				t.Fatal(err)
			}
		}
	}
	apply(0, 0, 2)
	f.Acked(id(0), id(1), id(2))
	got, err := f.Poll(testCtx(t), 10)
	if err != nil || len(got) != 2 || got[0].EventID != id(0) || got[1].EventID != id(2) || got[1].Duplicate || got[1].OutOfKeyOrder {
		t.Fatalf("first poll = %+v, %v", got, err)
	}
	if st := f.Stats(); st.NeverProcessed != 1 || st.Acked != 3 || st.Delivered != 2 {
		t.Fatalf("after the first poll: %+v", st)
	}
	apply(1, 1, 2, 3) // 1 out of key order, 2 a duplicate
	f.Acked(id(3), id(4))
	got, err = f.Poll(testCtx(t), 2)
	if err != nil || len(got) != 2 || got[0].EventID != id(2) || !got[0].Duplicate || got[1].EventID != id(3) || got[1].Duplicate {
		t.Fatalf("second poll (last 2) = %+v, %v", got, err)
	}
	if got, err := f.Poll(testCtx(t), 10); err != nil || len(got) != 0 {
		t.Fatalf("poll without news = %+v, %v", got, err)
	}

	hist := filepath.Join(dir, "h.jsonl")
	writeHistory(t, hist, []acked{{id(0), true}, {id(1), true}, {id(2), true}, {id(3), true}, {id(4), true}})
	want, err := ComputeStats(testCtx(t), path, []string{hist})
	if err != nil {
		t.Fatal(err)
	}
	want.NeverProcessedIDs = []string{} // the Follower keeps no list of them
	if st := f.Stats(); !reflect.DeepEqual(st, want) {
		t.Fatalf("Follower stats\n %+v\nComputeStats\n %+v", st, want)
	}
}

// TestFollowerFlagsOutOfOrder: the flag of an effect out of key order.
func TestFollowerFlagsOutOfOrder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sink.db")
	buildSink(t, path, []applied{{"p-1-x-0", "k"}, {"p-1-x-2", "k"}, {"p-1-x-1", "k"}})
	f := NewFollower(path)
	defer f.Close()
	got, err := f.Poll(testCtx(t), 10)
	if err != nil || len(got) != 3 || got[0].OutOfKeyOrder || got[1].OutOfKeyOrder || !got[2].OutOfKeyOrder {
		t.Fatalf("poll = %+v, %v", got, err)
	}
	if st := f.Stats(); st.Acked != Unknown || st.NeverProcessed != Unknown || st.OutOfKeyOrder != 1 {
		t.Fatalf("stats without Acked = %+v", st)
	}
}
