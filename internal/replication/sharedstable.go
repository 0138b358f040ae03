package replication

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	bolt "go.etcd.io/bbolt"
)

// SharedStable is the stable store (current term, last vote) of every
// partition group of one broker that keeps its Raft log in the shared log:
// one bbolt file (DATA/stable.db), a bucket per group. Each group's term
// and vote change only at elections, but with a thousand groups per broker
// their elections come together, and a bolt file per group made each
// change its own commit (two fdatasyncs): at 1,000 partitions (RF 3) the
// three brokers' elections asked the disk for more fsyncs than it does, the
// vote answers came later than the election timeout, and the groups kept
// restarting their elections (ARCHITECTURE.md "Idle cost"). Here one
// writer goroutine takes every write queued when it starts a transaction
// and commits them together: one commit, two fdatasyncs, for all of them,
// and a caller returns only after the commit that holds its write.
//
// Set, SetUint64, Get and GetUint64 (through Group) are called from each
// group's Raft goroutines; a write blocks until its commit, a read only on
// bolt's read transaction.
type SharedStable struct {
	db   *bolt.DB
	reqs chan *stableWrite
	stop chan struct{} // closed by Close
	done chan struct{} // closed when the writer has exited
	// commits counts the write transactions the writer committed (tests,
	// and the group commit's effect: writes per commit).
	commits atomic.Int64
	// beforeCommit, when set (tests), runs on the writer goroutine before
	// each transaction with the writes it will carry.
	beforeCommit func(n int)
	closeOnce    sync.Once
	closeErr     error
}

// Errors of the shared stable store.
var (
	// ErrStableClosed: a write or read after Close.
	ErrStableClosed = errors.New("replication: shared stable store closed")
	// errStableNotFound is what raft expects of a stable store for a key
	// never set: it compares the message with "not found", as raft-boltdb
	// returns it.
	errStableNotFound = errors.New("not found")
)

// stableWrite is one queued Set, or the drop of a group's bucket.
type stableWrite struct {
	group    string
	key, val []byte
	drop     bool
	done     chan error // buffered: the writer never blocks on it
}

// stableQueue bounds the writes waiting for the writer; a Raft group has
// at most a few in flight (term, then vote), so a thousand groups fit.
const stableQueue = 4096

// OpenSharedStable opens (or creates) the shared stable store at path and
// starts its writer. The broker opens it once and closes it after every
// replica.
func OpenSharedStable(path string) (*SharedStable, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 5 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("open shared stable store %s: %w", path, err)
	}
	s := &SharedStable{db: db, reqs: make(chan *stableWrite, stableQueue), stop: make(chan struct{}), done: make(chan struct{})}
	go s.writer()
	return s, nil
}

// writer commits queued writes, all of those waiting when it starts a
// transaction in that one transaction, until Close.
func (s *SharedStable) writer() {
	defer close(s.done)
	for {
		var batch []*stableWrite
		select {
		case w := <-s.reqs:
			batch = append(batch, w)
		case <-s.stop:
			return
		}
	drain:
		for {
			select {
			case w := <-s.reqs:
				batch = append(batch, w)
			default:
				break drain
			}
		}
		if s.beforeCommit != nil {
			s.beforeCommit(len(batch))
		}
		err := s.db.Update(func(tx *bolt.Tx) error {
			for _, w := range batch {
				if w.drop {
					if err := tx.DeleteBucket([]byte(w.group)); err != nil && !errors.Is(err, bolt.ErrBucketNotFound) {
						return err
					}
					continue
				}
				b, err := tx.CreateBucketIfNotExists([]byte(w.group))
				if err != nil {
					return err
				}
				if err := b.Put(w.key, w.val); err != nil {
					return err
				}
			}
			return nil
		})
		committed()
		s.commits.Add(1)
		for _, w := range batch {
			w.done <- err
		}
	}
}

// write queues w and waits for the commit that carries it.
func (s *SharedStable) write(w *stableWrite) error {
	w.done = make(chan error, 1)
	select {
	case s.reqs <- w:
	case <-s.stop:
		return ErrStableClosed
	}
	select {
	case err := <-w.done:
		return err
	case <-s.done:
		// The writer answers everything it took before it exits; a write
		// still queued when it stopped was never committed.
		select {
		case err := <-w.done:
			return err
		default:
			return ErrStableClosed
		}
	}
}

// Close stops the writer (writes still queued fail with ErrStableClosed)
// and closes the file. Calling it again returns the first call's result.
func (s *SharedStable) Close() error {
	s.closeOnce.Do(func() {
		close(s.stop)
		<-s.done
		s.closeErr = s.db.Close()
	})
	return s.closeErr
}

// Groups lists the groups that have a bucket (for the broker's removal of
// groups it no longer hosts).
func (s *SharedStable) Groups() ([]string, error) {
	var out []string
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.ForEach(func(name []byte, _ *bolt.Bucket) error {
			out = append(out, string(name))
			return nil
		})
	})
	slices.Sort(out)
	return out, err
}

// Has reports whether group has a bucket: it was created with this store.
func (s *SharedStable) Has(group string) bool {
	found := false
	s.db.View(func(tx *bolt.Tx) error {
		found = tx.Bucket([]byte(group)) != nil
		return nil
	})
	return found
}

// Group returns group's view of the store, a raft.StableStore.
func (s *SharedStable) Group(name string) *GroupStable { return &GroupStable{s: s, name: name} }

// GroupStable is one group's raft.StableStore in a SharedStable.
type GroupStable struct {
	s    *SharedStable
	name string
}

var _ raft.StableStore = (*GroupStable)(nil)

func (g *GroupStable) Set(key, val []byte) error {
	return g.s.write(&stableWrite{group: g.name, key: slices.Clone(key), val: slices.Clone(val)})
}

func (g *GroupStable) Get(key []byte) ([]byte, error) {
	var out []byte
	err := g.s.db.View(func(tx *bolt.Tx) error {
		if b := tx.Bucket([]byte(g.name)); b != nil {
			if v := b.Get(key); v != nil {
				out = slices.Clone(v)
				return nil
			}
		}
		return errStableNotFound
	})
	if errors.Is(err, bolt.ErrDatabaseNotOpen) {
		return nil, ErrStableClosed
	}
	return out, err
}

// SetUint64 and GetUint64 encode as raft-boltdb does (8 bytes, big endian).
func (g *GroupStable) SetUint64(key []byte, val uint64) error {
	var b [8]byte
	for i := range 8 {
		b[i] = byte(val >> (56 - 8*i))
	}
	return g.Set(key, b[:])
}

func (g *GroupStable) GetUint64(key []byte) (uint64, error) {
	b, err := g.Get(key)
	if err != nil {
		return 0, err
	}
	if len(b) != 8 {
		return 0, fmt.Errorf("replication: group %s: stable key %q holds %d bytes, not 8", g.name, key, len(b))
	}
	var v uint64
	for _, x := range b {
		v = v<<8 | uint64(x)
	}
	return v, nil
}

// Drop removes the group's bucket (its partition is deleted from this
// broker).
func (g *GroupStable) Drop() error { return g.s.write(&stableWrite{group: g.name, drop: true}) }
