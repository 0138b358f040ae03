package group

import (
	"context"
	"time"
)

// Compaction keeps a __consumer_offsets partition from growing forever.
// Kafka runs its log cleaner over the topic; tapes does the equivalent in
// the coordinator, which already knows the rule by which the partition is
// read (records.go: the latest record of each key wins, a group record
// never replaces one of a newer generation):
//
//  1. with every write of the shard held off (shard.writes), read the
//     partition from its log start to its high watermark and keep, per
//     key, the record load would end up with;
//  2. append those records at the end of the partition (acks=all, in
//     batches), the first at offset X;
//  3. DeleteRecords(X): every replica moves its log start to X and drops
//     the segments wholly below it.
//
// Reading the partition from X then rebuilds exactly the state reading it
// from the old log start did. A coordinator that dies between 2 and 3
// leaves the copies behind the originals, which changes nothing for a
// reader; the next compaction removes both. Writes wait for a compaction
// (one read of the partition and a few appends: milliseconds for the
// records a few thousand groups hold).

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
// partition's records are superseded it only moves compactAt on, so the
// partition is read again after CompactAfter more records.
func (s *shard) compact() {
	ctx, cancel := s.context(compactTimeout)
	defer cancel()
	s.writes.Lock()
	defer s.writes.Unlock()
	start := time.Now()
	keep, n, err := s.latestRecords(ctx)
	next := int64(n) + s.c.cfg.CompactAfter
	defer func() {
		s.mu.Lock()
		s.compacting, s.compactAt = false, next
		s.mu.Unlock()
	}()
	if err != nil {
		s.c.log.Warn("compaction: reading the partition", "partition", s.p, "err", err)
		return
	}
	s.mu.Lock()
	s.records = int64(n)
	s.mu.Unlock()
	if n < 2*len(keep) {
		return // mostly live records: wait for more
	}
	first := int64(-1)
	for batch := range batches(keep) {
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
	s.mu.Lock()
	s.records = int64(len(keep))
	s.mu.Unlock()
	next = int64(len(keep)) + s.c.cfg.CompactAfter
	s.c.log.Info("compacted", "partition", s.p, "records", n, "kept", len(keep), "log_start", logStart, "took", time.Since(start).Round(time.Millisecond))
}

// latestRecords reads the partition and returns, in the order their keys
// first appear, the records that decide its state: per key the latest,
// except that a group record of an older generation does not replace a
// newer one (as load reads them). n is how many records were read.
func (s *shard) latestRecords(ctx context.Context) (keep []Record, n int, err error) {
	type kept struct {
		at  int // index in keep
		gen int32
	}
	byKey := map[recordKey]kept{}
	n, err = s.scan(ctx, func(r Record, d decoded) {
		var gen int32
		if d.group != nil {
			gen = d.group.GenerationId
		}
		k, seen := byKey[d.key]
		switch {
		case !seen:
			byKey[d.key] = kept{at: len(keep), gen: gen}
			keep = append(keep, r)
		case d.group != nil && gen < k.gen:
			// an older generation committed late: load skips it too
		default:
			keep[k.at] = r
			byKey[d.key] = kept{at: k.at, gen: gen}
		}
	})
	return keep, n, err
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
