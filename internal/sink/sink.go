package sink

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// SchemaVersion is the PRAGMA user_version of a sink file this package
// writes. Version 2 added processed_log (the dedupe window); a version 1
// file is upgraded on Open, its processed ids having no place in the log
// (a window never evicts them).
const SchemaVersion = 2

// DefaultLockWait is Options.LockWait when it is zero.
const DefaultLockWait = time.Minute

// busyTimeoutMs is SQLite's busy_timeout of every connection (or
// Options.LockWait when shorter): how long one statement waits for a lock
// before failing with SQLITE_BUSY.
const busyTimeoutMs = 10000

// Errors of Open and Apply.
var (
	// ErrLocked is wrapped by the errors of Open and Apply when other
	// connections held the database locked for longer than
	// Options.LockWait.
	ErrLocked = errors.New("database locked")
	// ErrNotASink is wrapped by Open's error for an SQLite database that is
	// not a tapes sink (PRAGMA user_version 0) and holds tables of its own:
	// Open refuses to add the sink's tables beside them.
	ErrNotASink = errors.New("not a tapes sink")
)

// Options configure a Sink.
type Options struct {
	// Idempotent records each applied event_id in processed, in the effect's
	// transaction, so that a redelivered record is applied zero times.
	// Without it every Apply writes an effect.
	Idempotent bool
	// Window, in idempotent mode, bounds the event ids kept in processed
	// (the zero value keeps them all).
	Window Window
	// Now is the clock of the time window and of Effect.At when zero
	// (nil: time.Now). Tests inject it.
	Now func() time.Time
	// LockWait bounds how long Open and Apply keep retrying while other
	// connections hold the database locked (0: DefaultLockWait).
	LockWait time.Duration
}

// Window is a dedupe window: in idempotent mode, only the event ids of
// the last Count records applied, or of those applied less than Age ago,
// are kept; a record whose id was evicted is applied again. At most one of
// Count and Age is set; the zero Window keeps every id.
type Window struct {
	Count int64
	Age   time.Duration
}

// String is the window as consumerd's --idempotent-sink-window spells it
// ("" for no window).
func (w Window) String() string {
	switch {
	case w.Count > 0:
		return strconv.FormatInt(w.Count, 10)
	case w.Age > 0:
		return w.Age.String()
	}
	return ""
}

// ParseWindow parses --idempotent-sink-window: a count of event ids
// ("1000") or a duration ("30s"), which must be positive.
func ParseWindow(s string) (Window, error) {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		if n <= 0 {
			return Window{}, fmt.Errorf("window %q: want a positive number of event ids or a positive duration", s)
		}
		return Window{Count: n}, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return Window{}, fmt.Errorf("window %q: want a positive number of event ids (1000) or a positive duration (30s)", s)
	}
	return Window{Age: d}, nil
}

// Effect is what applying one record writes.
type Effect struct {
	// Consumer is the consumer's name, e.g. "consumer-1".
	Consumer string
	// Generation is the group generation the consumer applied the record in.
	Generation int32
	Topic      string
	Partition  int32
	Offset     int64
	// EventID is the record's event_id header ("" when missing). In
	// idempotent mode a record without one is deduplicated by its position
	// instead (see Sink.Apply).
	EventID string
	// Key is the record's logical key: its key, else its entity header,
	// else "".
	Key   string
	Value []byte
	// At is when the effect is applied (zero: the time of Apply).
	At time.Time
}

// Sink is one consumer's connection to a sink file. Apply is safe for
// concurrent use, from any number of goroutines and, through other Sinks,
// processes; Close must not run concurrently with Apply.
type Sink struct {
	db         *sql.DB
	idempotent bool
	window     Window
	now        func() time.Time
	lockWait   time.Duration

	markProcessed *sql.Stmt
	logProcessed  *sql.Stmt
	insertEffect  *sql.Stmt
	bumpBalance   *sql.Stmt
	evictCount    *sql.Stmt
	evictCountLog *sql.Stmt
	evictAge      *sql.Stmt
	evictAgeLog   *sql.Stmt
}

