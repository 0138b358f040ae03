package sink

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/tapes-dev/tapes/internal/producer"
)

// ListCap is the most event ids each list of Stats holds.
const ListCap = 20

// Unknown is the value of a Stats counter that needs producer histories
// when none were given.
const Unknown = -1

// Stats are the counters of a sink file, computed by ComputeStats.
type Stats struct {
	// Delivered is the number of distinct event_ids with at least one effect.
	Delivered int64 `json:"delivered"`
	// Effects is the number of effect rows.
	Effects int64 `json:"effects"`
	// Duplicates is the number of effects beyond the first of their
	// event_id: the sum over event_ids of (effects - 1).
	Duplicates int64 `json:"duplicates"`
	// Acked is the number of records the producer histories show
	// acknowledged (status "ok"); Unknown without histories.
	Acked int64 `json:"acked"`
	// NeverProcessed is the number of acknowledged records without an
	// effect; Unknown without histories.
	NeverProcessed int64 `json:"never_processed"`
	// OutOfKeyOrder is the number of effects applied after an effect of a
	// later record of the same producer and logical key. Event ids are
	// PRODUCER-HEX-N with N the producer's send sequence; walking the
	// effects in apply order (seq), an effect whose N is lower than the
	// highest N already applied for its (PRODUCER-HEX, key) counts. A
	// redelivered older record counts too: its effect is applied out of
	// order. Effects without a key, or whose event_id does not end in -N,
	// are not counted.
	OutOfKeyOrder int64 `json:"out_of_key_order"`
	// WithoutEventID is the number of effects whose record had no event_id:
	// they are in Effects but in no other counter.
	WithoutEventID int64 `json:"without_event_id"`

	// DuplicateIDs are the first ListCap duplicated event_ids, in the order
	// of their second effect.
	DuplicateIDs []string `json:"duplicate_ids"`
	// NeverProcessedIDs are the first ListCap acknowledged event_ids
	// without an effect, in history order (histories in the order given).
	NeverProcessedIDs []string `json:"never_processed_ids"`
	// OutOfKeyOrderIDs are the event_ids of the first ListCap effects out of
	// key order, in apply order.
	OutOfKeyOrderIDs []string `json:"out_of_key_order_ids"`
}

// ComputeStats reads the sink file at dbPath (which must exist: it is
// never created) and the producer history files, and counts. It reads one
// consistent snapshot of the sink and may run while consumers write to it.
// Without producerHistories, Acked and NeverProcessed are Unknown.
func ComputeStats(ctx context.Context, dbPath string, producerHistories []string) (Stats, error) {
	// Read the histories first: a bad history file fails fast.
	var acked []string
	if len(producerHistories) > 0 {
		var err error
		if acked, err = readAcked(producerHistories); err != nil {
			return Stats{}, fmt.Errorf("sink: stats: %w", err)
		}
	}
	st, counts, err := scanEffects(ctx, dbPath)
	if err != nil {
		return Stats{}, fmt.Errorf("sink: stats %s: %w", dbPath, err)
	}
	if len(producerHistories) > 0 {
		st.Acked, st.NeverProcessed = int64(len(acked)), 0
		for _, id := range acked {
			if counts[id] == 0 {
				st.NeverProcessed++
				st.NeverProcessedIDs = appendCapped(st.NeverProcessedIDs, id)
			}
		}
	}
	return st, nil
}

// newStats returns zero counters, the history ones Unknown, and empty
// (not nil) lists.
func newStats() Stats {
	return Stats{Acked: Unknown, NeverProcessed: Unknown,
		DuplicateIDs: []string{}, NeverProcessedIDs: []string{}, OutOfKeyOrderIDs: []string{}}
}

// scanEffects computes the counters that need only the sink file and
// returns them with the number of effects of each event_id.
func scanEffects(ctx context.Context, dbPath string) (Stats, map[string]int, error) {
	db, err := openReadOnly(dbPath)
	if err != nil {
		return Stats{}, nil, err
	}
	defer db.Close()

	var t *tally
	err = retryLocked(ctx, DefaultLockWait, func() error {
		t = newTally()
		return t.scanAll(ctx, db)
	})
	if err != nil {
		return Stats{}, nil, err
	}
	return t.st, t.counts, nil
}

// openReadOnly opens an existing sink file for reading only: a missing
// file is fs.ErrNotExist, never created.
func openReadOnly(dbPath string) (*sql.DB, error) {
	// SQLite would create a missing file: refuse it first.
	fi, err := os.Stat(dbPath)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fs.ErrNotExist
		}
		return nil, err
	}
	if fi.IsDir() {
		return nil, errors.New("is a directory")
	}
	abs, err := filepath.Abs(dbPath)
	if err != nil {
		return nil, err
	}
	// mode=rw: never create the file (should it vanish after the Stat);
	// query_only: never write.
	db, err := sql.Open("sqlite", dsn(abs, "mode=rw", "_pragma=busy_timeout("+strconv.Itoa(busyTimeoutMs)+")", "_pragma=query_only(1)"))
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	return db, nil
}

