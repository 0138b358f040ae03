package group

import (
	"context"
	"fmt"
	"time"

	"github.com/tapes-dev/tapes/internal/assign"
	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/kerr"
)

// Transactional offset commits (Kafka's TxnOffsetCommit, KIP-98 and
// KIP-447). A producer P that consumes, processes and produces in one
// transaction sends its input offsets to the group coordinator with
// TxnOffsetCommit. They are written to the group's __consumer_offsets
// partition as txn-offset records of P (records.go), acks=all, and kept
// pending: OffsetFetch does not return them, and with require_stable a
// partition with a pending commit answers UNSTABLE_OFFSET_COMMIT, so that a
// consumer taking over does not start from offsets that may still be
// rolled back. When the transaction ends, the transaction coordinator
// writes a marker of P into every partition of the transaction, this one
// included: a commit marker makes P's pending commits written before it
// the group's committed offsets, an abort marker discards them. The
// coordinator finds the markers by reading its partition: load reads them
// with everything else; while leading, the tail (below) reads what was
// committed since, on every tick, so completion follows the marker within
// a tick (Kafka's coordinator also completes asynchronously).
//
// A commit replaces the committed offset whatever was committed since the
// pending record (Kafka keeps a plain OffsetCommit written between the
// pending record and the commit marker; tapes' compaction moves records,
// so their order cannot be compared after one: see ARCHITECTURE.md
// "Transactional offset commits").

// TxnOffsetCommitRequest is a TxnOffsetCommit as the coordinator takes it.
type TxnOffsetCommitRequest struct {
	TransactionalID string
	GroupID         string
	ProducerID      int64
	ProducerEpoch   int16
	// GenerationID, MemberID and GroupInstanceID are v3's group metadata
	// (KIP-447): -1, "" and nil when absent (v0-v2, or a producer that
	// gave none), which fences nothing.
	GenerationID    int32
	MemberID        string
	GroupInstanceID *string
	Offsets         []*tapesv1.OffsetCommitPartition
}

// pendingCommit is a transactional commit waiting for its producer's
// marker.
type pendingCommit struct {
	committed
	// at is the offset of its txn-offset record: only a marker after it
	// completes it.
	at int64
}

// TxnOffsetCommit handles a TxnOffsetCommit: fenced as Kafka fences it, the
// offsets appended as pending commits of the producer, acks=all, and
// registered as pending once committed. It blocks up to ctx (the load, the
// append).
func (c *Coordinator) TxnOffsetCommit(ctx context.Context, req TxnOffsetCommitRequest) error {
	s, err := c.shardOf(ctx, req.GroupID)
	if err != nil {
		return err
	}
	return s.txnCommit(ctx, req)
}

// OffsetFetchStable is OffsetFetch that also says, per answered partition
// (unstable[i] for resp.Offsets[i]), whether a transactional commit of it
// is pending (OffsetFetch v7+'s require_stable answers those
// UNSTABLE_OFFSET_COMMIT).
func (c *Coordinator) OffsetFetchStable(ctx context.Context, req *tapesv1.OffsetFetchRequest) (resp *tapesv1.OffsetFetchResponse, unstable []bool, err error) {
	s, err := c.shardOf(ctx, req.GroupId)
	if err != nil {
		return nil, nil, err
	}
	resp, unstable = s.fetchOffsets(req)
	return resp, unstable, nil
}

func checkOffsets(offsets []*tapesv1.OffsetCommitPartition) error {
	for _, o := range offsets {
		if o.Offset < 0 {
			return kerr.New(kerr.InvalidRequest, "commit of %s-%d at offset %d: offsets are >= 0", o.Topic, o.Partition, o.Offset)
		}
		if o.Topic == "" || o.Partition < 0 {
			return kerr.New(kerr.InvalidRequest, "commit names topic %q partition %d", o.Topic, o.Partition)
		}
	}
	return nil
}

