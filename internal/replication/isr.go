package replication

import (
	"context"
	"time"

	"github.com/hashicorp/raft"

	"github.com/tapes-dev/tapes/internal/kerr"
	"github.com/tapes-dev/tapes/internal/metadata"
)

// followerProgress is a follower's log progress as the leader sees it from
// its AppendEntries answers (hashicorp/raft exposes none).
type followerProgress struct {
	// match is the highest Raft index the follower is known to store (in
	// its Raft log, fsynced). Invariant: only grows within a term.
	match uint64
	// lastCaughtUp is the last time the follower's log reached the leader's
	// log end, or, for a follower that was in the ISR the controller last
	// recorded, the moment this leader became ready (its grace). Zero: not
	// caught up in this term. The follower is in the ISR while
	// now - lastCaughtUp <= ReplicaLagTimeMax.
	lastCaughtUp time.Time
}

// startProgressLocked starts tracking the followers for a new term: none
// has caught up yet. Caller holds lead.mu.
func (r *Replica) startProgressLocked() {
	r.lead.followers = map[metadata.BrokerID]*followerProgress{}
	for _, id := range r.membersLocked() {
		if id != r.cfg.LocalID {
			r.lead.followers[id] = &followerProgress{}
		}
	}
	r.signalLocked()
}

// graceLocked gives the followers that were in the previous ISR (previous,
// as the controller recorded it) a full lag period from now, as Kafka keeps
// the previous ISR across a leader change. A follower that was not in it
// gets none: it enters the ISR only by catching up. Caller holds lead.mu.
func (r *Replica) graceLocked(now time.Time, previous []metadata.BrokerID) {
	for _, id := range previous {
		if f := r.lead.followers[id]; f != nil && now.After(f.lastCaughtUp) {
			f.lastCaughtUp = now
		}
	}
}

// isrLocked: the leader, and every follower that caught up within
// ReplicaLagTimeMax, in assignment order. Caller holds lead.mu.
func (r *Replica) isrLocked(now time.Time) []metadata.BrokerID {
	isr := make([]metadata.BrokerID, 0, len(r.membersLocked()))
	for _, id := range r.membersLocked() {
		if id == r.cfg.LocalID {
			isr = append(isr, id)
			continue
		}
		if f := r.lead.followers[id]; f != nil && !f.lastCaughtUp.IsZero() && now.Sub(f.lastCaughtUp) <= r.cfg.ReplicaLagTimeMax {
			isr = append(isr, id)
		}
	}
	return isr
}

// copiesLocked counts the members of isr that store the Raft entry at
// index: the leader (which has applied it) and every follower whose match
// reaches it. Caller holds lead.mu.
func (r *Replica) copiesLocked(isr []metadata.BrokerID, index uint64) int {
	n := 0
	for _, id := range isr {
		if id == r.cfg.LocalID {
			n++
		} else if f := r.lead.followers[id]; f != nil && f.match >= index {
			n++
		}
	}
	return n
}

// leavesISRLocked returns the earliest time a follower of isr falls out of
// it unless it catches up again (zero when isr holds only the leader).
// Caller holds lead.mu.
func (r *Replica) leavesISRLocked(isr []metadata.BrokerID) time.Time {
	var first time.Time
	for _, id := range isr {
		f := r.lead.followers[id]
		if f == nil {
			continue
		}
		if t := f.lastCaughtUp.Add(r.cfg.ReplicaLagTimeMax + time.Nanosecond); first.IsZero() || t.Before(first) {
			first = t
		}
	}
	return first
}

// signalLocked wakes every acks=all request waiting for copies (the
// followers' progress, the ISR or the leadership changed). Caller holds
// lead.mu.
func (r *Replica) signalLocked() {
	if r.lead.changed != nil {
		close(r.lead.changed)
	}
	r.lead.changed = make(chan struct{})
}

