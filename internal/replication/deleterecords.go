package replication

import (
	"context"
	"errors"
	"time"

	"github.com/tapes-dev/tapes/internal/kerr"
)

// DeleteRecords moves the log start of the partition to before (Kafka's
// DeleteRecords): every replica applies the same DeleteBefore entry, drops
// the segments that lie wholly below it, and fetches below it answer
// OFFSET_OUT_OF_RANGE. before must be at most the high watermark (-1 means
// the high watermark); a point at or below the log start changes nothing.
// It returns the log start once the entry is committed and applied, and
// blocks up to ctx. Called by the DeleteRecords RPC and by the group
// coordinator (compacting __consumer_offsets), from their own goroutines.
func (r *Replica) DeleteRecords(ctx context.Context, before int64) (logStart int64, err error) {
	if _, err := r.readyTerm(); err != nil {
		return 0, err
	}
	start, hw := r.log.StartOffset(), r.log.EndOffset()
	if before == -1 {
		before = hw
	}
	if before < 0 || before > hw {
		return 0, kerr.OutOfRange(before, start, hw)
	}
	if before <= start {
		return start, nil
	}
	timeout := 5 * time.Second
	if d, ok := ctx.Deadline(); ok {
		timeout = time.Until(d)
	}
	future := r.raft.Apply(encodeDeleteBeforeCmd(before), timeout)
	if err := waitFuture(ctx, future); err != nil {
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			return 0, kerr.New(kerr.RequestTimedOut, "delete records of %s-%d before %d: not committed in time; it may still be", r.cfg.Topic, r.cfg.Partition, before)
		}
		return 0, r.applyErr(err)
	}
	if ar, ok := future.Response().(applyResult); ok && ar.err != nil {
		return 0, kerr.New(kerr.KafkaStorageError, "delete records of %s-%d before %d: %v", r.cfg.Topic, r.cfg.Partition, before, ar.err)
	}
	return r.log.StartOffset(), nil
}