// txnCommit handles a TxnOffsetCommit on this shard.
func (s *shard) txnCommit(ctx context.Context, req TxnOffsetCommitRequest) error {
	if err := checkOffsets(req.Offsets); err != nil {
		return err
	}
	if req.ProducerID < 0 || req.ProducerEpoch < 0 {
		return kerr.New(kerr.InvalidRequest, "transactional id %q: producer id %d epoch %d: a transactional commit needs the producer's id and epoch", req.TransactionalID, req.ProducerID, req.ProducerEpoch)
	}
	s.mu.Lock()
	if err := s.live(req.GroupID); err != nil {
		s.mu.Unlock()
		return err
	}
	if e, ok := s.epochs[req.ProducerID]; ok && req.ProducerEpoch < e {
		s.mu.Unlock()
		return kerr.New(kerr.InvalidProducerEpoch, "transactional id %q: producer %d epoch %d is older than epoch %d already seen in %s-%d", req.TransactionalID, req.ProducerID, req.ProducerEpoch, e, OffsetsTopic, s.p)
	}
	g := s.groups[req.GroupID]
	if g == nil && req.GenerationID >= 0 {
		// Kafka 4.0 (OffsetMetadataManager.validateTransactionalOffsetCommit):
		// a generation for a group that does not exist.
		s.mu.Unlock()
		return kerr.New(kerr.IllegalGeneration, "transactional commit of group %s with generation %d: the group does not exist", req.GroupID, req.GenerationID)
	}
	g = s.group(req.GroupID, true)
	if err := g.checkTxnCommit(req); err != nil {
		s.mu.Unlock()
		return err
	}
	s.mu.Unlock()
	if len(req.Offsets) == 0 {
		return nil
	}
	now := s.c.cfg.Now().UnixMilli()
	recs := make([]Record, 0, len(req.Offsets))
	for _, o := range req.Offsets {
		recs = append(recs, txnOffsetRecord(req.GroupID, o.Topic, o.Partition, req.ProducerID, req.ProducerEpoch,
			&tapesv1.OffsetValue{Offset: o.Offset, Metadata: o.Metadata, CommitTimestampMs: now}))
	}
	base, err := s.appendAt(ctx, recs)
	if err != nil {
		return err
	}
	// The markers before the records must be applied first: one of them
	// may end this producer's previous transaction, whose pending commit
	// of the same partition these replace. The producer's marker of this
	// transaction can only follow our answer (its EndTxn comes after it),
	// so registering now, before answering, is in time for it.
	if err := s.tail(ctx); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.noteEpoch(req.ProducerID, req.ProducerEpoch)
	g = s.group(req.GroupID, true)
	for i, o := range req.Offsets {
		g.addPending(req.ProducerID, assign.TopicPartition{Topic: o.Topic, Partition: o.Partition},
			pendingCommit{committed: committed{offset: o.Offset, metadata: o.Metadata, timestamp: now}, at: base + int64(i)})
	}
	return nil
}

// checkTxnCommit fences a transactional commit as Kafka's classic groups
// do (ClassicGroup.validateOffsetCommit with isTransactional): without
// group metadata (generation -1, no member id, no instance id) anything
// goes, as v0-v2 carry none; otherwise the member must be in the group
// (UNKNOWN_MEMBER_ID) in its generation (ILLEGAL_GENERATION). A group
// instance id names no member (tapes has no static members, see
// staticMembershipError in the Kafka front end), so one is
// UNKNOWN_MEMBER_ID, as Kafka answers an instance id it does not know, and
// FENCED_INSTANCE_ID cannot arise. Unlike OffsetCommit, a group awaiting
// its assignment is not REBALANCE_IN_PROGRESS. Caller holds the shard's
// mutex.
func (g *group) checkTxnCommit(req TxnOffsetCommitRequest) error {
	if g.state == Dead {
		return kerr.New(kerr.CoordinatorNotAvailable, "group %s is being removed", g.id)
	}
	if req.GenerationID < 0 && req.MemberID == "" && req.GroupInstanceID == nil {
		return nil
	}
	if req.GroupInstanceID != nil {
		return kerr.New(kerr.UnknownMemberID, "group %s has no member with group.instance.id %q (static membership is not supported): transactional commit rejected", g.id, *req.GroupInstanceID)
	}
	m, ok := g.members[req.MemberID]
	if !ok {
		return kerr.New(kerr.UnknownMemberID, "member %q is not in group %s (generation %d): transactional commit rejected", req.MemberID, g.id, g.generation)
	}
	if req.GenerationID != g.generation {
		return kerr.New(kerr.IllegalGeneration, "transactional commit of member %s with generation %d; group %s is at %d", m.id, req.GenerationID, g.id, g.generation)
	}
	return nil
}

