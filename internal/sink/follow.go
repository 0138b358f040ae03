package sink

import (
	"context"
	"database/sql"
	"slices"
	"sync"
	"time"
)

// Applied is one effect row as a Follower reads it, with what the counters
// made of it.
type Applied struct {
	Seq        int64
	EventID    string
	Key        string
	Topic      string
	Partition  int32
	Offset     int64
	Consumer   string
	Generation int32
	// Duplicate: an earlier effect has the same event_id.
	Duplicate bool
	// OutOfKeyOrder: applied after an effect of a later record of the same
	// producer and key (see Stats.OutOfKeyOrder).
	OutOfKeyOrder bool
}

// followLockWait bounds how long a Poll retries while the file is locked.
const followLockWait = 2 * time.Second

// Follower reads a sink file while consumers write it: each Poll reads
// only the effects applied since the previous one and counts them exactly
// as ComputeStats counts the whole file, so a live view costs what changed
// rather than what exists. The file is opened for reading only once it
// exists; it is never created. Its methods are safe for concurrent use.
type Follower struct {
	path string

	mu      sync.Mutex
	db      *sql.DB
	lastSeq int64
	t       *tally
	// acked: event_ids producers acknowledged (Acked); never counts those
	// without an effect.
	acked     map[string]bool
	haveAcked bool
	never     int64
}

// NewFollower returns a Follower of the sink file at path, which need not
// exist yet.
func NewFollower(path string) *Follower {
	return &Follower{path: path, t: newTally(), acked: map[string]bool{}}
}

// Poll reads and counts the effects applied since the last Poll and
// returns the last keep of them, in apply order. Before the file exists it
// returns fs.ErrNotExist.
func (f *Follower) Poll(ctx context.Context, keep int) ([]Applied, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.db == nil {
		db, err := openReadOnly(f.path)
		if err != nil {
			return nil, err
		}
		f.db = db
	}
	var last []Applied
	err := retryLocked(ctx, followLockWait, func() error {
		var err error
		last, err = f.pollOnce(ctx, keep)
		return err
	})
	return last, err
}

func (f *Follower) pollOnce(ctx context.Context, keep int) ([]Applied, error) {
	if err := checkSchema(ctx, f.db); err != nil {
		return nil, err
	}
	rows, err := f.db.QueryContext(ctx, `SELECT seq, event_id, key, topic, "partition", "offset", consumer, generation
		FROM effects WHERE seq > ? ORDER BY seq`, f.lastSeq)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ring []Applied
	next := 0
	for rows.Next() {
		var a Applied
		if err := rows.Scan(&a.Seq, &a.EventID, &a.Key, &a.Topic, &a.Partition, &a.Offset, &a.Consumer, &a.Generation); err != nil {
			return nil, err
		}
		// Counted at once: a row is never read twice, even if a later
		// row fails (lastSeq moves with it).
		a.Duplicate, a.OutOfKeyOrder = f.t.add(a.EventID, a.Key)
		f.lastSeq = a.Seq
		if a.EventID != "" && f.t.counts[a.EventID] == 1 && f.acked[a.EventID] {
			f.never--
		}
		if keep <= 0 {
			continue
		}
		if len(ring) < keep {
			ring = append(ring, a)
		} else {
			ring[next] = a
			next = (next + 1) % keep
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return append(ring[next:], ring[:next]...), nil
}

// Acked records event_ids that producer histories show acknowledged
// (status "ok"); from the first call on, Stats counts Acked and
// NeverProcessed (an acknowledged event_id without an effect).
func (f *Follower) Acked(ids ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.haveAcked = true
	for _, id := range ids {
		if id == "" || f.acked[id] {
			continue
		}
		f.acked[id] = true
		if f.t.counts[id] == 0 {
			f.never++
		}
	}
}

// Stats returns the counters of everything polled so far. Without Acked,
// Acked and NeverProcessed are Unknown; NeverProcessedIDs stays empty.
func (f *Follower) Stats() Stats {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := f.t.st
	st.DuplicateIDs = slices.Clone(st.DuplicateIDs)
	st.OutOfKeyOrderIDs = slices.Clone(st.OutOfKeyOrderIDs)
	st.NeverProcessedIDs = []string{}
	if f.haveAcked {
		st.Acked, st.NeverProcessed = int64(len(f.acked)), f.never
	}
	return st
}

// Close closes the file.
func (f *Follower) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.db == nil {
		return nil
	}
	err := f.db.Close()
	f.db = nil
	return err
}
