package txn

import (
	"context"
	"time"

	"github.com/tapes-dev/tapes/internal/group"
)

// Expiry of unused transactional ids (Kafka's transactional.id.expiration.ms,
// TransactionStateManager.removeExpiredTransactionalIds): an id in Empty,
// CompleteCommit or CompleteAbort whose state has not changed for longer
// than Config.IDExpiration is removed. Kafka marks it Dead and writes a
// tombstone (the key without value); once that is committed the id is
// forgotten, so its next InitProducerId starts afresh (a new producer id,
// epoch 0), and load (and compaction) drop it. An id whose tombstone write
// fails is left as it was and tried again at the next tick.

// expireIDs writes the tombstones of the ids past their expiration, in the
// background. Called by the ticker; it does not block.
func (s *shard) expireIDs(now time.Time) {
	limit := millis(now) - s.c.cfg.IDExpiration.Milliseconds()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.live("") != nil {
		return
	}
	var ids []string
	for id, t := range s.txns {
		if t.pending || t.fresh || t.v.UpdateMs >= limit {
			continue
		}
		switch t.v.State {
		case Empty, CompleteCommit, CompleteAbort:
			t.pending = true // no other change while the tombstone is written
			ids = append(ids, id)
		}
	}
	if len(ids) > 0 {
		go s.removeIDs(ids)
	}
}

// removeIDs writes the tombstones of ids (whose pending the caller set)
// and forgets them once committed.
func (s *shard) removeIDs(ids []string) {
	ctx, cancel := s.context(context.Background(), writeTimeout)
	defer cancel()
	recs := make([]Record, len(ids))
	for i, id := range ids {
		recs[i] = tombstone(id)
	}
	var err error
	for batch := range group.Batches(recs) {
		if err = s.appendRecords(ctx, "the tombstones of expired transactional ids", batch); err != nil {
			break
		}
		s.mu.Lock()
		now := millis(s.c.cfg.Now())
		for _, id := range ids[:len(batch)] {
			t := s.txns[id]
			delete(s.txns, id)
			s.c.log.Info("transactional id expired", "transactional_id", id, "producer_id", t.v.ProducerID, "epoch", t.v.ProducerEpoch,
				"state", t.v.State, "unused_for", time.Duration(now-t.v.UpdateMs)*time.Millisecond)
		}
		s.mu.Unlock()
		ids = ids[len(batch):]
	}
	if err != nil {
		s.c.log.Warn("could not expire transactional ids", "partition", s.p, "ids", len(ids), "err", err)
		s.mu.Lock()
		for _, id := range ids {
			s.txns[id].pending = false
		}
		s.mu.Unlock()
	}
}
