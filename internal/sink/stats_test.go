package sink

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tapes-dev/tapes/internal/producer"
)

// applied is one effect of a hand-built sink: event id and key.
type applied struct{ id, key string }

// acked is one line of a hand-built history.
type acked struct {
	id string
	ok bool
}

func writeHistory(t *testing.T, path string, lines []acked) {
	t.Helper()
	var b strings.Builder
	for i, l := range lines {
		key := "key-1"
		h := producer.HistoryLine{EventID: l.id, Key: &key, Value: l.id, Offset: int64(i), Acks: "all", Status: producer.StatusOK,
			Attempts: 1, SentAt: time.Now()}
		if l.ok {
			now := time.Now()
			h.AckedAt = &now
		} else {
			name := "REQUEST_TIMED_OUT"
			h.Status, h.Error, h.Offset = producer.StatusError, &name, -1
		}
		buf, err := json.Marshal(h)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(buf)
		b.WriteByte('\n')
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

func buildSink(t *testing.T, path string, effects []applied) {
	t.Helper()
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i, e := range effects {
		if _, err := s.Apply(testCtx(t), effect(e.id, e.key, int64(i))); err != nil {
			t.Fatal(err)
		}
	}
}

func TestComputeStats(t *testing.T) {
	const a, b = "producer-1-0000abcd", "producer-2-00001234"
	id := func(p string, n int) string { return fmt.Sprintf("%s-%d", p, n) }
	clean := []applied{{id(a, 0), "key-1"}, {id(a, 1), "key-2"}, {id(a, 2), "key-1"}, {id(b, 0), "key-1"}}
	cleanHist := []acked{{id(a, 0), true}, {id(a, 1), true}, {id(a, 2), true}, {id(a, 3), false}}
	cases := []struct {
		name      string
		effects   []applied
		histories [][]acked // nil: none given
		want      Stats
	}{
		{
			name:    "clean",
			effects: clean, histories: [][]acked{cleanHist, {{id(b, 0), true}}},
			want: Stats{Delivered: 4, Effects: 4, Acked: 4},
		},
		{
			name:    "clean, no histories",
			effects: clean,
			want:    Stats{Delivered: 4, Effects: 4, Acked: Unknown, NeverProcessed: Unknown},
		},
		{
			name:    "empty sink",
			effects: nil, histories: [][]acked{{}},
			want: Stats{},
		},
		{
			name: "duplicates",
			effects: []applied{{id(a, 0), "key-1"}, {id(a, 1), "key-1"}, {id(a, 1), "key-1"}, {id(a, 1), "key-1"},
				{id(a, 2), "key-1"}, {id(a, 2), "key-1"}},
			want: Stats{Delivered: 3, Effects: 6, Duplicates: 3, Acked: Unknown, NeverProcessed: Unknown,
				DuplicateIDs: []string{id(a, 1), id(a, 2)}},
		},
		{
			// a-1 acknowledged, never applied; a-3 failed: not counted; b-0
			// applied but in no history: delivered all the same.
			name:      "never processed",
			effects:   []applied{{id(a, 0), "key-1"}, {id(a, 2), "key-1"}, {id(b, 0), "key-1"}},
			histories: [][]acked{{{id(a, 0), true}, {id(a, 1), true}, {id(a, 2), true}, {id(a, 3), false}}},
			want: Stats{Delivered: 3, Effects: 3, Acked: 3, NeverProcessed: 1,
				NeverProcessedIDs: []string{id(a, 1)}},
		},
		{
			// key-1 of a: 0, 2, then 1 (out of order). key-2 of a and
			// key-1 of b have their own order. The keyless effect and the
			// event id without a sequence do not count.
			name: "out of key order",
			effects: []applied{{id(a, 0), "key-1"}, {id(a, 2), "key-1"}, {id(a, 1), "key-2"}, {id(b, 0), "key-1"},
				{id(a, 1), "key-1"}, {id(a, 9), ""}, {id(a, 8), ""}, {"no-sequence-x", "key-1"}, {id(a, 3), "key-1"}},
			want: Stats{Delivered: 8, Effects: 9, Duplicates: 1, OutOfKeyOrder: 1, Acked: Unknown, NeverProcessed: Unknown,
				DuplicateIDs: []string{id(a, 1)}, OutOfKeyOrderIDs: []string{id(a, 1)}},
		},
		{
			// Replaying a-0, a-1 after a-2 (at-least-once after a
			// rebalance): a-0 and a-1 are out of order again, a-2 is not
			// (same sequence as the highest).
			name: "redelivery replays out of order",
			effects: []applied{{id(a, 0), "key-1"}, {id(a, 1), "key-1"}, {id(a, 2), "key-1"},
				{id(a, 0), "key-1"}, {id(a, 1), "key-1"}, {id(a, 2), "key-1"}},
			histories: [][]acked{{{id(a, 0), true}, {id(a, 1), true}, {id(a, 2), true}}},
			want: Stats{Delivered: 3, Effects: 6, Duplicates: 3, OutOfKeyOrder: 2, Acked: 3,
				DuplicateIDs: []string{id(a, 0), id(a, 1), id(a, 2)}, OutOfKeyOrderIDs: []string{id(a, 0), id(a, 1)}},
		},
		{
			name:    "effects without an event id",
			effects: []applied{{"", "key-1"}, {"", "key-1"}, {id(a, 0), "key-1"}},
			want:    Stats{Delivered: 1, Effects: 3, WithoutEventID: 2, Acked: Unknown, NeverProcessed: Unknown},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "sink.db")
			buildSink(t, path, c.effects)
			var hists []string
			for i, h := range c.histories {
				p := filepath.Join(dir, fmt.Sprintf("h%d.jsonl", i))
				writeHistory(t, p, h)
				hists = append(hists, p)
			}
			got, err := ComputeStats(testCtx(t), path, hists)
			if err != nil {
				t.Fatal(err)
			}
			want := c.want
			for _, l := range []*[]string{&want.DuplicateIDs, &want.NeverProcessedIDs, &want.OutOfKeyOrderIDs} {
				if *l == nil {
					*l = []string{}
				}
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("stats =\n%+v\nwant\n%+v", got, want)
			}
		})
	}
}

