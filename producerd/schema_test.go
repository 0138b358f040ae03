package main

import (
	"strings"
	"testing"

	"github.com/tapes-dev/tapes/internal/producer"
	"github.com/tapes-dev/tapes/internal/schema"
)

func TestSchemaVersionOutsideTheKnownOnesIsRefused(t *testing.T) {
	for _, v := range []string{"0", "3"} {
		code, stderr := run("--bootstrap-server", "127.0.0.1:1", "--topic", "orders", "--schema-version", v)
		if code != exitUsage || !strings.Contains(stderr, "--schema-version "+v) {
			t.Errorf("--schema-version %s: exit %d, stderr %q", v, code, stderr)
		}
	}
}

// TestRecordsCarryTheirSchemaVersion: with --schema-version 2 the value is
// version 2 (event_id and entity in it) and the header says 2; consumerd's
// decoder reads both versions back to the record's event id.
func TestRecordsCarryTheirSchemaVersion(t *testing.T) {
	for _, v := range schema.Known {
		o, err := parseDaemon([]string{"--topic", "orders", "--schema-version", string(rune('0' + v)), "--value-size", "120"}, &strings.Builder{})
		if err != nil {
			t.Fatal(err)
		}
		d := &daemon{o: o, idPrefix: "producer-1-ab-"}
		r := d.makeRecord(7, 3, noSalt, 0)
		var header, id string
		for _, h := range r.Headers {
			switch h.Key {
			case producer.SchemaVersionHeader:
				header = string(h.Value)
			case producer.EventIDHeader:
				id = string(h.Value)
			}
		}
		got, err := schema.Decode(header, r.Value)
		if err != nil {
			t.Fatalf("version %d: %v", v, err)
		}
		want := schema.Order{Version: v, EventID: id}
		if v == 2 {
			want.Entity = "key-3"
		}
		if got != want || len(r.Value) != 120 {
			t.Errorf("version %d: header %q, %d bytes, decoded %+v, want %+v", v, header, len(r.Value), got, want)
		}
	}
}
