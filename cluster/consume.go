package main

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/tapes-dev/tapes/internal/client"
	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/kerr"
)

// consumeCommand is `cluster consume`: prints a topic's records, in the
// manner of kafka-console-consumer (without a consumer group).
type consumeCommand struct {
	stdout, stderr io.Writer
	mu             sync.Mutex // serialises warnings from the partition readers
}

func init() {
	register("consume", "print a topic's records (all partitions or one) to stdout",
		(&consumeCommand{stdout: os.Stdout, stderr: os.Stderr}).Run)
}

// consumeFetchBytes bounds the records of one fetch.
const consumeFetchBytes = 1 << 20

// Run reads the chosen partitions until --until-end is met, --max-records
// are printed, or Ctrl-C; everything fetched is printed and flushed before
// it returns.
func (c *consumeCommand) Run(ctx context.Context, args []string) error {
	var (
		t             clusterTarget
		topic         string
		partition     int
		fromBeginning bool
		offset        int64
		untilEnd      bool
		format        string
		maxRecords    int
		maxWait       time.Duration
	)
	fs := commandFlags("consume --topic T [--partition P] [--from-beginning | --offset N] [--until-end] [--format text|json] [--max-records N]",
		"Prints the records of every partition of a topic (or of one), from the latest offset by default.\n"+
			"It long-polls for new records until Ctrl-C, or with --until-end stops once each partition is read up to\n"+
			"the high watermark it had when the command started. Records of one partition come in offset order.", c.stderr)
	t.addFlags(fs)
	fs.StringVar(&topic, "topic", "", "topic to read (required)")
	fs.IntVar(&partition, "partition", -1, "read only this partition")
	fs.BoolVar(&fromBeginning, "from-beginning", false, "start at each partition's log start offset instead of its end")
	fs.Int64Var(&offset, "offset", -1, "start at this offset (needs --partition); past the high watermark is OFFSET_OUT_OF_RANGE, below the log start continues at the log start")
	fs.BoolVar(&untilEnd, "until-end", false, "exit once every partition is read up to its high watermark at start")
	fs.StringVar(&format, "format", "text", "text: the value only, one per line; json: one object per line with partition, offset, key, value, headers and timestamp (a key or value that is not UTF-8 is null, and exact in key_b64 or value_b64, base64)")
	fs.IntVar(&maxRecords, "max-records", 0, "exit after printing this many records (0: no limit)")
	fs.DurationVar(&maxWait, "max-wait", 500*time.Millisecond, "how long one fetch waits on the leader for new records (long poll)")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	switch {
	case len(pos) != 0:
		return fmt.Errorf("%w: consume takes no arguments, got %q", errUsage, pos)
	case topic == "":
		return fmt.Errorf("%w: --topic is required", errUsage)
	case partition < -1:
		return fmt.Errorf("%w: --partition %d: want a partition number (0 or more)", errUsage, partition)
	case set["offset"] && offset < 0:
		return fmt.Errorf("%w: --offset %d: want 0 or more", errUsage, offset)
	case set["offset"] && !set["partition"]:
		return fmt.Errorf("%w: --offset needs --partition", errUsage)
	case set["offset"] && fromBeginning:
		return fmt.Errorf("%w: --offset and --from-beginning exclude each other", errUsage)
	case format != "text" && format != "json":
		return fmt.Errorf("%w: --format %q: want text or json", errUsage, format)
	case maxRecords < 0:
		return fmt.Errorf("%w: --max-records %d: want 0 or more", errUsage, maxRecords)
	case maxWait < 0:
		return fmt.Errorf("%w: --max-wait %v: want 0 or more", errUsage, maxWait)
	}

	cl, err := t.client()
	if err != nil {
		return err
	}
	defer cl.Close()

	// Where each partition starts and, with --until-end, stops.
	setup, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	n, err := partitionCount(setup, cl, topic, partition)
	if err != nil {
		return err
	}
	parts := make([]int32, 0, n)
	if partition >= 0 {
		parts = append(parts, int32(partition))
	} else {
		for p := range n {
			parts = append(parts, int32(p))
		}
	}
	var readers []*partitionReader
	for _, p := range parts {
		r := &partitionReader{cl: cl, topic: topic, partition: p, end: -1, maxWait: maxWait, warn: c.warnf}
		switch {
		case set["offset"]:
			// Past the end is a mistake to report, not to correct: the
			// reader asked for records that do not exist (yet). Below the
			// log start, records were deleted: run continues at the log
			// start and says so (auto.offset.reset=earliest).
			lo, err := cl.ListOffsets(setup, topic, p, client.EarliestOffset)
			if err != nil {
				return err
			}
			hi, err := cl.ListOffsets(setup, topic, p, client.LatestOffset)
			if err != nil {
				return err
			}
			if offset > hi.GetOffset() {
				return fmt.Errorf("%s-%d: --offset %d: %w", topic, p, offset, kerr.OutOfRange(offset, lo.GetOffset(), hi.GetOffset()))
			}
			r.offset = offset
		case fromBeginning:
			lo, err := cl.ListOffsets(setup, topic, p, client.EarliestOffset)
			if err != nil {
				return err
			}
			r.offset = lo.GetOffset()
		default:
			lo, err := cl.ListOffsets(setup, topic, p, client.LatestOffset)
			if err != nil {
				return err
			}
			r.offset = lo.GetOffset()
		}
		if untilEnd {
			lo, err := cl.ListOffsets(setup, topic, p, client.LatestOffset)
			if err != nil {
				return err
			}
			r.end = lo.GetOffset()
		}
		readers = append(readers, r)
	}
	cancel()

	var w recordWriter = &textWriter{}
	if format == "json" {
		w = &jsonWriter{}
	}
	count, err := consumeAll(ctx, readers, c.stdout, w, maxRecords)
	fmt.Fprintf(c.stderr, "Processed a total of %d messages\n", count)
	return err
}

