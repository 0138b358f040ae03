package consumer

import (
	"context"
	"sync"
	"time"

	"github.com/tapes-dev/tapes/internal/client"
	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/kerr"
)

// defaultMaxBuffered is Config.MaxBuffered when zero: how many records a
// fetcher holds before it stops fetching.
const defaultMaxBuffered = 2000

// fetcher long-polls one partition's leader from a position and buffers
// what it reads, until closed.
type fetcher struct {
	c      *Consumer
	tp     TopicPartition
	cancel context.CancelFunc
	done   chan struct{}

	mu  sync.Mutex
	buf []*tapesv1.Record
	// gaps are the retention gaps found, oldest first, not yet reported:
	// each is due once no buffered record lies below its from (the records
	// fetched before it were taken), so that the listener hears of it
	// between the records before and after it, in order.
	gaps []gap
	// room is signalled when the poll goroutine took records.
	room chan struct{}
}

func (c *Consumer) newFetcher(tp TopicPartition, pos int64) *fetcher {
	ctx, cancel := context.WithCancel(context.Background())
	f := &fetcher{c: c, tp: tp, cancel: cancel, done: make(chan struct{}), room: make(chan struct{}, 1)}
	go f.run(ctx, pos)
	return f
}

func (f *fetcher) close() {
	f.cancel()
	<-f.done
}

// gap is a range of offsets [from, to) that retention (or delete-records)
// deleted before they were read; fetching resumed at resumeAt.
type gap struct{ from, to, resumeAt int64 }

// next returns the buffered record at offset pos or after it (nil when none
// is buffered), dropping older ones; or, when a gap comes first, nothing:
// the gap itself, removed, if takeGap, else nil and nil (the caller takes
// it later). Called from the poll goroutine.
func (f *fetcher) next(pos int64, takeGap bool) (*tapesv1.Record, *gap) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for len(f.buf) > 0 && f.buf[0].Offset < pos {
		f.buf = f.buf[1:]
	}
	if len(f.gaps) > 0 && (len(f.buf) == 0 || f.buf[0].Offset >= f.gaps[0].from) {
		if !takeGap {
			return nil, nil
		}
		g := f.gaps[0]
		f.gaps = f.gaps[1:]
		return nil, &g
	}
	if len(f.buf) == 0 {
		return nil, nil
	}
	r := f.buf[0]
	f.buf = f.buf[1:]
	select {
	case f.room <- struct{}{}:
	default:
	}
	return r, nil
}

func (f *fetcher) buffered() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.buf)
}

func (f *fetcher) run(ctx context.Context, pos int64) {
	defer close(f.done)
	c := f.c
	for ctx.Err() == nil {
		if pos < 0 {
			pos = c.resetOffset(ctx, f.tp)
			if pos < 0 {
				sleep(ctx, 200*time.Millisecond)
				continue
			}
		}
		if f.buffered() >= c.cfg.MaxBuffered {
			select {
			case <-ctx.Done():
				return
			case <-f.room:
			}
			continue
		}
		resp, err := c.cl.Fetch(ctx, &tapesv1.FetchRequest{Topic: f.tp.Topic, Partition: f.tp.Partition, Offset: pos,
			MaxBytes: int32(c.cfg.FetchMaxBytes), MaxWaitMs: int32(c.cfg.FetchMaxWait / time.Millisecond),
			IsolationLevel: int32(c.cfg.IsolationLevel)})
		if ke, ok := kerr.As(err); ok && ke.Code() == kerr.OffsetOutOfRange {
			start, hw := ke.Detail.LogStartOffset, ke.Detail.HighWatermark
			resume := start
			if c.cfg.From == "latest" {
				resume = hw
				if c.cfg.IsolationLevel == ReadCommitted {
					// The last stable offset, not the high watermark:
					// an open transaction's records are read once
					// committed.
					if lso := c.resetOffset(ctx, f.tp); lso >= 0 {
						resume = lso
					}
				}
			}
			if pos < start {
				// Retention deleted [pos, start): never silently, and
				// reported in order with the records (see next).
				f.mu.Lock()
				f.gaps = append(f.gaps, gap{from: pos, to: start, resumeAt: resume})
				f.mu.Unlock()
				select {
				case c.wake <- struct{}{}:
				default:
				}
			} else {
				c.log.Warn("position beyond the log end; resetting", "partition", f.tp, "position", pos, "log_end", hw, "from", c.cfg.From)
			}
			pos = resume
			continue
		}
		if err != nil {
			if ctx.Err() == nil {
				c.log.Debug("fetch failed", "partition", f.tp, "err", err)
				sleep(ctx, 200*time.Millisecond)
			}
			continue
		}
		next := client.NextOffset(resp, pos)
		if len(resp.Records) == 0 {
			pos = next // past a control record (a transaction marker), if any
			continue
		}
		f.mu.Lock()
		f.buf = append(f.buf, resp.Records...)
		f.mu.Unlock()
		pos = next
		select {
		case c.wake <- struct{}{}:
		default:
		}
	}
}
