package sink

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func openSink(t *testing.T, path string, idempotent bool) *Sink {
	t.Helper()
	s, err := Open(path, Options{Idempotent: idempotent})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func effect(id, key string, offset int64) Effect {
	return Effect{Consumer: "consumer-1", Generation: 1, Topic: "orders", Partition: 0, Offset: offset,
		EventID: id, Key: key, Value: []byte(id)}
}

// table reads what a sink file holds.
type table struct {
	effects   int64
	processed int64
	balances  map[string]int64
}

func readTable(t *testing.T, path string) table {
	t.Helper()
	db, err := sql.Open("sqlite", dsn(path, "mode=ro"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var tb table
	if err := db.QueryRow(`SELECT count(*) FROM effects`).Scan(&tb.effects); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRow(`SELECT count(*) FROM processed`).Scan(&tb.processed); err != nil {
		t.Fatal(err)
	}
	rows, err := db.Query(`SELECT key, applied FROM balances`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	tb.balances = map[string]int64{}
	for rows.Next() {
		var k string
		var n int64
		if err := rows.Scan(&k, &n); err != nil {
			t.Fatal(err)
		}
		tb.balances[k] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return tb
}

func TestApplyRedelivery(t *testing.T) {
	cases := []struct {
		name        string
		idempotent  bool
		wantApplied []bool
		want        table
	}{
		{"plain applies a redelivery twice", false, []bool{true, true}, table{effects: 2, processed: 0, balances: map[string]int64{"key-1": 2}}},
		{"idempotent applies a redelivery once", true, []bool{true, false}, table{effects: 1, processed: 1, balances: map[string]int64{"key-1": 1}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "sink.db")
			s := openSink(t, path, c.idempotent)
			e := effect("p-0000000a-1", "key-1", 7)
			for i, want := range c.wantApplied {
				e.Generation = int32(i + 1) // redelivered after a rebalance
				got, err := s.Apply(testCtx(t), e)
				if err != nil || got != want {
					t.Fatalf("delivery %d: Apply = %v, %v; want %v", i+1, got, err, want)
				}
			}
			got := readTable(t, path)
			if got.effects != c.want.effects || got.processed != c.want.processed || fmt.Sprint(got.balances) != fmt.Sprint(c.want.balances) {
				t.Fatalf("sink holds %+v, want %+v", got, c.want)
			}
		})
	}
}

func TestApplyWritesTheEffectRow(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sink.db")
	s := openSink(t, path, false)
	at := time.Date(2026, 3, 4, 5, 6, 7, 891234000, time.FixedZone("X", 3600))
	e := Effect{Consumer: "consumer-2", Generation: 9, Topic: "orders", Partition: 2, Offset: 41,
		EventID: "p-1", Key: "key-3", Value: []byte("v\x00v"), At: at}
	if ok, err := s.Apply(testCtx(t), e); !ok || err != nil {
		t.Fatalf("Apply = %v, %v", ok, err)
	}
	// No value, no key, no event id: still one effect, no balance.
	if ok, err := s.Apply(testCtx(t), Effect{Topic: "orders", Offset: 42}); !ok || err != nil {
		t.Fatalf("Apply (empty) = %v, %v", ok, err)
	}
	db, err := sql.Open("sqlite", dsn(path, "mode=ro"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var got Effect
	var atText string
	var seq int64
	err = db.QueryRow(`SELECT seq, event_id, key, topic, "partition", "offset", consumer, generation, value, at FROM effects ORDER BY seq LIMIT 1`).
		Scan(&seq, &got.EventID, &got.Key, &got.Topic, &got.Partition, &got.Offset, &got.Consumer, &got.Generation, &got.Value, &atText)
	if err != nil {
		t.Fatal(err)
	}
	got.At, err = time.Parse(atLayout, atText)
	if err != nil {
		t.Fatal(err)
	}
	if seq != 1 || atText != "2026-03-04T04:06:07.891234Z" || !got.At.Equal(at) || string(got.Value) != string(e.Value) ||
		got.EventID != e.EventID || got.Key != e.Key || got.Topic != e.Topic || got.Partition != e.Partition ||
		got.Offset != e.Offset || got.Consumer != e.Consumer || got.Generation != e.Generation {
		t.Fatalf("effect row %d = %+v at %q, want %+v", seq, got, atText, e)
	}
	if tb := readTable(t, path); tb.effects != 2 || len(tb.balances) != 1 || tb.balances["key-3"] != 1 {
		t.Fatalf("sink holds %+v, want 2 effects and key-3 applied once", tb)
	}
}

// TestIdempotentWithoutEventID: a record without an event_id is
// deduplicated by its position.
func TestIdempotentWithoutEventID(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sink.db")
	s := openSink(t, path, true)
	for i, c := range []struct {
		offset int64
		want   bool
	}{{5, true}, {5, false}, {6, true}} {
		if got, err := s.Apply(testCtx(t), effect("", "key-1", c.offset)); got != c.want || err != nil {
			t.Fatalf("apply %d (offset %d) = %v, %v; want %v", i, c.offset, got, err, c.want)
		}
	}
}

// TestModesShareOneFile: a plain and an idempotent consumer on one file.
func TestModesShareOneFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sink.db")
	plain, idem := openSink(t, path, false), openSink(t, path, true)
	ctx := testCtx(t)
	for _, s := range []*Sink{plain, idem, plain, idem} {
		if _, err := s.Apply(ctx, effect("p-1", "key-1", 0)); err != nil {
			t.Fatal(err)
		}
	}
	// plain twice, idempotent once.
	if tb := readTable(t, path); tb.effects != 3 || tb.processed != 1 || tb.balances["key-1"] != 3 {
		t.Fatalf("sink holds %+v, want 3 effects, 1 processed, key-1 applied 3 times", tb)
	}
}

// TestConcurrentSinksLoseNothing: two Sinks on one file (two consumers),
// each applied from two goroutines at once.
func TestConcurrentSinksLoseNothing(t *testing.T) {
	const perWorker = 60
	for _, idempotent := range []bool{false, true} {
		t.Run(fmt.Sprintf("idempotent=%v", idempotent), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "sink.db")
			sinks := []*Sink{openSink(t, path, idempotent), openSink(t, path, idempotent)}
			ctx := testCtx(t)
			var wg sync.WaitGroup
			var mu sync.Mutex
			applied := 0
			errs := make(chan error, 4)
			for w := range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					s := sinks[w%2]
					for i := range perWorker {
						// Idempotent: workers 0 and 1, and 2 and 3, apply the same
						// event ids through different sinks; plain: all distinct.
						id := fmt.Sprintf("p-%d-%d", w/2, i)
						if !idempotent {
							id = fmt.Sprintf("p-%d-%d", w, i)
						}
						ok, err := s.Apply(ctx, effect(id, fmt.Sprintf("key-%d", i%5), int64(i)))
						if err != nil {
							errs <- err
							return
						}
						if ok {
							mu.Lock()
							applied++
							mu.Unlock()
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			want := 4 * perWorker
			if idempotent {
				want = 2 * perWorker
			}
			tb := readTable(t, path)
			var sum int64
			for _, n := range tb.balances {
				sum += n
			}
			if applied != want || tb.effects != int64(want) || sum != int64(want) {
				t.Fatalf("applied %d, %d effects, balances sum %d; want %d each", applied, tb.effects, sum, want)
			}
		})
	}
}

// TestApplyWaitsForTheLock: a writer from elsewhere (another process, as
// far as SQLite can tell) holds the write lock longer than busy_timeout
// would matter for; Apply waits and succeeds once it is released.
func TestApplyWaitsForTheLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sink.db")
	s := openSink(t, path, true)
	other, err := sql.Open("sqlite", dsn(path, "_txlock=immediate"))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	tx, err := other.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(`INSERT INTO balances(key, applied) VALUES ('other', 1)`); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := s.Apply(testCtx(t), effect("p-1", "key-1", 0))
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("Apply returned while the lock was held: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if tb := readTable(t, path); tb.effects != 1 || tb.balances["other"] != 1 {
		t.Fatalf("sink holds %+v", tb)
	}
}

// TestApplyGivesUpAfterLockWait: a lock held past LockWait is an error
// wrapping ErrLocked, and nothing is written.
func TestApplyGivesUpAfterLockWait(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sink.db")
	openSink(t, path, false) // creates the schema
	other, err := sql.Open("sqlite", dsn(path, "_txlock=immediate"))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	tx, err := other.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.Exec(`INSERT INTO balances(key, applied) VALUES ('other', 1)`); err != nil {
		t.Fatal(err)
	}
	s, err := Open(path, Options{LockWait: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err) // the schema exists: opening needs no write lock
	}
	defer s.Close()
	ok, err := s.Apply(testCtx(t), effect("p-1", "key-1", 0))
	if ok || !errors.Is(err, ErrLocked) {
		t.Fatalf("Apply under a held lock = %v, %v; want ErrLocked", ok, err)
	}

	// With the default LockWait, the context ends the wait.
	s2 := openSink(t, path, false)
	ctx, cancel := context.WithTimeout(testCtx(t), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	ok, err = s2.Apply(ctx, effect("p-2", "key-1", 1))
	if ok || err == nil || time.Since(start) > 5*time.Second {
		t.Fatalf("Apply under a held lock with a 200ms context = %v, %v after %v", ok, err, time.Since(start))
	}
	tx.Rollback()
	if tb := readTable(t, path); tb.effects != 0 {
		t.Fatalf("sink holds %+v, want nothing", tb)
	}
}

// TestConcurrentOpenOfANewFile: consumers starting together all create the
// schema of a file that does not exist yet.
func TestConcurrentOpenOfANewFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sink.db")
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := Open(path, Options{Idempotent: i%2 == 0})
			if err != nil {
				errs <- err
				return
			}
			defer s.Close()
			if _, err := s.Apply(testCtx(t), effect(fmt.Sprintf("p-%d", i), "key-1", int64(i))); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if tb := readTable(t, path); tb.effects != 4 || tb.balances["key-1"] != 4 {
		t.Fatalf("sink holds %+v, want 4 effects", tb)
	}
}
