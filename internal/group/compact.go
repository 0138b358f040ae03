package group

import "time"

// Compaction keeps a __consumer_offsets partition from growing forever.
// Kafka runs its log cleaner over the topic; tapes does the equivalent in
// the coordinator, which already knows the rule by which the partition is
// read (records.go: the latest record of each key wins, a group record
// never replaces one of a newer generation):
//
//  1. read the partition from its log start to its high watermark and
//     keep, per key, the record load would end up with (writes go on);
//  2. hold off every write of the shard (shard.writes), read what was
//     committed since 1 into the same fold, and append the kept records
//     at the end of the partition (acks=all, in batches), the first at
//     offset X;
//  3. DeleteRecords(X): every replica moves its log start to X and drops
//     the segments wholly below it; then writes resume.
//
// Reading the partition from X then rebuilds exactly the state reading it
// from the old log start did: everything below X was folded in 1 and 2,
// and no write can land between the read of 2 and X. A coordinator that
// dies between 2 and 3 leaves the copies behind the originals, which
// changes nothing for a reader; the next compaction removes both. Writes
// wait only for step 2's short read and the appends (a few milliseconds
// for the records a few thousand groups hold), not for step 1.

const (
	// compactBatchRecords and compactBatchBytes bound one batch of
	// rewritten records (well under max.message.bytes).
	compactBatchRecords = 1000
	compactBatchBytes   = 256 << 10
	// compactTimeout bounds one compaction.
	compactTimeout = 30 * time.Second
)

// maybeCompact starts a compaction in the background when the partition
// has grown to compactAt records and none runs. Called by the
// Coordinator's ticker; it does not block.
func (s *shard) maybeCompact() {
	if s.c.cfg.CompactAfter <= 0 {
		return
	}
	s.mu.Lock()
	due := !s.compacting && s.records >= s.compactAt
	if due {
		s.compacting = true
	}
	s.mu.Unlock()
	if due {
		go s.compact()
	}
}

// compact runs one compaction (see above). When fewer than half of the
// partition's records are superseded it only moves compactAt on. Either
// way the next attempt waits for CompactAfter more records, and for twice
// as many records as keys (no compaction could run before).
func (s *shard) compact() {
	ctx, cancel := s.context(compactTimeout)
	defer cancel()
	start := time.Now()
	var f fold
	n, end, err := s.scan(ctx, 0, f.add)
	next := max(int64(n)+s.c.cfg.CompactAfter, 2*int64(len(f.keep)))
	defer func() {
		s.mu.Lock()
		s.compacting, s.compactAt = false, next
		s.mu.Unlock()
	}()
	if err != nil {
		s.c.log.Warn("compaction: reading the partition", "partition", s.p, "err", err)
		return
	}
	if n < 2*len(f.keep) {
		s.mu.Lock()
		s.records = int64(n)
		s.mu.Unlock()
		return // mostly live records: wait for more
	}

	s.writes.Lock()
	defer s.writes.Unlock()
	held := time.Now()
	tail, _, err := s.scan(ctx, end, f.add)
	if err != nil {
		s.c.log.Warn("compaction: reading the partition", "partition", s.p, "err", err)
		return
	}
	n += tail
	s.mu.Lock()
	s.records = int64(n)
	s.mu.Unlock()
	first := int64(-1)
	for batch := range batches(f.keep) {
		base, err := s.write(ctx, batch)
		if err != nil {
			s.c.log.Warn("compaction: rewriting the latest records", "partition", s.p, "err", err)
			return
		}
		if first < 0 {
			first = base
		}
	}
	if first < 0 {
		return // nothing decodable to keep and nothing to rewrite
	}
	logStart, err := s.log.DeleteRecords(ctx, first)
	if err != nil {
		s.c.log.Warn("compaction: moving the log start", "partition", s.p, "before", first, "err", err)
		return
	}
	kept := int64(len(f.keep))
	s.mu.Lock()
	s.records = kept
	s.mu.Unlock()
	next = max(kept+s.c.cfg.CompactAfter, 2*kept)
	s.c.log.Info("compacted", "partition", s.p, "records", n, "kept", kept, "log_start", logStart,
		"took", time.Since(start).Round(time.Millisecond), "writes_held", time.Since(held).Round(time.Millisecond))
}

// fold collects, in the order their keys first appear, the records that
// decide a partition's state: per key the latest, except that a group
// record of an older generation does not replace a newer one (as load
// reads them).
type fold struct {
	keep  []Record
	byKey map[recordKey]folded
}

type folded struct {
	at  int // index in keep
	gen int32
}

// add folds in the next record of the partition.
func (f *fold) add(r Record, d decoded) {
	if f.byKey == nil {
		f.byKey = map[recordKey]folded{}
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

// batches splits recs into batches of at most compactBatchRecords records
// and about compactBatchBytes bytes.
func batches(recs []Record) func(yield func([]Record) bool) {
	return func(yield func([]Record) bool) {
		for len(recs) > 0 {
			i, size := 0, 0
			for i < len(recs) && i < compactBatchRecords && (i == 0 || size+len(recs[i].Key)+len(recs[i].Value) <= compactBatchBytes) {
				size += len(recs[i].Key) + len(recs[i].Value)
				i++
			}
			if !yield(recs[:i]) {
				return
			}
			recs = recs[i:]
		}
	}
}
