package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/tapes-dev/tapes/internal/client"
	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/kerr"
	"github.com/tapes-dev/tapes/internal/partitioner"
)

func runProduce(t *testing.T, addr string, stdin io.Reader, args ...string) (string, error) {
	t.Helper()
	var errOut bytes.Buffer
	cmd := &produceCommand{stdin: stdin, stdout: io.Discard, stderr: &errOut}
	err := cmd.Run(cmdCtx(t), append(args, "--bootstrap-server", addr))
	return errOut.String(), err
}

func TestProduceKeyedRecordsGoToTheKeysPartition(t *testing.T) {
	b := newMemBroker(t)
	b.addTopic("orders", 5, 1, nil)
	summary, err := runProduce(t, b.addr, strings.NewReader("one\ntwo\r\n\nthree"),
		"--topic", "orders", "--key", "user-7", "--header", "event_id=e1", "--header", "schema_version=2", "--acks", "1")
	if err != nil {
		t.Fatalf("produce: %v (%s)", err, summary)
	}
	if summary != "sent 4 records to orders: 4 acked, 0 failed\n" {
		t.Errorf("summary = %q", summary)
	}
	want := partitioner.ForKey([]byte("user-7"), 5)
	for p := int32(0); p < 5; p++ {
		recs := b.records("orders", p)
		if p != want {
			if len(recs) != 0 {
				t.Errorf("partition %d got %d records; the key belongs to %d", p, len(recs), want)
			}
			continue
		}
		var values []string
		for _, r := range recs {
			values = append(values, string(r.Value))
			if string(r.Key) != "user-7" || len(r.Headers) != 2 || r.Headers[0].Key != "event_id" || string(r.Headers[1].Value) != "2" || r.TimestampMs == 0 {
				t.Errorf("record %+v lacks its key, headers or timestamp", r)
			}
		}
		if strings.Join(values, "|") != "one|two||three" {
			t.Errorf("values = %q; want one, two, an empty line, three", values)
		}
	}
	for _, req := range b.producedRequests() {
		if req.Acks != client.AcksLeader || req.ProducerId != -1 {
			t.Errorf("request acks %d producer id %d; want acks 1 and no producer id", req.Acks, req.ProducerId)
		}
	}
}

func TestProduceKeylessIsStickyPerBatch(t *testing.T) {
	b := newMemBroker(t)
	b.addTopic("events", 4, 1, nil)
	var in strings.Builder
	for i := range 40 {
		fmt.Fprintf(&in, "v%03d\n", i) // 4 bytes each
	}
	// A batch is full at 12 bytes: three records.
	if summary, err := runProduce(t, b.addr, strings.NewReader(in.String()), "--topic", "events", "--batch-bytes", "12", "--linger", "1h"); err != nil {
		t.Fatalf("produce: %v (%s)", err, summary)
	}
	reqs := b.producedRequests()
	used := map[int32]bool{}
	for i, req := range reqs {
		used[req.Partition] = true
		if i < len(reqs)-1 && len(req.Records) != 3 {
			t.Errorf("batch %d has %d records, want 3 (full at 12 bytes)", i, len(req.Records))
		}
		if i > 0 && req.Partition == reqs[i-1].Partition {
			t.Errorf("batches %d and %d both went to partition %d: sticky did not move on", i-1, i, req.Partition)
		}
		if req.Records[0].Key != nil {
			t.Errorf("keyless record got key %q", req.Records[0].Key)
		}
	}
	if len(reqs) != 14 || len(used) < 3 {
		t.Errorf("%d batches over %d partitions; want 14 batches (13 full, 1 flushed at EOF) spread over the partitions", len(reqs), len(used))
	}
}