// addPending registers (or replaces) producer's pending commit of tp.
// Caller holds the shard's mutex.
func (g *group) addPending(producer int64, tp assign.TopicPartition, pc pendingCommit) {
	if g.txn == nil {
		g.txn = map[int64]map[assign.TopicPartition]pendingCommit{}
	}
	if g.txn[producer] == nil {
		g.txn[producer] = map[assign.TopicPartition]pendingCommit{}
	}
	g.txn[producer][tp] = pc
}

// dropPending withdraws producer's pending commit of tp. Caller holds the
// shard's mutex.
func (g *group) dropPending(producer int64, tp assign.TopicPartition) {
	delete(g.txn[producer], tp)
	if len(g.txn[producer]) == 0 {
		delete(g.txn, producer)
	}
}

// txnPending reports whether a transactional commit of tp is pending. Caller
// holds the shard's mutex.
func (g *group) txnPending(tp assign.TopicPartition) bool {
	for _, ps := range g.txn {
		if _, ok := ps[tp]; ok {
			return true
		}
	}
	return false
}

// noteEpoch remembers the newest epoch seen of producer. Caller holds
// s.mu.
func (s *shard) noteEpoch(producer int64, epoch int16) {
	if e, ok := s.epochs[producer]; !ok || epoch > e {
		s.epochs[producer] = epoch
	}
}

// applyTxnRecord applies one txn-offset record read from the partition (load).
// Caller holds s.mu.
func (s *shard) applyTxnRecord(d decoded) {
	g := s.group(d.key.Group, true)
	tp := assign.TopicPartition{Topic: d.key.Topic, Partition: d.key.Partition}
	if d.offset == nil {
		g.dropPending(d.key.ProducerID, tp)
		return
	}
	s.noteEpoch(d.key.ProducerID, d.key.ProducerEpoch)
	g.addPending(d.key.ProducerID, tp, pendingCommit{committed: committed{offset: d.offset.Offset, metadata: d.offset.Metadata,
		timestamp: d.offset.CommitTimestampMs}, at: d.at})
}

// applyMarker completes, in every group of the partition, the pending
// commits of the marker's producer written before it (at): a commit makes
// them the committed offsets, an abort drops them. Caller holds s.mu.
func (s *shard) applyMarker(m *Marker, at int64) {
	s.noteEpoch(m.ProducerID, m.ProducerEpoch)
	for _, g := range s.groups {
		ps := g.txn[m.ProducerID]
		n := 0
		for tp, pc := range ps {
			if pc.at >= at {
				continue // the producer's next transaction
			}
			if m.Commit {
				g.offsets[tp] = pc.committed
			}
			delete(ps, tp)
			n++
		}
		if len(ps) == 0 {
			delete(g.txn, m.ProducerID)
		}
		if n > 0 {
			s.c.log.Info("transactional offsets completed", "group", g.id, "producer", m.ProducerID, "epoch", m.ProducerEpoch, "commit", m.Commit, "partitions", n, "marker_offset", at)
		}
	}
}

// tailTimeout bounds one tail read.
const tailTimeout = 10 * time.Second

// maybeTail starts a tail in the background unless one runs. Called by the
// Coordinator's ticker; it does not block.
func (s *shard) maybeTail() {
	if !s.tailing.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer s.tailing.Store(false)
		ctx, cancel := s.context(tailTimeout)
		defer cancel()
		if err := s.tail(ctx); err != nil {
			s.c.log.Warn("reading transaction markers", "partition", s.p, "err", err)
		}
	}()
}

// tail applies the markers committed to the partition since load or the
// last tail; the records in between are this coordinator's own writes,
// applied as they committed. Tails run one at a time (tailMu); compaction
// runs one before it moves the log start, so that no marker is deleted
// unseen. It blocks on the reads, up to ctx.
func (s *shard) tail(ctx context.Context) error {
	s.tailMu.Lock()
	defer s.tailMu.Unlock()
	s.mu.Lock()
	from := s.tailAt
	s.mu.Unlock()
	_, end, err := s.scanRaw(ctx, from, func(r Record) {
		if r.Marker != nil {
			s.mu.Lock()
			s.applyMarker(r.Marker, r.Offset)
			s.mu.Unlock()
		}
	})
	s.mu.Lock()
	s.tailAt = max(s.tailAt, end)
	s.mu.Unlock()
	return err
}

// String is for logs.
func (m *Marker) String() string {
	kind := "abort"
	if m.Commit {
		kind = "commit"
	}
	return fmt.Sprintf("%s marker of producer %d epoch %d", kind, m.ProducerID, m.ProducerEpoch)
}
