package report

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestEventLogRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), EventsFile)
	log, err := NewEventLog(path)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 3, 1, 10, 0, 0, 123456789, time.FixedZone("X", 3600))
	want := []Event{
		{At: at, Type: EventFaultStart, ID: 1, What: "isolate broker-2 from broker-1, broker-3"},
		{At: at.Add(time.Second), Type: EventLeader, Topic: "orders", Partition: 2, Leader: 3, Epoch: 7},
		{At: at.Add(2 * time.Second), Type: EventFaultEnd, ID: 1},
		{At: at.Add(3 * time.Second), Type: EventNote, What: `quotes " and <tags> and
newlines`},
	}
	for _, e := range want {
		if err := log.Write(e); err != nil {
			t.Fatal(err)
		}
	}
	before := time.Now()
	if err := log.Write(Event{Type: EventNote, What: "no time"}); err != nil {
		t.Fatal(err)
	}
	if err := log.Close(); err != nil {
		t.Fatal(err)
	}
	if err := log.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := log.Write(Event{Type: EventNote}); err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("Write after Close = %v, want an error naming the file", err)
	}

	got, err := ReadEvents(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want)+1 {
		t.Fatalf("read %d events, want %d: %+v", len(got), len(want)+1, got)
	}
	for i, w := range want {
		w.At = w.At.UTC().Truncate(time.Microsecond)
		if got[i] != w {
			t.Errorf("event %d = %+v, want %+v", i, got[i], w)
		}
	}
	last := got[len(got)-1]
	if last.At.Before(before.Add(-time.Millisecond)) || last.At.After(time.Now()) || last.At.Location() != time.UTC {
		t.Errorf("zero At written as %v, want now in UTC", last.At)
	}

	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "\n"); n != len(want)+1 {
		t.Errorf("file has %d lines, want one per event:\n%s", n, b)
	}
	if !strings.Contains(string(b), `"at":"2026-03-01T09:00:00.123456Z"`) {
		t.Errorf("time not written in UTC with microseconds:\n%s", b)
	}
}

func TestEventLogConcurrentWrites(t *testing.T) {
	path := filepath.Join(t.TempDir(), EventsFile)
	log, err := NewEventLog(path)
	if err != nil {
		t.Fatal(err)
	}
	const writers, each = 8, 200
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				if err := log.Write(Event{Type: EventNote, ID: w*each + i, What: strings.Repeat("x", 100+i)}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := log.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := ReadEvents(path)
	if err != nil {
		t.Fatal(err)
	}
	var ids []int
	for _, e := range got {
		ids = append(ids, e.ID)
	}
	slices.Sort(ids)
	if len(ids) != writers*each {
		t.Fatalf("read %d events, want %d", len(ids), writers*each)
	}
	for i, id := range ids {
		if id != i {
			t.Fatalf("event ids %v...: missing or repeated %d", ids[max(i-2, 0):i+1], i)
		}
	}
}

func TestReadEventsBadLines(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := `{"at":"2026-03-01T10:00:00Z","type":"note","what":"a"}` + "\n"

	got, err := ReadEvents(write("torn.jsonl", good+"\n"+good+`{"at":"2026-03-01T10:0`))
	if err != nil || len(got) != 2 {
		t.Errorf("torn last line: %d events, %v; want 2, nil", len(got), err)
	}
	got, err = ReadEvents(write("nonl.jsonl", good+strings.TrimSuffix(good, "\n")))
	if err != nil || len(got) != 2 {
		t.Errorf("complete last line without newline: %d events, %v; want 2, nil", len(got), err)
	}
	_, err = ReadEvents(write("bad.jsonl", good+"{oops}\n"+good))
	if err == nil || !strings.Contains(err.Error(), "line 2") || !strings.Contains(err.Error(), "bad.jsonl") {
		t.Errorf("bad middle line: %v, want an error naming the file and line 2", err)
	}
	_, err = ReadEvents(filepath.Join(dir, "missing.jsonl"))
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v, want fs.ErrNotExist", err)
	}
	got, err = ReadEvents(write("empty.jsonl", ""))
	if err != nil || len(got) != 0 {
		t.Errorf("empty file: %v, %v", got, err)
	}
}

func ExampleEventLog() {
	dir, _ := os.MkdirTemp("", "events")
	defer os.RemoveAll(dir)
	log, _ := NewEventLog(filepath.Join(dir, EventsFile))
	start := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	log.Write(Event{At: start, Type: EventFaultStart, ID: 1, What: "kill broker-1"})
	log.Write(Event{At: start.Add(2 * time.Second), Type: EventLeader, Topic: "orders", Partition: 0, Leader: 2, Epoch: 5})
	log.Write(Event{At: start.Add(5 * time.Second), Type: EventFaultEnd, ID: 1})
	log.Close()
	events, _ := ReadEvents(filepath.Join(dir, EventsFile))
	for _, e := range events {
		fmt.Printf("%v %s id=%d what=%q leader=%d\n", e.At.Sub(start), e.Type, e.ID, e.What, e.Leader)
	}
	// Output:
	// 0s fault-start id=1 what="kill broker-1" leader=0
	// 2s leader id=0 what="" leader=2
	// 5s fault-end id=1 what="" leader=0
}
