package producer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tapes-dev/tapes/internal/eventually"
	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/kerr"
)

func rec(id, key, value string, sent time.Time) *Record {
	r := &Record{Value: []byte(value), SentAt: sent,
		Headers: []*tapesv1.Header{{Key: EventIDHeader, Value: []byte(id)}, {Key: SchemaVersionHeader, Value: []byte("1")}}}
	if key != "-" {
		r.Key = []byte(key)
	}
	return r
}

func TestHistoryLinesHaveTheIssuesShape(t *testing.T) {
	path := filepath.Join(t.TempDir(), "h.jsonl")
	h, err := CreateHistory(path, -1)
	if err != nil {
		t.Fatal(err)
	}
	sent := time.Date(2026, 1, 2, 3, 4, 5, 123456789, time.UTC)
	acked := sent.Add(1500 * time.Microsecond)
	h.Write(&Result{Partition: 2, BaseOffset: 40, Attempts: 1, Done: acked, Records: []*Record{
		rec("p-1", "key-7", "hello", sent), rec("p-2", "-", "quote\" back\\ nl\n tab\t ctl\x01 bad\xff é", sent),
	}})
	h.Write(&Result{Partition: 0, BaseOffset: -1, Attempts: 3, Done: acked,
		Err: kerr.New(kerr.NotEnoughReplicas, "isr"), ErrName: string(kerr.NotEnoughReplicas),
		Records: []*Record{rec("p-3", "key-1", "v", sent)}})
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	want0 := `{"event_id":"p-1","key":"key-7","value":"hello","partition":2,"offset":40,"acks":"all","status":"ok","error":null,"attempts":1,"sent_at":"2026-01-02T03:04:05.123456Z","acked_at":"2026-01-02T03:04:05.124956Z"}`
	if len(lines) != 3 || lines[0] != want0 {
		t.Fatalf("history:\n%s\nwant first line\n%s", b, want0)
	}
	want2 := `{"event_id":"p-3","key":"key-1","value":"v","partition":0,"offset":-1,"acks":"all","status":"error","error":"NOT_ENOUGH_REPLICAS","attempts":3,"sent_at":"2026-01-02T03:04:05.123456Z","acked_at":null}`
	if lines[2] != want2 {
		t.Fatalf("error line\n%s\nwant\n%s", lines[2], want2)
	}
	for i, l := range lines {
		if !json.Valid([]byte(l)) {
			t.Fatalf("line %d is not JSON: %s", i, l)
		}
	}
	got, err := ReadHistory(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if got[1].Key != nil || got[1].Value != "quote\" back\\ nl\n tab\t ctl\x01 bad\ufffd é" || got[1].Offset != 41 {
		t.Fatalf("second line read back as %+v", got[1])
	}
	if !got[0].SentAt.Equal(sent.Truncate(time.Microsecond)) || got[0].AckedAt == nil || got[2].AckedAt != nil || *got[2].Error != "NOT_ENOUGH_REPLICAS" {
		t.Fatalf("read back %+v", got)
	}
}

func TestHistoryIsFlushedWithoutClose(t *testing.T) {
	path := filepath.Join(t.TempDir(), "h.jsonl")
	synctest.Test(t, func(t *testing.T) {
		h, err := CreateHistory(path, 1)
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		h.Write(&Result{BaseOffset: 0, Attempts: 1, Done: time.Now(), Records: []*Record{rec("a", "k", "v", time.Now())}})
		// On disk within one flush interval (of the bubble's clock), before
		// Close: a SIGKILL would not lose it.
		eventually.Nil(t, FlushInterval, "the line on disk", func() error {
			b, _ := os.ReadFile(path)
			if bytes.Contains(b, []byte(`"event_id":"a"`)) && bytes.HasSuffix(b, []byte("}\n")) {
				return nil
			}
			return fmt.Errorf("file holds %q", b)
		})
	})
}

func TestReadHistoryIgnoresOnlyATornLastLine(t *testing.T) {
	good := `{"event_id":"a","key":null,"value":"v","partition":0,"offset":1,"acks":"1","status":"ok","error":null,"attempts":1,"sent_at":"2026-01-02T03:04:05.000000Z","acked_at":null}` + "\n"
	got, err := ReadHistory(strings.NewReader(good + good[:40]))
	if err != nil || len(got) != 1 {
		t.Fatalf("torn tail: %d lines, %v", len(got), err)
	}
	if _, err := ReadHistory(strings.NewReader(good[:40] + "\n" + good)); err == nil {
		t.Fatal("a bad line in the middle was accepted")
	}
}

func TestCreateHistoryReportsABadPath(t *testing.T) {
	_, err := CreateHistory(filepath.Join(t.TempDir(), "missing", "h.jsonl"), 1)
	if !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("err = %v", err)
	}
}

