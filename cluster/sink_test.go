package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/tapes-dev/tapes/internal/sink"
)

// runSink runs `cluster sink ARGS`.
func runSink(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := &sinkCommand{stdout: &out, stderr: &errOut}
	err := cmd.Run(cmdCtx(t), args)
	return out.String(), err
}

// sinkFixture builds a sink file and two producer histories: p-a-0..3 and
// p-b-0..1 acknowledged, p-a-3 never applied, p-a-1 applied twice (once
// after p-a-2: out of key order).
func sinkFixture(t *testing.T) (db, histA, histB string) {
	t.Helper()
	dir := t.TempDir()
	db = filepath.Join(dir, "sink.db")
	s, err := sink.Open(db, sink.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i, id := range []string{"p-a-0", "p-a-1", "p-b-0", "p-a-2", "p-a-1", "p-b-1"} {
		e := sink.Effect{Consumer: "consumer-1", Generation: 1, Topic: "orders", Offset: int64(i), EventID: id, Key: "key-1"}
		if _, err := s.Apply(cmdCtx(t), e); err != nil {
			t.Fatal(err)
		}
	}
	histA, histB = filepath.Join(dir, "a.jsonl"), filepath.Join(dir, "b.jsonl")
	line := func(id, status string) string {
		return `{"event_id":"` + id + `","key":"key-1","value":"v","partition":0,"offset":0,"acks":"all","status":"` + status +
			`","error":null,"attempts":1,"sent_at":"2026-01-01T00:00:00.000000Z","acked_at":null}` + "\n"
	}
	if err := os.WriteFile(histA, []byte(line("p-a-0", "ok")+line("p-a-1", "ok")+line("p-a-2", "ok")+line("p-a-3", "ok")+line("p-a-4", "error")), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(histB, []byte(line("p-b-0", "ok")+line("p-b-1", "ok")), 0o644); err != nil {
		t.Fatal(err)
	}
	return db, histA, histB
}

func TestSinkStats(t *testing.T) {
	db, histA, histB := sinkFixture(t)
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"histories comma-separated", []string{"stats", db, "--history", histA + "," + histB},
			"Delivered        5\nDuplicates       1\nNever processed  1\nOut of key order 1\nTotal lag        -\nActive consumers -\nGeneration       -\n"},
		{"histories repeated, flag first", []string{"stats", "--history", histA, db, "--history", histB},
			"Delivered        5\nDuplicates       1\nNever processed  1\nOut of key order 1\nTotal lag        -\nActive consumers -\nGeneration       -\n"},
		{"no history", []string{"stats", db},
			"Delivered        5\nDuplicates       1\nNever processed  -\nOut of key order 1\nTotal lag        -\nActive consumers -\nGeneration       -\n"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, err := runSink(t, c.args...)
			if err != nil || out != c.want {
				t.Fatalf("sink %q =\n%s(err %v)\nwant\n%s", c.args, out, err, c.want)
			}
		})
	}
}

func TestSinkStatsJSON(t *testing.T) {
	db, histA, histB := sinkFixture(t)
	out, err := runSink(t, "stats", db, "--history", histA+","+histB, "--json")
	if err != nil {
		t.Fatal(err)
	}
	var got sink.Stats
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v in\n%s", err, out)
	}
	want := sink.Stats{Delivered: 5, Effects: 6, Duplicates: 1, Acked: 6, NeverProcessed: 1, OutOfKeyOrder: 1,
		DuplicateIDs: []string{"p-a-1"}, NeverProcessedIDs: []string{"p-a-3"}, OutOfKeyOrderIDs: []string{"p-a-1"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("--json = %+v, want %+v", got, want)
	}
	for _, field := range []string{`"total_lag": -1`, `"active_consumers": -1`, `"generation": -1`} {
		if !strings.Contains(out, field) {
			t.Fatalf("--json without --group lacks %s:\n%s", field, out)
		}
	}
	if strings.Contains(out, `"group"`) {
		t.Fatalf("--json without --group names a group:\n%s", out)
	}
	out, err = runSink(t, "stats", db, "--json")
	if err != nil || !strings.Contains(out, `"never_processed": -1`) {
		t.Fatalf("--json without history = %s, %v", out, err)
	}
}

func TestSinkStatsMistakes(t *testing.T) {
	db, _, _ := sinkFixture(t)
	missing := filepath.Join(t.TempDir(), "nope.db")
	_, err := runSink(t, "stats", missing)
	if err == nil || errors.Is(err, errUsage) || !strings.Contains(err.Error(), missing) {
		t.Fatalf("stats of a missing file: %v; want an error naming %s", err, missing)
	}
	if m, _ := filepath.Glob(missing + "*"); len(m) != 0 {
		t.Fatalf("stats of a missing file created %q", m)
	}
	if _, err := runSink(t, "stats", db, "--history", filepath.Join(t.TempDir(), "nohist.jsonl")); err == nil || !strings.Contains(err.Error(), "nohist.jsonl") {
		t.Fatalf("stats with a missing history: %v", err)
	}
	for _, args := range [][]string{{}, {"frobnicate"}, {"stats"}, {"stats", db, db}, {"stats", db, "--bogus"},
		{"stats", db, "--group", "demo"}, {"stats", db, "--topic", "orders"}} {
		if _, err := runSink(t, args...); !errors.Is(err, errUsage) {
			t.Errorf("sink %q = %v, want a usage error", args, err)
		}
	}
	if out, err := runSink(t, "--help"); err != nil || out != "" {
		t.Errorf("sink --help = %q, %v", out, err)
	}
}
