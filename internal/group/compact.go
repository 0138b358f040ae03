package group

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
)

// Compaction keeps a __consumer_offsets partition from growing forever.
// Kafka runs its log cleaner over the topic; tapes does the equivalent in
// the coordinator, which already knows the rule by which the partition is
// read (records.go: the latest record of each key wins, a group record
// never replaces one of a newer generation). The steps, shared with the
// transaction coordinator, are CompactLog's (compactlog.go): 1. fold the
// partition from its log start, 2. hold the shard's writes (shard.writes),
// fold the tail and append the kept records, the first at offset X,
// 3. DeleteRecords(X).
//
// Transactional commits (txn.go): the fold applies markers as load does,
// so a completed commit is kept as the plain offset record it became (or
// nothing, aborted), the marker and the txn-offset records dropped; a
// pending one (no marker yet) is rewritten as it is, after the others.
// Markers are written by the transaction coordinator, not through this
// shard, so one may land between the read of 2 and X; if it completes a
// rewritten pending record, that copy would read as pending again, after
// its marker. So before 3 the coordinator runs its tail (the live state
// sees every marker below X), reads [end of 2, X) for such markers, and
// appends what each one did: the offsets a commit made committed, and a
// record withdrawing each copy it completed. A coordinator that
// dies between 2 and 3 leaves the copies behind the originals, which
// changes nothing for a reader; the next compaction removes both. Writes
// wait only for step 2's short read and the appends (a few milliseconds
// for the records a few thousand groups hold), not for step 1.

// compactTimeout bounds one compaction.
const compactTimeout = 30 * time.Second

// maybeCompact starts a compaction in the background when the partition
// has grown to the schedule's count and none runs. Called by the
// Coordinator's ticker; it does not block.
func (s *shard) maybeCompact() {
	if s.sched.Due() {
		go s.compact()
	}
}

// compact runs one compaction (see above; compactlog.go), the fold's
// markers repaired before the log start moves.
func (s *shard) compact() {
	ctx, cancel := s.context(compactTimeout)
	defer cancel()
	start := time.Now()
	var f fold
	res, err := CompactLog(ctx, Compaction{Log: s.log, Schedule: &s.sched, Hold: &s.writes, Append: s.write, Len: f.len, Kept: f.records,
		Scan: func(ctx context.Context, from int64) (int, int64, error) { return s.scan(ctx, from, f.add) },
		BeforeDelete: func(ctx context.Context, end, first int64) error {
			if err := s.tail(ctx); err != nil {
				return fmt.Errorf("reading transaction markers: %w", err)
			}
			if err := s.repairPending(ctx, &f, end, first); err != nil {
				return fmt.Errorf("markers that completed rewritten pending commits: %w", err)
			}
			return nil
		}})
	LogCompaction(s.c.log, OffsetsTopic, s.p, start, res, err)
}

// fold collects, in the order their keys first appear, the records that
// decide a partition's state: per key the latest, except that a group
// record of an older generation does not replace a newer one (as load
// reads them); transactional commits completed by their markers as load
// completes them, and those still pending (records returns them last).
type fold struct {
	keep  []Record
	byKey map[recordKey]folded
	// pending: the txn-offset records without a marker yet, by identity.
	pending map[recordKey]foldedPending
}

type folded struct {
	at  int // index in keep
	gen int32
}

type foldedPending struct {
	rec Record
	v   *tapesv1.OffsetValue
}

// add folds in the next record of the partition.
func (f *fold) add(r Record, d decoded) {
	if f.byKey == nil {
		f.byKey = map[recordKey]folded{}
		f.pending = map[recordKey]foldedPending{}
	}
	switch {
	case d.marker != nil:
		for _, id := range f.pendingOf(d.marker.ProducerID) {
			p := f.pending[id]
			if p.rec.Offset >= d.at {
				continue
			}
			delete(f.pending, id)
			if d.marker.Commit {
				rec := offsetRecord(id.Group, id.Topic, id.Partition, p.v)
				f.add(rec, decoded{key: recordKey{Kind: kindOffset, Group: id.Group, Topic: id.Topic, Partition: id.Partition}, offset: p.v})
			}
		}
		return
	case d.key.Kind == kindTxnOffset:
		if d.offset == nil {
			delete(f.pending, d.key.identity())
		} else {
			f.pending[d.key.identity()] = foldedPending{rec: r, v: d.offset}
		}
		return
	}
	var gen int32
	if d.group != nil {
		gen = d.group.GenerationId
	}
	k, seen := f.byKey[d.key]
	switch {
	case !seen:
		f.byKey[d.key] = folded{at: len(f.keep), gen: gen}
		f.keep = append(f.keep, r)
	case d.group != nil && gen < k.gen:
		// an older generation committed late: load skips it too
	default:
		f.keep[k.at] = r
		f.byKey[d.key] = folded{at: k.at, gen: gen}
	}
}

// pendingOf returns the identities of producer's pending records, in the
// order they were written.
func (f *fold) pendingOf(producer int64) []recordKey {
	var ids []recordKey
	for id := range f.pending {
		if id.ProducerID == producer {
			ids = append(ids, id)
		}
	}
	slices.SortFunc(ids, func(a, b recordKey) int { return cmp.Compare(f.pending[a].rec.Offset, f.pending[b].rec.Offset) })
	return ids
}

// len is how many records records returns.
func (f *fold) len() int { return len(f.keep) + len(f.pending) }

// records is what compaction rewrites: the deciding records, then the
// pending ones in the order they were written.
func (f *fold) records() []Record {
	out := slices.Clone(f.keep)
	var ps []Record
	for _, p := range f.pending {
		ps = append(ps, p.rec)
	}
	slices.SortFunc(ps, func(a, b Record) int { return cmp.Compare(a.Offset, b.Offset) })
	return append(out, ps...)
}

// repairPending handles the markers that landed in [from, to) (after
// compaction's held read, before its rewritten records, which begin at
// to): for each one that completes rewritten pending records, it appends
// what the marker did, the committed offsets of a commit, and a record
// withdrawing each copy. The caller holds s.writes exclusively.
func (s *shard) repairPending(ctx context.Context, f *fold, from, to int64) error {
	if len(f.pending) == 0 || from >= to {
		return nil
	}
	var repair []Record
	_, _, err := s.scanRaw(ctx, from, func(r Record) {
		if r.Marker == nil || r.Offset >= to {
			return
		}
		for _, id := range f.pendingOf(r.Marker.ProducerID) {
			p := f.pending[id]
			delete(f.pending, id)
			if r.Marker.Commit {
				repair = append(repair, offsetRecord(id.Group, id.Topic, id.Partition, p.v))
			}
			repair = append(repair, txnOffsetRecord(id.Group, id.Topic, id.Partition, id.ProducerID, 0, nil))
		}
	})
	if err != nil || len(repair) == 0 {
		return err
	}
	s.c.log.Info("compaction: a marker completed rewritten pending commits", "partition", s.p, "records", len(repair))
	for batch := range Batches(repair) {
		if _, err := s.write(ctx, batch); err != nil {
			return err
		}
	}
	return nil
}