func TestPerfStatsLinesHaveKafkasShape(t *testing.T) {
	start := time.Unix(1000, 0)
	s := NewPerfStats(1000, start)
	for i := 1; i <= 1000; i++ {
		s.Record(time.Duration(i)*time.Millisecond/10, 100) // 0.1ms .. 100ms
	}
	w := s.Window(start.Add(2 * time.Second))
	if w != "1000 records sent, 500.0 records/sec (0.05 MB/sec), 50.0 ms avg latency, 100.0 ms max latency." {
		t.Fatalf("window line %q", w)
	}
	sum := s.Total(start.Add(4 * time.Second))
	want := "1000 records sent, 250.000000 records/sec (0.02 MB/sec), 50.05 ms avg latency, 100.00 ms max latency, 50 ms 50th, 95 ms 95th, 99 ms 99th, 100 ms 99.9th."
	if got := sum.Line(); got != want {
		t.Fatalf("final line\n%s\nwant\n%s", got, want)
	}
	if sum.P99 != 99100*time.Microsecond {
		t.Fatalf("p99 = %v", sum.P99)
	}
}

// Report writes a window's line every interval, the records of that
// window only, and nothing once stopped.
func TestPerfStatsReportEveryInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := NewPerfStats(100, time.Now())
		var out bytes.Buffer // read after stop, which waits for the writer
		stop := s.Report(&out, 2*time.Second)
		for range 10 {
			s.Record(4*time.Millisecond, 100)
		}
		time.Sleep(3 * time.Second) // one line, at 2 s
		for range 30 {
			s.Record(2*time.Millisecond, 100)
		}
		time.Sleep(2 * time.Second) // the second, at 4 s
		stop()
		time.Sleep(10 * time.Second)
		want := "10 records sent, 5.0 records/sec (0.00 MB/sec), 4.0 ms avg latency, 4.0 ms max latency.\n" +
			"30 records sent, 15.0 records/sec (0.00 MB/sec), 2.0 ms avg latency, 2.0 ms max latency.\n"
		if got := out.String(); got != want {
			t.Fatalf("lines\n%s\nwant\n%s", got, want)
		}
	})
}

func TestHistoryLineOfASaltedRecordCarriesItsSaltAndKeySeq(t *testing.T) {
	path := filepath.Join(t.TempDir(), "h.jsonl")
	h, err := CreateHistory(path, -1)
	if err != nil {
		t.Fatal(err)
	}
	sent := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	r := rec("p-9", "key-0#4", "v", sent)
	r.Headers = append(r.Headers, &tapesv1.Header{Key: SaltHeader, Value: []byte("4")}, &tapesv1.Header{Key: KeySeqHeader, Value: []byte("17")})
	h.Write(&Result{Partition: 1, BaseOffset: 3, Attempts: 1, Done: sent, Records: []*Record{r, rec("p-10", "key-2", "w", sent)}})
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := ReadHistoryFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Salt == nil || *got[0].Salt != 4 || got[0].KeySeq == nil || *got[0].KeySeq != 17 {
		t.Fatalf("salted line: %+v", got)
	}
	if got[1].Salt != nil || got[1].KeySeq != nil {
		t.Fatalf("unsalted line has salt %v key_seq %v", got[1].Salt, got[1].KeySeq)
	}
}