// observeAppend records a follower's answer to AppendEntries; raftnet calls
// it on raft's replicating goroutine for that follower, and it does not
// block. A follower has caught up as of sentAt when the request carried the
// leader's whole tail: fewer entries than MaxAppendEntries (hashicorp/raft
// sends everything up to its last index, capped there), or its match
// reaches the current last index. Answers count from the moment this
// replica issues its Barrier (barrierTerm), so followers that stored the
// Barrier are in the ISR as soon as the leader is ready.
func (r *Replica) observeAppend(peer raft.ServerID, req *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse, sentAt time.Time) {
	if !resp.Success {
		return
	}
	match := req.PrevLogEntry + uint64(len(req.Entries))
	r.lead.mu.Lock()
	defer r.lead.mu.Unlock()
	if r.lead.barrierTerm == 0 || req.Term != r.lead.barrierTerm {
		return
	}
	tail := len(req.Entries) < r.maxAppend || match >= r.raft.LastIndex()
	r.progressLocked(BrokerOf(peer), match, tail, sentAt)
}

// progressLocked applies one successful AppendEntries answer of the current
// term: the follower stores everything up to match, and caught up as of
// sentAt when tail is set. Caller holds lead.mu.
func (r *Replica) progressLocked(id metadata.BrokerID, match uint64, tail bool, sentAt time.Time) {
	f := r.lead.followers[id]
	if f == nil {
		return
	}
	moved := false
	if match > f.match {
		f.match, moved = match, true
	}
	if tail && sentAt.After(f.lastCaughtUp) {
		f.lastCaughtUp, moved = sentAt, true
	}
	if moved && r.lead.awaiting > 0 {
		r.signalLocked()
	}
}

// awaitCopies returns once at least minISR members of the ISR, the leader
// included, store the committed, applied Raft entry at index (Kafka's
// acks=all promise). It answers NOT_ENOUGH_REPLICAS_AFTER_APPEND when the
// ISR falls below minISR first, or when this replica stops leading term
// first (the record is committed either way), and REQUEST_TIMED_OUT when
// ctx ends first. Called from Produce's goroutine; it blocks until one of
// these happens (a follower's answer, a follower falling out of the ISR by
// time, a leadership change, ctx, Close).
func (r *Replica) awaitCopies(ctx context.Context, term uint64, index uint64, minISR int, offset int64) error {
	r.lead.mu.Lock()
	r.lead.awaiting++
	defer func() {
		r.lead.mu.Lock()
		r.lead.awaiting--
		r.lead.mu.Unlock()
	}()
	for {
		now := time.Now()
		if r.lead.readyTerm != term || r.closed.Load() || r.failed.Load() != nil {
			r.lead.mu.Unlock()
			return kerr.New(kerr.NotEnoughReplicasAfterAppend, "batch committed at offset %d of %s-%d, but broker %d stopped leading before min.insync.replicas=%d in-sync replicas were known to hold it",
				offset, r.cfg.Topic, r.cfg.Partition, r.cfg.LocalID, minISR)
		}
		isr := r.isrLocked(now)
		copies := r.copiesLocked(isr, index)
		if copies >= minISR {
			r.lead.mu.Unlock()
			return nil
		}
		if len(isr) < minISR {
			r.lead.mu.Unlock()
			return kerr.New(kerr.NotEnoughReplicasAfterAppend, "batch committed at offset %d of %s-%d, but the ISR is now %s (%d), min.insync.replicas=%d",
				offset, r.cfg.Topic, r.cfg.Partition, metadata.JoinIDs(isr), len(isr), minISR)
		}
		changed := r.lead.changed
		leaves := r.leavesISRLocked(isr)
		r.lead.mu.Unlock()
		timer := time.NewTimer(leaves.Sub(now))
		select {
		case <-changed:
		case <-timer.C:
		case <-r.stop:
		case <-ctx.Done():
			timer.Stop()
			return kerr.New(kerr.RequestTimedOut, "batch committed at offset %d of %s-%d, but only %d of min.insync.replicas=%d in-sync replicas were known to hold it in time",
				offset, r.cfg.Topic, r.cfg.Partition, copies, minISR)
		}
		timer.Stop()
		r.lead.mu.Lock()
	}
}
