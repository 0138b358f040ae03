package consumer

import (
	"context"
	"sync"
	"time"

	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/kerr"
)

// maxBuffered is how many records a fetcher holds before it stops fetching.
const maxBuffered = 2000

// fetcher long-polls one partition's leader from a position and buffers
// what it reads, until closed.
type fetcher struct {
	c      *Consumer
	tp     TopicPartition
	cancel context.CancelFunc
	done   chan struct{}

	mu  sync.Mutex
	buf []*tapesv1.Record
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

// next returns the buffered record at offset pos or after it (nil when none
// is buffered), dropping older ones.
func (f *fetcher) next(pos int64) *tapesv1.Record {
	f.mu.Lock()
	defer f.mu.Unlock()
	for len(f.buf) > 0 && f.buf[0].Offset < pos {
		f.buf = f.buf[1:]
	}
	if len(f.buf) == 0 {
		return nil
	}
	r := f.buf[0]
	f.buf = f.buf[1:]
	select {
	case f.room <- struct{}{}:
	default:
	}
	return r
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
		if f.buffered() >= maxBuffered {
			select {
			case <-ctx.Done():
				return
			case <-f.room:
			}
			continue
		}
		resp, err := c.cl.Fetch(ctx, &tapesv1.FetchRequest{Topic: f.tp.Topic, Partition: f.tp.Partition, Offset: pos,
			MaxBytes: int32(c.cfg.FetchMaxBytes), MaxWaitMs: int32(c.cfg.FetchMaxWait / time.Millisecond)})
		if ke, ok := kerr.As(err); ok && ke.Code() == kerr.OffsetOutOfRange {
			start, hw := ke.Detail.LogStartOffset, ke.Detail.HighWatermark
			resume := start
			if c.cfg.From == "latest" {
				resume = hw
			}
			if pos < start {
				// Retention deleted [pos, start): never silently.
				c.post(event{kind: evGap, tp: f.tp, from: pos, to: start, resumeAt: resume})
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
		if len(resp.Records) == 0 {
			continue
		}
		f.mu.Lock()
		f.buf = append(f.buf, resp.Records...)
		f.mu.Unlock()
		pos = resp.Records[len(resp.Records)-1].Offset + 1
		select {
		case c.wake <- struct{}{}:
		default:
		}
	}
}
