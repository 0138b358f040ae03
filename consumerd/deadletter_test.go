package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tapes-dev/tapes/internal/consumer"
	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/producer"
	"github.com/tapes-dev/tapes/internal/schema"
	"github.com/tapes-dev/tapes/internal/sink"
)

func TestWindowAndCopyFlagsAreChecked(t *testing.T) {
	dir := t.TempDir()
	base := []string{"--bootstrap-server", "127.0.0.1:1", "--group", "demo", "--topic", "orders", "--sink", filepath.Join(dir, "s.db")}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--idempotent-sink-window", "100"}, "--idempotent-sink-window 100 needs --idempotent-sink"},
		{[]string{"--idempotent-sink", "--idempotent-sink-window", "0"}, `--idempotent-sink-window "0": want a positive count`},
		{[]string{"--idempotent-sink", "--idempotent-sink-window", "-3s"}, `--idempotent-sink-window "-3s"`},
		{[]string{"--idempotent-sink", "--idempotent-sink-window", "soon"}, `--idempotent-sink-window "soon"`},
		{[]string{"--max-partition-fetch-bytes", "0"}, "--max-partition-fetch-bytes 0"},
		{[]string{"--max-buffered-records", "-1"}, "--max-buffered-records -1"},
		{[]string{"--mirror-to", "orders"}, "--mirror-to orders: cannot be --topic itself"},
		{[]string{"--dead-letter-topic", "orders"}, "--dead-letter-topic orders: cannot be --topic itself"},
	} {
		var out, errb bytes.Buffer
		err := run(context.Background(), append(append([]string{}, base...), c.args...), &out, &errb)
		var ue *usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: err %v; want a usage error with %q", c.args, err, c.want)
		}
	}
	for _, c := range []struct {
		args []string
		want sink.Window
		dlq  string
	}{
		{[]string{"--idempotent-sink", "--idempotent-sink-window", "500"}, sink.Window{Count: 500}, "orders.dlq"},
		{[]string{"--idempotent-sink", "--idempotent-sink-window", "45s", "--dead-letter-topic", "bad"}, sink.Window{Age: 45e9}, "bad"},
	} {
		o, err := parseFlags(append(append([]string{}, base...), c.args...), io.Discard)
		if err != nil || o.window != c.want || o.deadLetterTopic != c.dlq {
			t.Errorf("%v: %+v, %v; want window %+v, dead letters to %s", c.args, o, err, c.want, c.dlq)
		}
	}
}

// fakeCopier keeps what it is sent.
type fakeCopier struct {
	sent [][]*tapesv1.Header
}

func (f *fakeCopier) Send(_ context.Context, _, _ []byte, headers []*tapesv1.Header) error {
	f.sent = append(f.sent, headers)
	return nil
}
func (f *fakeCopier) Flush() error                { return nil }
func (f *fakeCopier) Sent() int64                 { return int64(len(f.sent)) }
func (f *fakeCopier) Close(context.Context) error { return nil }

