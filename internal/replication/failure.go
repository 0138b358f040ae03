package replication

import (
	"time"

	"github.com/hashicorp/raft"

	"github.com/tapes-dev/tapes/internal/kerr"
)

// storageFailed is the FSM's onFail, on the FSM goroutine: a storage I/O
// error takes this replica out. From now on every request is answered
// KAFKA_STORAGE_ERROR; the replica hands its leadership to another replica
// if it leads, then stops its Raft instance (takeOut), so it neither votes,
// nor stands, nor serves until its broker restarts and recovers the log from
// disk (the partition log cuts a torn tail, and Raft re-applies what it
// misses). It does not block.
func (r *Replica) storageFailed(err error) {
	r.failed.Store(&err)
	r.lead.mu.Lock()
	r.stopLeadingLocked()
	r.lead.mu.Unlock()
	if r.closed.Load() {
		return // Close is stopping Raft anyway
	}
	r.wg.Add(1)
	go r.takeOut()
}

// takeOut runs once after a storage failure, on its own goroutine.
func (r *Replica) takeOut() {
	defer r.wg.Done()
	if r.raft.State() == raft.Leader {
		if err := waitFuture(r.stopContext(5*time.Second), r.raft.LeadershipTransfer()); err != nil {
			r.cfg.Logger.Warn("handing leadership over after a storage failure", "err", err)
		}
	}
	_ = r.cfg.Transport.Close() // before Shutdown, which could hang on a peer otherwise
	if err := r.raft.Shutdown().Error(); err != nil {
		r.cfg.Logger.Warn("stopping raft after a storage failure", "err", err)
	}
	r.cfg.Logger.Error("replica out of service after a storage failure; restart the broker to recover it from disk")
}

// storageErr is the KAFKA_STORAGE_ERROR of a replica taken out, or nil.
func (r *Replica) storageErr() error {
	p := r.failed.Load()
	if p == nil {
		return nil
	}
	return kerr.New(kerr.KafkaStorageError, "broker %d cannot serve %s-%d: %v (a restart of the broker recovers it from disk)", r.cfg.LocalID, r.cfg.Topic, r.cfg.Partition, *p)
}