func TestProduceFailuresAreCountedByErrorName(t *testing.T) {
	b := newMemBroker(t)
	b.addTopic("orders", 2, 1, nil)
	b.mu.Lock()
	b.onProduce = func(req *tapesv1.ProduceRequest) error {
		return kerr.New(kerr.RecordTooLarge, "batch of %d records exceeds max.message.bytes", len(req.Records))
	}
	b.mu.Unlock()
	summary, err := runProduce(t, b.addr, strings.NewReader("a\nb\nc\n"), "--topic", "orders", "--partition", "1")
	if err == nil || err.Error() != "3 of 3 records failed" {
		t.Fatalf("err = %v, want 3 of 3 records failed", err)
	}
	if !strings.Contains(summary, "sent 3 records to orders: 0 acked, 3 failed\n") ||
		!strings.Contains(summary, "  RECORD_TOO_LARGE: 3 records (first error: produce orders-1: RECORD_TOO_LARGE: batch of 3 records") {
		t.Fatalf("summary =\n%s", summary)
	}
	if _, err := runProduce(t, b.addr, strings.NewReader("a\n"), "--topic", "orders", "--partition", "2"); !kerr.Is(err, kerr.UnknownTopicOrPartition) {
		t.Fatalf("--partition 2 of 2 = %v, want UNKNOWN_TOPIC_OR_PARTITION", err)
	}
	if _, err := runProduce(t, b.addr, strings.NewReader("a\n"), "--topic", "nope"); !kerr.Is(err, kerr.UnknownTopicOrPartition) {
		t.Fatalf("unknown topic = %v, want UNKNOWN_TOPIC_OR_PARTITION", err)
	}
}

// signallingReader reports each Read call before making it.
type signallingReader struct {
	r     io.Reader
	reads chan struct{}
}

func (s *signallingReader) Read(p []byte) (int, error) {
	s.reads <- struct{}{}
	return s.r.Read(p)
}

func TestProduceCtrlCSendsWhatWasRead(t *testing.T) {
	b := newMemBroker(t)
	b.addTopic("orders", 1, 1, nil)
	pr, pw := io.Pipe()
	defer pw.Close()
	in := &signallingReader{r: pr, reads: make(chan struct{}, 10)}
	ctx, cancel := contextWithCancel(t)
	var errOut bytes.Buffer
	done := make(chan error, 1)
	go func() {
		// A linger of an hour: nothing is sent before Ctrl-C.
		done <- (&produceCommand{stdin: in, stdout: io.Discard, stderr: &errOut}).Run(ctx,
			[]string{"--topic", "orders", "--linger", "1h", "--bootstrap-server", b.addr})
	}()
	<-in.reads
	if _, err := pw.Write([]byte("a\nb\n")); err != nil {
		t.Fatal(err)
	}
	<-in.reads // both lines were handed over; the reader waits for more
	time.Sleep(10 * time.Millisecond)
	if n := len(b.producedRequests()); n != 0 {
		t.Fatalf("%d produce requests before Ctrl-C despite the linger", n)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("produce after Ctrl-C: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("produce did not return after Ctrl-C while stdin stayed open")
	}
	if got := b.records("orders", 0); len(got) != 2 || string(got[1].Value) != "b" {
		t.Fatalf("after Ctrl-C the partition holds %d records, want a and b", len(got))
	}
	if errOut.String() != "interrupted: sent 2 records to orders: 2 acked, 0 failed\n" {
		t.Fatalf("summary = %q", errOut.String())
	}
}

func TestProduceCommandLineMistakes(t *testing.T) {
	cases := [][]string{
		{},
		{"--topic", "t", "extra"},
		{"--topic", "t", "--acks", "2"},
		{"--topic", "t", "--header", "=v"},
		{"--topic", "t", "--header", "novalue"},
		{"--topic", "t", "--partition", "-3"},
		{"--topic", "t", "--batch-bytes", "0"},
	}
	for _, args := range cases {
		_, err := runProduce(t, "127.0.0.1:1", strings.NewReader(""), args...)
		if !errors.Is(err, errUsage) {
			t.Errorf("produce %q = %v, want a usage error", args, err)
		}
	}
}