// keyOf is an order domain of Stats.OutOfKeyOrder: one producer run's key.
type keyOf struct{ producer, key string }

// tally counts effects in apply order into the counters of Stats that need
// only the sink file. ComputeStats feeds it every effect at once, a
// Follower the new ones at each poll: both count alike.
type tally struct {
	st      Stats
	counts  map[string]int  // effects per event_id
	highest map[keyOf]int64 // highest send sequence applied per producer run and key
}

func newTally() *tally {
	return &tally{st: newStats(), counts: map[string]int{}, highest: map[keyOf]int64{}}
}

// add counts one effect and reports whether it repeats an event_id already
// applied and whether it came after a later record of its key.
func (t *tally) add(id, key string) (duplicate, outOfOrder bool) {
	st := &t.st
	st.Effects++
	if id == "" {
		st.WithoutEventID++
		return false, false
	}
	t.counts[id]++
	if c := t.counts[id]; c == 1 {
		st.Delivered++
	} else {
		duplicate = true
		st.Duplicates++
		if c == 2 {
			st.DuplicateIDs = appendCapped(st.DuplicateIDs, id)
		}
	}
	if key == "" {
		return duplicate, false
	}
	prod, seq, ok := producer.SplitEventID(id)
	if !ok {
		return duplicate, false
	}
	k := keyOf{prod, key}
	if h, seen := t.highest[k]; !seen || seq > h {
		t.highest[k] = seq
	} else if seq < h {
		outOfOrder = true
		st.OutOfKeyOrder++
		st.OutOfKeyOrderIDs = appendCapped(st.OutOfKeyOrderIDs, id)
	}
	return duplicate, outOfOrder
}

// checkSchema fails unless db has the effects table.
func checkSchema(ctx context.Context, db *sql.DB) error {
	var n int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'effects'`).Scan(&n); err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("not a sink database (no effects table)")
	}
	return nil
}

// scanAll counts every effect of db.
func (t *tally) scanAll(ctx context.Context, db *sql.DB) error {
	if err := checkSchema(ctx, db); err != nil {
		return err
	}
	// One statement reads one snapshot, however long it runs.
	rows, err := db.QueryContext(ctx, `SELECT event_id, key FROM effects ORDER BY seq`)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var id, key string
		if err := rows.Scan(&id, &key); err != nil {
			return err
		}
		t.add(id, key)
	}
	return rows.Err()
}

// readAcked returns the event_ids of the records acknowledged in the
// history files, in file and line order, each once.
func readAcked(paths []string) ([]string, error) {
	seen := map[string]bool{}
	var ids []string
	for _, p := range paths {
		lines, err := producer.ReadHistoryFile(p)
		if err != nil {
			return nil, err
		}
		for _, l := range lines {
			if l.Status == producer.StatusOK && l.EventID != "" && !seen[l.EventID] {
				seen[l.EventID] = true
				ids = append(ids, l.EventID)
			}
		}
	}
	return ids, nil
}

func appendCapped(ids []string, id string) []string {
	if len(ids) < ListCap {
		ids = append(ids, id)
	}
	return ids
}

// EffectsPerEvent returns the number of effects of each event_id of the
// sink file at dbPath (records without one are left out), from one
// consistent snapshot: the experiments compare the whole set of duplicated
// ids with the records they expect, which Stats lists only the first
// ListCap of.
func EffectsPerEvent(ctx context.Context, dbPath string) (map[string]int, error) {
	_, counts, err := scanEffects(ctx, dbPath)
	if err != nil {
		return nil, fmt.Errorf("sink: effects %s: %w", dbPath, err)
	}
	return counts, nil
}

// FirstEffects returns, for each event_id of the sink file at dbPath,
// when its first effect was applied (effects.at; records without an
// event_id are left out): the dedupe-window experiment compares it with
// when a replay reached the record.
func FirstEffects(ctx context.Context, dbPath string) (map[string]time.Time, error) {
	db, err := openReadOnly(dbPath)
	if err != nil {
		return nil, fmt.Errorf("sink: first effects %s: %w", dbPath, err)
	}
	defer db.Close()
	var out map[string]time.Time
	err = retryLocked(ctx, DefaultLockWait, func() error {
		out = map[string]time.Time{}
		rows, err := db.QueryContext(ctx, `SELECT event_id, at FROM effects WHERE event_id != '' ORDER BY seq`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id, at string
			if err := rows.Scan(&id, &at); err != nil {
				return err
			}
			if _, seen := out[id]; seen {
				continue
			}
			t, err := time.Parse(atLayout, at)
			if err != nil {
				return fmt.Errorf("effect of %s: at %q: %w", id, at, err)
			}
			out[id] = t
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("sink: first effects %s: %w", dbPath, err)
	}
	return out, nil
}
