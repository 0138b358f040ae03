package txn

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/tapes-dev/tapes/internal/group"
	"github.com/tapes-dev/tapes/internal/kerr"
)

// Compaction keeps a __transaction_state partition from growing forever (a
// transaction writes about four records). Kafka runs its log cleaner over
// the topic; tapes does what the group coordinator does for
// __consumer_offsets, with the steps it shares (group.CompactLog,
// internal/group/compactlog.go) and a simpler fold: the latest record of
// each transactional id is its state, and a tombstone (an expired id)
// removes it. Only this shard writes the partition in its term, and
// shard.writes holds its writes off from the held read to the log start's
// move. A compaction that fails after some of its appends leaves copies of
// latest records after the originals, which changes nothing for a reader.

// compactTimeout bounds one compaction.
const compactTimeout = 30 * time.Second

// maybeCompact starts a compaction in the background when the partition
// has grown enough and none runs. Called by the ticker; it does not block.
func (s *shard) maybeCompact() {
	if s.sched.Due() {
		go s.compact()
	}
}

// latestRecords folds a partition's records into the latest one of each
// transactional id, tombstones removing theirs.
type latestRecords map[string]Record

func (f latestRecords) add(id string, v value, r Record) {
	if v.State == Dead {
		delete(f, id)
		return
	}
	f[id] = Record{Key: r.Key, Value: r.Value}
}

// records returns the kept records, by transactional id.
func (f latestRecords) records() []Record {
	ids := make([]string, 0, len(f))
	for id := range f {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, strings.Compare)
	out := make([]Record, len(ids))
	for i, id := range ids {
		out[i] = f[id]
	}
	return out
}

// compact runs one compaction.
func (s *shard) compact() {
	ctx, cancel := s.context(context.Background(), compactTimeout)
	defer cancel()
	start := time.Now()
	f := latestRecords{}
	res, err := group.CompactLog(ctx, group.Compaction{Log: s.log, Schedule: &s.sched, Hold: &s.writes,
		Len:  func() int { return len(f) },
		Kept: f.records,
		Scan: func(ctx context.Context, from int64) (int, int64, error) { return s.readLog(ctx, from, f.add) },
		Append: func(ctx context.Context, batch []Record) (int64, error) {
			if s.log.Term() != s.term {
				return 0, kerr.New(kerr.NotCoordinator, "broker %d no longer leads %s-%d", s.c.cfg.BrokerID, StateTopic, s.p)
			}
			return s.log.Append(ctx, batch)
		}})
	group.LogCompaction(s.c.log, StateTopic, s.p, start, res, err)
}