// warnf prints a note to stderr; safe for concurrent use.
func (c *consumeCommand) warnf(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	fmt.Fprintf(c.stderr, format+"\n", args...)
}

// fetched is one partition's records from one fetch, in offset order.
type fetched struct {
	partition int32
	records   []*tapesv1.Record
}

// consumeAll runs one reader per partition and prints their records to out
// until every reader is done, maxRecords are printed (0: no limit), or ctx
// ends. Every record a reader fetched is printed, also after ctx ended.
// It returns the number of records printed and the first error.
func consumeAll(ctx context.Context, readers []*partitionReader, out io.Writer, w recordWriter, maxRecords int) (int, error) {
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch := make(chan fetched, len(readers))
	stopped := make(chan struct{}) // closed once nothing more is printed
	errs := make([]error, len(readers))
	var wg sync.WaitGroup
	for i, r := range readers {
		wg.Go(func() {
			if errs[i] = r.run(fctx, ch, stopped); errs[i] != nil {
				cancel()
			}
		})
	}
	go func() {
		wg.Wait()
		close(ch)
	}()

	bw := bufio.NewWriterSize(out, 64<<10)
	count := 0
	done, closed := false, false
	var werr error
	for f := range ch {
		for _, rec := range f.records {
			if done {
				break
			}
			if werr = w.write(bw, f.partition, rec); werr != nil {
				break
			}
			count++
			if maxRecords > 0 && count >= maxRecords {
				done = true
			}
		}
		if (done || werr != nil) && !closed {
			close(stopped)
			closed = true
			cancel()
		}
		if len(ch) == 0 && werr == nil {
			werr = bw.Flush() // nothing more at hand: show what we have
		}
	}
	if err := bw.Flush(); werr == nil {
		werr = err
	}
	if werr != nil {
		return count, fmt.Errorf("write output: %w", werr)
	}
	return count, errors.Join(errs...)
}

// partitionReader fetches one partition from offset to end (-1: forever).
type partitionReader struct {
	cl        *client.Client
	topic     string
	partition int32
	offset    int64
	end       int64
	maxWait   time.Duration
	warn      func(format string, args ...any)
}

