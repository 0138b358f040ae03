// Package sink owns the database that the consumers of a group write their
// effects to, and the counters computed from it. The database is one SQLite
// file (modernc.org/sqlite, no cgo) that several consumer processes open at
// the same time: it runs in WAL journal mode, every connection waits up to
// 10 s for a lock (busy_timeout; less if Options.LockWait is shorter),
// writes start with BEGIN IMMEDIATE, and Open and Apply retry a transaction
// that still found the database locked, for up to Options.LockWait. Opening
// a file whose schema exists takes no write lock.
//
// # Effects
//
// Applying a record (Sink.Apply) is one transaction that appends an effect
// row and adds 1 to the applied count of the record's logical key. In plain
// mode that is all, so a record delivered twice has two effects: that is
// at-least-once delivery, shown rather than hidden. In idempotent mode the
// same transaction also inserts the record's event_id into processed, whose
// primary key makes a redelivered record a no-op: the effect and the record
// having been processed are committed together or not at all.
//
// A dedupe window (Options.Window) bounds what idempotent mode remembers:
// the last Count event ids applied, or those applied less than Age ago.
// Every idempotent apply also appends (event_id, time) to processed_log;
// the ids that leave the window are deleted from processed and
// processed_log in the transaction of the effect that pushes them out (the
// time window before its duplicate check, the count window after its
// insert), so the window is exact after a crash too. A record whose id
// left the window is applied again. Note that re-applied records count in
// a count window: a replay reaching N records back into a window of fewer
// ids pushes out the younger ones as it goes, and every replayed record is
// applied twice; a time window keeps the young ids whatever the replay
// re-applies.
//
// Both modes
// share one schema and may write the same file (the mode belongs to each
// consumer).
//
// # Schema
//
//	effects(seq INTEGER PRIMARY KEY AUTOINCREMENT, event_id TEXT, key TEXT,
//	        topic TEXT, "partition" INTEGER, "offset" INTEGER, consumer TEXT,
//	        generation INTEGER, value BLOB, at TEXT)       -- one row per effect
//	balances(key TEXT PRIMARY KEY, applied INTEGER)        -- effects per logical key
//	processed(event_id TEXT PRIMARY KEY)                   -- idempotent mode only
//	processed_log(n INTEGER PRIMARY KEY AUTOINCREMENT, event_id TEXT,
//	        at_ns INTEGER)                                 -- the window's order
//
// seq is the apply order across every consumer (writers are serialized by
// SQLite's write lock). at is UTC, RFC 3339 with microseconds. Records
// without a logical key ("") leave balances alone. PRAGMA user_version is
// SchemaVersion (2; a version 1 file gets processed_log when opened).
//
// # Durability
//
// Transactions commit with synchronous=NORMAL: in WAL mode a committed
// effect survives the crash of any process (SIGKILL included), though not
// necessarily a power failure, which is what the chaos experiments need at a
// fraction of the cost of an fsync per record.
//
// # Stats
//
// ComputeStats reads a sink file and, optionally, the history files of the
// producers (producer.HistoryLine) and counts what the lessons are about:
// records delivered, duplicate effects, acknowledged records never
// processed, and effects applied out of their key's order. A Follower
// counts the same while consumers write, reading only the effects applied
// since its last poll (the live page uses it).
package sink