func header(hs []*tapesv1.Header, key string) string {
	for _, h := range hs {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// TestUnknownSchemaGoesToTheDeadLetterTopic: records of versions 1 and 2
// (and one without a version header) are applied to the sink; a version 3
// record and a version 2 record whose value is not version 2 have no
// effect, are sent to the dead-letter topic with the reason and where
// they were read, and their history lines say so. The mirror copies all.
func TestUnknownSchemaGoesToTheDeadLetterTopic(t *testing.T) {
	dir := t.TempDir()
	o, err := parseFlags([]string{"--group", "g", "--topic", "orders", "--sink", filepath.Join(dir, "s.db"), "--idempotent-sink",
		"--history", filepath.Join(dir, "h.jsonl")}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	s, err := sink.Open(o.sinkPath, sink.Options{Idempotent: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	hist, err := consumer.CreateHistory(o.historyPath)
	if err != nil {
		t.Fatal(err)
	}
	dlq, mirror := &fakeCopier{}, &fakeCopier{}
	d := &daemon{o: o, log: slog.New(slog.DiscardHandler), sink: s, hist: hist, dlq: dlq, mirror: mirror}
	rec := func(off int64, id, version string, value []byte) consumer.Record {
		hs := []*tapesv1.Header{{Key: producer.EventIDHeader, Value: []byte(id)}, {Key: producer.EntityHeader, Value: []byte("key-1")}}
		if version != "" {
			hs = append(hs, &tapesv1.Header{Key: producer.SchemaVersionHeader, Value: []byte(version)})
		}
		return consumer.Record{Topic: "orders", Partition: 0, Record: &tapesv1.Record{Offset: off, Value: value, Headers: hs}}
	}
	v1, _ := schema.Encode(1, schema.Order{EventID: "p-1"}, 20)
	v2, _ := schema.Encode(2, schema.Order{EventID: "p-2", Entity: "key-1"}, 60)
	old, _ := schema.Encode(1, schema.Order{EventID: "p-0"}, 20)
	recs := []consumer.Record{rec(0, "p-0", "", old), rec(1, "p-1", "1", v1), rec(2, "p-2", "2", v2),
		rec(3, "p-3", "3", []byte(`{"event_id":"p-3","amount":{"cents":5}}`)), rec(4, "p-4", "2", v1)}
	for _, r := range recs {
		reason, err := d.apply(context.Background(), 1, r)
		if err != nil {
			t.Fatal(err)
		}
		if err := d.record(1, r, reason); err != nil {
			t.Fatal(err)
		}
	}
	hist.Close()
	counts, err := sink.EffectsPerEvent(context.Background(), o.sinkPath)
	if err != nil {
		t.Fatal(err)
	}
	if len(counts) != 3 || counts["p-0"] != 1 || counts["p-1"] != 1 || counts["p-2"] != 1 {
		t.Errorf("effects %v, want one each of p-0, p-1, p-2", counts)
	}
	if len(dlq.sent) != 2 {
		t.Fatalf("%d dead letters, want 2", len(dlq.sent))
	}
	for i, want := range []struct{ id, reason, source string }{
		{"p-3", "unknown schema version: schema_version 3", "orders/0@3"},
		{"p-4", "value does not match its schema version", "orders/0@4"},
	} {
		hs := dlq.sent[i]
		if header(hs, producer.EventIDHeader) != want.id || !strings.Contains(header(hs, schema.DeadLetterReasonHeader), want.reason) ||
			header(hs, schema.DeadLetterSourceHeader) != want.source {
			t.Errorf("dead letter %d: event_id %q, reason %q, source %q; want %s, %q, %s", i, header(hs, producer.EventIDHeader),
				header(hs, schema.DeadLetterReasonHeader), header(hs, schema.DeadLetterSourceHeader), want.id, want.reason, want.source)
		}
	}
	if len(mirror.sent) != len(recs) {
		t.Errorf("mirrored %d records, want all %d", len(mirror.sent), len(recs))
	}
	lines, err := consumer.ReadHistory(o.historyPath)
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) != len(recs) {
		t.Fatalf("%d history lines, want %d", len(lines), len(recs))
	}
	for i, l := range lines {
		dead := i >= 3
		if (l.DeadLetter == "orders.dlq") != dead || (l.Reason != "") != dead || l.Type != consumer.HistoryRecord {
			t.Errorf("history line %d: %+v (dead letter expected: %v)", i, l, dead)
		}
	}
}

func TestHelpExplainsWindowsAndCopies(t *testing.T) {
	var out, errb bytes.Buffer
	if err := run(context.Background(), []string{"--help"}, &out, &errb); err == nil {
		t.Fatal("--help returned no error")
	}
	for _, want := range []string{"-idempotent-sink-window", "-dead-letter-topic", "TOPIC.dlq", "dead_letter_reason", "-mirror-to",
		"-max-partition-fetch-bytes", "-max-buffered-records", `"dead_letter":TOPIC`} {
		if !strings.Contains(errb.String(), want) {
			t.Errorf("--help does not mention %s", want)
		}
	}
}