const schema = `
CREATE TABLE IF NOT EXISTS effects (
	seq         INTEGER PRIMARY KEY AUTOINCREMENT,
	event_id    TEXT    NOT NULL,
	key         TEXT    NOT NULL,
	topic       TEXT    NOT NULL,
	"partition" INTEGER NOT NULL,
	"offset"    INTEGER NOT NULL,
	consumer    TEXT    NOT NULL,
	generation  INTEGER NOT NULL,
	value       BLOB    NOT NULL,
	at          TEXT    NOT NULL
);
CREATE INDEX IF NOT EXISTS effects_event_id ON effects(event_id);
CREATE TABLE IF NOT EXISTS balances (
	key     TEXT    PRIMARY KEY,
	applied INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS processed (
	event_id TEXT PRIMARY KEY
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS processed_log (
	n        INTEGER PRIMARY KEY AUTOINCREMENT,
	event_id TEXT    NOT NULL,
	at_ns    INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS processed_log_at ON processed_log(at_ns);
`

const (
	markProcessedSQL = `INSERT INTO processed(event_id) VALUES (?) ON CONFLICT DO NOTHING`
	logProcessedSQL  = `INSERT INTO processed_log(event_id, at_ns) VALUES (?, ?)`
	// The count window keeps the log entries numbered above the newest
	// minus Count; the time window those at or after a cutoff.
	evictCountSQL    = `DELETE FROM processed WHERE event_id IN (SELECT event_id FROM processed_log WHERE n <= ?)`
	evictCountLogSQL = `DELETE FROM processed_log WHERE n <= ?`
	evictAgeSQL      = `DELETE FROM processed WHERE event_id IN (SELECT event_id FROM processed_log WHERE at_ns < ?)`
	evictAgeLogSQL   = `DELETE FROM processed_log WHERE at_ns < ?`
	insertEffectSQL  = `INSERT INTO effects(event_id, key, topic, "partition", "offset", consumer, generation, value, at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`
	bumpBalanceSQL   = `INSERT INTO balances(key, applied) VALUES (?, 1) ON CONFLICT(key) DO UPDATE SET applied = applied + 1`
)

// atLayout is the layout of effects.at.
const atLayout = "2006-01-02T15:04:05.000000Z07:00"

// Open opens the sink file at path, creating it and its schema if missing.
func Open(path string, opts Options) (*Sink, error) {
	s, err := open(path, opts)
	if err != nil {
		return nil, fmt.Errorf("sink: open %s: %w", path, err)
	}
	return s, nil
}

func open(path string, opts Options) (*Sink, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	lockWait := opts.LockWait
	if lockWait <= 0 {
		lockWait = DefaultLockWait
	}
	busyMs := max(1, min(int64(busyTimeoutMs), lockWait.Milliseconds()))
	db, err := sql.Open("sqlite", dsn(abs,
		"_pragma=busy_timeout("+strconv.FormatInt(busyMs, 10)+")",
		"_pragma=journal_mode(WAL)",
		"_pragma=synchronous(NORMAL)",
		"_txlock=immediate"))
	if err != nil {
		return nil, err
	}
	// One connection: this process's writers take turns on it rather than
	// contend for SQLite's write lock.
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxLifetime(0)
	if opts.Window.Count < 0 || opts.Window.Age < 0 || (opts.Window.Count > 0 && opts.Window.Age > 0) {
		db.Close()
		return nil, fmt.Errorf("window %+v: want one of a positive count or a positive age", opts.Window)
	}
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	s := &Sink{db: db, idempotent: opts.Idempotent, window: opts.Window, now: now, lockWait: lockWait}
	ctx := context.Background()
	if err := retryLocked(ctx, s.lockWait, func() error { return createSchema(ctx, db) }); err != nil {
		db.Close()
		return nil, err
	}
	for _, p := range []struct {
		stmt **sql.Stmt
		sql  string
	}{{&s.markProcessed, markProcessedSQL}, {&s.logProcessed, logProcessedSQL}, {&s.insertEffect, insertEffectSQL},
		{&s.bumpBalance, bumpBalanceSQL}, {&s.evictCount, evictCountSQL}, {&s.evictCountLog, evictCountLogSQL},
		{&s.evictAge, evictAgeSQL}, {&s.evictAgeLog, evictAgeLogSQL}} {
		if *p.stmt, err = db.PrepareContext(ctx, p.sql); err != nil {
			s.Close()
			return nil, fmt.Errorf("prepare: %w", err)
		}
	}
	return s, nil
}