// run fetches until the end offset, ctx ends (not an error), stopped is
// closed, or a fetch fails.
func (r *partitionReader) run(ctx context.Context, out chan<- fetched, stopped <-chan struct{}) error {
	for r.end < 0 || r.offset < r.end {
		resp, err := r.cl.Fetch(ctx, &tapesv1.FetchRequest{
			Topic: r.topic, Partition: r.partition, Offset: r.offset,
			MaxBytes: consumeFetchBytes, MaxWaitMs: int32(r.maxWait.Milliseconds()),
		})
		if err != nil && ctx.Err() != nil {
			return nil // Ctrl-C, or another reader failed
		}
		if ke, ok := kerr.As(err); ok && ke.Code() == kerr.OffsetOutOfRange {
			// As Kafka's auto.offset.reset: below the log start go to the
			// earliest record, past the end go to the end.
			to := ke.Detail.GetHighWatermark()
			if r.offset < ke.Detail.GetLogStartOffset() {
				to = ke.Detail.GetLogStartOffset()
			}
			r.warn("partition %d: offset %d is out of range [%d, %d]; continuing at %d",
				r.partition, r.offset, ke.Detail.GetLogStartOffset(), ke.Detail.GetHighWatermark(), to)
			if to == r.offset {
				return err // no progress possible
			}
			r.offset = to
			continue
		}
		if err != nil {
			return err
		}
		var recs []*tapesv1.Record
		next := client.NextOffset(resp, r.offset)
		for _, rec := range resp.GetRecords() {
			if rec.GetOffset() < r.offset {
				continue // a batch may start before the offset asked for
			}
			if r.end >= 0 && rec.GetOffset() >= r.end {
				continue
			}
			recs = append(recs, rec)
		}
		r.offset = next
		if len(recs) > 0 {
			select {
			case out <- fetched{partition: r.partition, records: recs}:
			case <-stopped:
				return nil
			}
		}
	}
	return nil
}

// recordWriter formats one record as one line.
type recordWriter interface {
	write(w *bufio.Writer, partition int32, rec *tapesv1.Record) error
}

// textWriter prints the value only, as kafka-console-consumer does by default.
type textWriter struct{}

func (textWriter) write(w *bufio.Writer, _ int32, rec *tapesv1.Record) error {
	w.Write(rec.GetValue())
	return w.WriteByte('\n')
}

// jsonRecord is the --format json line. Field order is the output's.
// Bytes are kept exact: a key or value that is not valid UTF-8 is null in
// "key" or "value" and given, base64-encoded (standard alphabet, padded),
// in "key_b64" or "value_b64"; a header value that is not valid UTF-8 is
// in "headers_b64" instead of "headers".
type jsonRecord struct {
	Partition  int32             `json:"partition"`
	Offset     int64             `json:"offset"`
	Key        *string           `json:"key"` // null for a record without key (and no key_b64)
	KeyB64     string            `json:"key_b64,omitempty"`
	Value      *string           `json:"value"`
	ValueB64   string            `json:"value_b64,omitempty"`
	Headers    map[string]string `json:"headers"`
	HeadersB64 map[string]string `json:"headers_b64,omitempty"`
	Timestamp  int64             `json:"timestamp"`
}

// jsonWriter prints one JSON object per line. Of repeated header keys the
// last wins.
type jsonWriter struct{}

func (jsonWriter) write(w *bufio.Writer, partition int32, rec *tapesv1.Record) error {
	jr := jsonRecord{
		Partition: partition, Offset: rec.GetOffset(),
		Headers: make(map[string]string, len(rec.GetHeaders())), Timestamp: rec.GetTimestampMs(),
	}
	if rec.Key != nil {
		jr.Key, jr.KeyB64 = textOrBase64(rec.Key)
	}
	jr.Value, jr.ValueB64 = textOrBase64(rec.GetValue())
	for _, h := range rec.GetHeaders() {
		if v := h.GetValue(); utf8.Valid(v) {
			jr.Headers[h.GetKey()] = string(v)
			delete(jr.HeadersB64, h.GetKey())
			continue
		}
		if jr.HeadersB64 == nil {
			jr.HeadersB64 = map[string]string{}
		}
		jr.HeadersB64[h.GetKey()] = base64.StdEncoding.EncodeToString(h.GetValue())
		delete(jr.Headers, h.GetKey())
	}
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc.Encode(jr) // Encode ends the line
}

// textOrBase64 returns b as text when it is valid UTF-8, else its base64.
func textOrBase64(b []byte) (*string, string) {
	if utf8.Valid(b) {
		s := string(b)
		return &s, ""
	}
	return nil, base64.StdEncoding.EncodeToString(b)
}
