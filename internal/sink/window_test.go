package sink

import (
	"path/filepath"
	"testing"
	"time"
)

// applyAt applies the record with event id id at clock time at and
// returns whether it was applied.
func applyAt(t *testing.T, s *Sink, id string, offset int64, at time.Time) bool {
	t.Helper()
	e := effect(id, "key-0", offset)
	e.At = at
	applied, err := s.Apply(testCtx(t), e)
	if err != nil {
		t.Fatal(err)
	}
	return applied
}

// openAgeWindow opens a new idempotent sink with a time window of age
// whose clock reads *now.
func openAgeWindow(t *testing.T, age time.Duration, now *time.Time) (string, *Sink) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sink.db")
	s, err := Open(path, Options{Idempotent: true, Window: Window{Age: age}, Now: func() time.Time { return *now }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return path, s
}

// TestWindowCountKeepsTheLastN: with a window of 3 ids, applying a..e
// leaves c, d, e in processed: a redelivered a is applied again, a
// redelivered e is not, and processed never holds more than 3 ids.
func TestWindowCountKeepsTheLastN(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sink.db")
	s, err := Open(path, Options{Idempotent: true, Window: Window{Count: 3}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i, id := range []string{"a", "b", "c", "d", "e"} {
		if !applyAt(t, s, id, int64(i), at) {
			t.Fatalf("%s not applied the first time", id)
		}
		if n := readTable(t, path).processed; n > 3 {
			t.Fatalf("after %s: %d ids in processed, want at most 3", id, n)
		}
	}
	if applyAt(t, s, "e", 4, at) || applyAt(t, s, "c", 2, at) {
		t.Fatal("an id inside the window was applied again")
	}
	if !applyAt(t, s, "a", 0, at) {
		t.Fatal("a, evicted from the window, was not applied again")
	}
	// a is now the newest: c went out of the window, d and e stay.
	if !applyAt(t, s, "c", 2, at) {
		t.Fatal("c, pushed out by the redelivered a, was not applied again")
	}
	if applyAt(t, s, "e", 4, at) {
		t.Fatal("e is inside the window and was applied again")
	}
	if tb := readTable(t, path); tb.effects != 7 || tb.processed != 3 || tb.balances["key-0"] != 7 {
		t.Fatalf("sink holds %+v, want 7 effects, 3 processed ids, key-0 applied 7 times", tb)
	}
}

// TestWindowAgeKeepsTheYoungIDs: with a 10 s window and an injected
// clock, an id applied 11 s ago is applied again and one applied 5 s ago
// is not; the cutoff is the record's own apply time.
func TestWindowAgeKeepsTheYoungIDs(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := t0
	path, s := openAgeWindow(t, 10*time.Second, &now)
	apply := func(id string, off int64) bool {
		t.Helper()
		applied, err := s.Apply(testCtx(t), effect(id, "key-0", off))
		if err != nil {
			t.Fatal(err)
		}
		return applied
	}
	if !apply("a", 0) {
		t.Fatal("a not applied")
	}
	now = t0.Add(6 * time.Second)
	if !apply("b", 1) {
		t.Fatal("b not applied")
	}
	now = t0.Add(10 * time.Second) // a is exactly 10 s old: still inside
	if apply("a", 0) {
		t.Fatal("a, 10 s old, was applied again")
	}
	now = t0.Add(11 * time.Second)
	if !apply("a", 0) {
		t.Fatal("a, 11 s old, was not applied again")
	}
	if apply("b", 1) {
		t.Fatal("b, 5 s old, was applied again")
	}
	if tb := readTable(t, path); tb.processed != 2 || tb.effects != 3 {
		t.Fatalf("sink holds %+v, want 3 effects and 2 processed ids (a again, b)", tb)
	}
	now = t0.Add(17 * time.Second)
	if !apply("b", 1) {
		t.Fatal("b, 11 s old, was not applied again")
	}
}

// TestWindowEvictionRollsBackWithADuplicate: the eviction is part of the
// effect's transaction, so a redelivery that is not applied evicts
// nothing either (nothing half-written).
func TestWindowEvictionRollsBackWithADuplicate(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := t0
	path, s := openAgeWindow(t, 10*time.Second, &now)
	applyAt(t, s, "old", 0, t0)
	now = t0.Add(8 * time.Second)
	applyAt(t, s, "young", 1, now)
	now = t0.Add(12 * time.Second)
	if applyAt(t, s, "young", 1, now) {
		t.Fatal("young applied again")
	}
	if n := readTable(t, path).processed; n != 2 {
		t.Fatalf("%d ids in processed after a duplicate, want 2: the duplicate's transaction evicted old", n)
	}
}

func TestParseWindow(t *testing.T) {
	for in, want := range map[string]Window{"1000": {Count: 1000}, "30s": {Age: 30 * time.Second}, "1m30s": {Age: 90 * time.Second}} {
		got, err := ParseWindow(in)
		if err != nil || got != want {
			t.Errorf("ParseWindow(%q) = %+v, %v; want %+v", in, got, err, want)
		}
		if got.String() != want.String() {
			t.Errorf("%+v.String() = %q", got, got.String())
		}
	}
	for _, in := range []string{"0", "-5", "0s", "-1s", "ten", ""} {
		if w, err := ParseWindow(in); err == nil {
			t.Errorf("ParseWindow(%q) = %+v, want an error", in, w)
		}
	}
}

func TestOpenRefusesTwoWindows(t *testing.T) {
	if s, err := Open(filepath.Join(t.TempDir(), "sink.db"), Options{Idempotent: true, Window: Window{Count: 1, Age: time.Second}}); err == nil {
		s.Close()
		t.Fatal("a window with both a count and an age was accepted")
	}
}

// TestVersion1FileIsUpgraded: a sink written by the previous schema (no
// processed_log) opens with a window: processed_log is added, the ids it
// already had stay deduplicated (a window never evicts them: they have no
// place in the log), and new ones are windowed.
func TestVersion1FileIsUpgraded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sink.db")
	s := openSink(t, path, true)
	if _, err := s.Apply(testCtx(t), effect("old", "key-0", 0)); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{`DROP TABLE processed_log`, `PRAGMA user_version = 1`} {
		if _, err := s.db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	w, err := Open(path, Options{Idempotent: true, Window: Window{Count: 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	var version int
	if err := w.db.QueryRow(`PRAGMA user_version`).Scan(&version); err != nil || version != SchemaVersion {
		t.Fatalf("user_version %d (%v), want %d", version, err, SchemaVersion)
	}
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i, id := range []string{"a", "b"} {
		if !applyAt(t, w, id, int64(i+1), at) {
			t.Fatalf("%s not applied", id)
		}
	}
	if applyAt(t, w, "old", 0, at) {
		t.Fatal("the id of the version 1 file was applied again")
	}
	if !applyAt(t, w, "a", 1, at) || applyAt(t, w, "a", 1, at) {
		t.Fatal("a, pushed out of the 1-id window by b, was not applied exactly once more")
	}
}