// createSchema creates the tables that are missing and checks the schema
// version, in one transaction. A file whose schema is current is only read:
// opening it does not wait for the write lock.
func createSchema(ctx context.Context, db *sql.DB) (err error) {
	var current int
	if err := db.QueryRowContext(ctx, "PRAGMA user_version").Scan(&current); err != nil {
		return fmt.Errorf("schema version: %w", err)
	}
	if current == SchemaVersion {
		return nil
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer func() {
		if err != nil {
			tx.Rollback()
		}
	}()
	var version int
	if err := tx.QueryRowContext(ctx, "PRAGMA user_version").Scan(&version); err != nil {
		return fmt.Errorf("schema version: %w", err)
	}
	if version > SchemaVersion {
		return fmt.Errorf("schema version %d is newer than this program's %d", version, SchemaVersion)
	}
	if version == 0 {
		if err := refuseForeignTables(ctx, tx); err != nil {
			return err
		}
	}
	if _, err := tx.ExecContext(ctx, schema); err != nil {
		return fmt.Errorf("create schema: %w", err)
	}
	if version < SchemaVersion {
		if _, err := tx.ExecContext(ctx, "PRAGMA user_version = "+strconv.Itoa(SchemaVersion)); err != nil {
			return fmt.Errorf("schema version: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit schema: %w", err)
	}
	return nil
}

// refuseForeignTables fails with ErrNotASink when a database that has no
// sink schema version holds tables other than the sink's own (a sink whose
// creation was interrupted has only those).
func refuseForeignTables(ctx context.Context, tx *sql.Tx) error {
	rows, err := tx.QueryContext(ctx, `SELECT name FROM sqlite_master WHERE type = 'table'
		AND name NOT LIKE 'sqlite\_%' ESCAPE '\' AND name NOT IN ('effects', 'balances', 'processed', 'processed_log') ORDER BY name`)
	if err != nil {
		return fmt.Errorf("list tables: %w", err)
	}
	defer rows.Close()
	var foreign []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return fmt.Errorf("list tables: %w", err)
		}
		foreign = append(foreign, name)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("list tables: %w", err)
	}
	if len(foreign) > 0 {
		return fmt.Errorf("%w: the database has tables of its own (%s) and no sink schema version; use a new file for the sink",
			ErrNotASink, strings.Join(foreign, ", "))
	}
	return nil
}

// Apply applies one record: in one transaction, it appends an effect row and
// adds 1 to balances.applied of e.Key (unless e.Key is ""). In idempotent
// mode the same transaction first inserts e.EventID into processed, and a
// record already there is not applied: Apply then writes nothing and
// returns false. A record without an event_id is deduplicated by its
// position instead, as "record:TOPIC/PARTITION/OFFSET". With a Window the
// same transaction evicts the ids that fall out of it: those applied before
// e.At minus Window.Age (before the check, so that an id older than the
// window is applied again), or all but the newest Window.Count (after the
// insert); a crash leaves the window exact. Apply retries while
// the database is locked (see Options.LockWait) and returns once the
// transaction is committed. Safe for concurrent use.
func (s *Sink) Apply(ctx context.Context, e Effect) (applied bool, err error) {
	if e.At.IsZero() {
		e.At = s.now()
	}
	if e.Value == nil {
		e.Value = []byte{}
	}
	err = retryLocked(ctx, s.lockWait, func() error {
		var err error
		applied, err = s.apply(ctx, &e)
		return err
	})
	if err != nil {
		return false, fmt.Errorf("sink: apply %q (%s/%d@%d): %w", e.EventID, e.Topic, e.Partition, e.Offset, err)
	}
	return applied, nil
}