func TestComputeStatsCapsLists(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sink.db")
	var effects []applied
	for i := range ListCap + 5 {
		e := applied{fmt.Sprintf("p-1-%d", i), "key-1"}
		effects = append(effects, e, e)
	}
	buildSink(t, path, effects)
	st, err := ComputeStats(testCtx(t), path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if st.Duplicates != ListCap+5 || len(st.DuplicateIDs) != ListCap || st.DuplicateIDs[0] != "p-1-0" {
		t.Fatalf("duplicates %d, ids %q", st.Duplicates, st.DuplicateIDs)
	}
}

// TestComputeStatsWhileOpen: stats read what an open Sink committed.
func TestComputeStatsWhileOpen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sink.db")
	s := openSink(t, path, true)
	for _, id := range []string{"p-1-0", "p-1-1", "p-1-1"} {
		if _, err := s.Apply(testCtx(t), effect(id, "key-1", 0)); err != nil {
			t.Fatal(err)
		}
	}
	st, err := ComputeStats(testCtx(t), path, nil)
	if err != nil || st.Delivered != 2 || st.Effects != 2 || st.Duplicates != 0 {
		t.Fatalf("stats = %+v, %v; want 2 delivered, no duplicates", st, err)
	}
}

func TestComputeStatsErrors(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.db")
	buildSink(t, good, []applied{{"p-1-0", "key-1"}})

	missing := filepath.Join(dir, "missing.db")
	_, err := ComputeStats(testCtx(t), missing, nil)
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), missing) {
		t.Fatalf("stats of a missing file: %v; want an error naming %s", err, missing)
	}
	if entries, _ := filepath.Glob(missing + "*"); len(entries) != 0 {
		t.Fatalf("stats of a missing file created %q", entries)
	}

	empty := filepath.Join(dir, "empty.db")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ComputeStats(testCtx(t), empty, nil); err == nil || !strings.Contains(err.Error(), "not a sink database") {
		t.Fatalf("stats of an empty file: %v", err)
	}
	if _, err := ComputeStats(testCtx(t), dir, nil); err == nil || !strings.Contains(err.Error(), "directory") {
		t.Fatalf("stats of a directory: %v", err)
	}

	if _, err := ComputeStats(testCtx(t), good, []string{filepath.Join(dir, "nohist.jsonl")}); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("stats with a missing history: %v", err)
	}
	bad := filepath.Join(dir, "bad.jsonl")
	if err := os.WriteFile(bad, []byte("{not json\n{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ComputeStats(testCtx(t), good, []string{bad}); err == nil || !strings.Contains(err.Error(), bad) {
		t.Fatalf("stats with a bad history: %v", err)
	}
}

// TestPathsWithURICharacters: the file name goes into an SQLite URI.
func TestPathsWithURICharacters(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a b?c#d%20e.db")
	buildSink(t, path, []applied{{"p-1-0", "key-1"}})
	if _, err := os.Stat(path); err != nil {
		t.Fatal(err)
	}
	st, err := ComputeStats(testCtx(t), path, nil)
	if err != nil || st.Effects != 1 {
		t.Fatalf("stats = %+v, %v", st, err)
	}
}