func (s *Sink) apply(ctx context.Context, e *Effect) (applied bool, err error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return false, fmt.Errorf("begin: %w", err)
	}
	defer func() {
		if !applied {
			tx.Rollback()
		}
	}()
	if s.idempotent {
		id := e.EventID
		if id == "" {
			id = "record:" + e.Topic + "/" + strconv.Itoa(int(e.Partition)) + "/" + strconv.FormatInt(e.Offset, 10)
		}
		if s.window.Age > 0 {
			if err := s.evict(ctx, tx, s.evictAge, s.evictAgeLog, e.At.Add(-s.window.Age).UnixNano()); err != nil {
				return false, err
			}
		}
		res, err := tx.StmtContext(ctx, s.markProcessed).ExecContext(ctx, id)
		if err != nil {
			return false, fmt.Errorf("mark processed: %w", err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return false, fmt.Errorf("mark processed: %w", err)
		}
		if n == 0 {
			return false, nil // processed before: a redelivery
		}
		res, err = tx.StmtContext(ctx, s.logProcessed).ExecContext(ctx, id, e.At.UnixNano())
		if err != nil {
			return false, fmt.Errorf("log processed: %w", err)
		}
		if s.window.Count > 0 {
			last, err := res.LastInsertId()
			if err != nil {
				return false, fmt.Errorf("log processed: %w", err)
			}
			if err := s.evict(ctx, tx, s.evictCount, s.evictCountLog, last-s.window.Count); err != nil {
				return false, err
			}
		}
	}
	if _, err := tx.StmtContext(ctx, s.insertEffect).ExecContext(ctx, e.EventID, e.Key, e.Topic, e.Partition, e.Offset,
		e.Consumer, e.Generation, e.Value, e.At.UTC().Format(atLayout)); err != nil {
		return false, fmt.Errorf("insert effect: %w", err)
	}
	if e.Key != "" {
		if _, err := tx.StmtContext(ctx, s.bumpBalance).ExecContext(ctx, e.Key); err != nil {
			return false, fmt.Errorf("update balance: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return false, fmt.Errorf("commit: %w", err)
	}
	return true, nil
}

// evict deletes, in tx, the processed ids whose log entries match bound
// (below a number or a time, as the statements say) and those entries.
func (s *Sink) evict(ctx context.Context, tx *sql.Tx, ids, log *sql.Stmt, bound int64) error {
	if _, err := tx.StmtContext(ctx, ids).ExecContext(ctx, bound); err != nil {
		return fmt.Errorf("evict from the window: %w", err)
	}
	if _, err := tx.StmtContext(ctx, log).ExecContext(ctx, bound); err != nil {
		return fmt.Errorf("evict from the window: %w", err)
	}
	return nil
}

// Close closes the connection. Every Apply must have returned.
func (s *Sink) Close() error {
	for _, st := range []*sql.Stmt{s.markProcessed, s.logProcessed, s.insertEffect, s.bumpBalance,
		s.evictCount, s.evictCountLog, s.evictAge, s.evictAgeLog} {
		if st != nil {
			st.Close()
		}
	}
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("sink: close: %w", err)
	}
	return nil
}

// dsn is the modernc.org/sqlite data source name of the file at the
// absolute path abs: an SQLite URI (so that mode= works), whose path has
// the characters a URI gives a meaning to escaped.
func dsn(abs string, params ...string) string {
	esc := strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23")
	return "file:" + esc.Replace(filepath.ToSlash(abs)) + "?" + strings.Join(params, "&")
}

// isLocked reports whether err is SQLite's SQLITE_BUSY or SQLITE_LOCKED
// (any extended code): the transaction failed, without effect, because
// another connection held a lock.
func isLocked(err error) bool {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return false
	}
	switch se.Code() & 0xff {
	case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
		return true
	}
	return false
}

// retryLocked runs f until it returns anything but a lock error, for up to
// wait (after which the error wraps ErrLocked) or until ctx is done. Each
// retry follows a jittered backoff of 5 ms doubling to 200 ms; SQLite's own
// busy_timeout has already waited inside f.
func retryLocked(ctx context.Context, wait time.Duration, f func() error) error {
	deadline := time.Now().Add(wait)
	backoff := 5 * time.Millisecond
	for {
		err := f()
		if err == nil || !isLocked(err) {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w for %v: %w", ErrLocked, wait, err)
		}
		t := time.NewTimer(backoff/2 + rand.N(backoff))
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w (while locked: %v)", ctx.Err(), err)
		case <-t.C:
		}
		backoff = min(2*backoff, 200*time.Millisecond)
	}
}
