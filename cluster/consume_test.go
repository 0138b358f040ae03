package main

import (
	"bytes"
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	poll "github.com/tapes-dev/tapes/internal/eventually"
	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/kerr"
)

func runConsume(t *testing.T, ctx context.Context, addr string, args ...string) (string, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := (&consumeCommand{stdout: &out, stderr: &errOut}).Run(ctx, append(args, "--bootstrap-server", addr))
	return out.String(), errOut.String(), err
}

func rec(key *string, value string, ts int64, headers ...string) *tapesv1.Record {
	r := &tapesv1.Record{Value: []byte(value), TimestampMs: ts}
	if key != nil {
		r.Key = []byte(*key)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		r.Headers = append(r.Headers, &tapesv1.Header{Key: headers[i], Value: []byte(headers[i+1])})
	}
	return r
}

func ptr(s string) *string { return &s }

func TestConsumeJSONUntilEnd(t *testing.T) {
	b := newMemBroker(t)
	b.addTopic("orders", 2, 1, nil)
	b.append("orders", 0,
		rec(ptr("k1"), `say "hi" <b>`, 1000, "event_id", "e1", "schema_version", "2"),
		rec(ptr(""), "empty key", 1001),
		rec(ptr("k\xff"), "\xc3\x28 not UTF-8", 1003, "h", "\xfe", "ok", "v"))
	b.append("orders", 1, rec(nil, "no key", 1002))
	// A producer keeps writing while the consumer reads: records past the
	// high watermark seen at start are not part of --until-end.
	b.mu.Lock()
	b.onFetch = func(req *tapesv1.FetchRequest) {
		if req.Partition == 1 && len(b.records("orders", 1)) < 3 {
			b.append("orders", 1, rec(nil, "late", 2000))
		}
	}
	b.mu.Unlock()

	out, errOut, err := runConsume(t, cmdCtx(t), b.addr, "--topic", "orders", "--from-beginning", "--until-end", "--format", "json")
	if err != nil {
		t.Fatalf("consume: %v (%s)", err, errOut)
	}
	want := []string{
		`{"partition":0,"offset":0,"key":"k1","value":"say \"hi\" <b>","headers":{"event_id":"e1","schema_version":"2"},"timestamp":1000}`,
		`{"partition":0,"offset":1,"key":"","value":"empty key","headers":{},"timestamp":1001}`,
		`{"partition":0,"offset":2,"key":null,"key_b64":"a/8=","value":null,"value_b64":"wyggbm90IFVURi04","headers":{"ok":"v"},"headers_b64":{"h":"/g=="},"timestamp":1003}`,
		`{"partition":1,"offset":0,"key":null,"value":"no key","headers":{},"timestamp":1002}`,
	}
	if got := sortedLines(out); !reflect.DeepEqual(got, want) {
		t.Fatalf("json output:\n%s\nwant (in any partition order):\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if !strings.Contains(out, want[0]+"\n"+want[1]+"\n") {
		t.Errorf("partition 0's records are not in offset order:\n%s", out)
	}
	if errOut != "Processed a total of 4 messages\n" {
		t.Errorf("stderr = %q", errOut)
	}
}

func TestConsumeOffsetsAndLimits(t *testing.T) {
	b := newMemBroker(t)
	b.addTopic("orders", 2, 1, nil)
	for _, v := range []string{"a", "b", "c", "d"} {
		b.append("orders", 0, rec(nil, v, 1))
	}
	b.append("orders", 1, rec(nil, "x", 1))
	ctx := cmdCtx(t)

	out, _, err := runConsume(t, ctx, b.addr, "--topic", "orders", "--partition", "0", "--offset", "2", "--until-end")
	if err != nil || out != "c\nd\n" {
		t.Fatalf("--offset 2 --until-end = %q, %v; want c, d", out, err)
	}
	// Past the end: OFFSET_OUT_OF_RANGE with the partition's bounds, nothing
	// read (it printed "Processed a total of 0 messages" and succeeded).
	out, errOut, err := runConsume(t, ctx, b.addr, "--topic", "orders", "--partition", "0", "--offset", "1000", "--until-end")
	if !kerr.Is(err, kerr.OffsetOutOfRange) || out != "" || errOut != "" ||
		!strings.Contains(err.Error(), "orders-0: --offset 1000: OFFSET_OUT_OF_RANGE: offset 1000 is outside [0, 4]") {
		t.Fatalf("--offset 1000 --until-end = %q, %q, %v; want OFFSET_OUT_OF_RANGE naming [0, 4]", out, errOut, err)
	}
	// Without --from-beginning a consumer starts at the end: nothing to read.
	out, errOut, err = runConsume(t, ctx, b.addr, "--topic", "orders", "--until-end")
	if err != nil || out != "" || errOut != "Processed a total of 0 messages\n" {
		t.Fatalf("latest --until-end = %q, %q, %v; want nothing", out, errOut, err)
	}
	// --max-records ends a consumer that would otherwise tail forever.
	out, _, err = runConsume(t, ctx, b.addr, "--topic", "orders", "--partition", "0", "--from-beginning", "--max-records", "3")
	if err != nil || out != "a\nb\nc\n" {
		t.Fatalf("--max-records 3 = %q, %v", out, err)
	}
	// Records below the log start are gone: the consumer continues at the
	// log start, as auto.offset.reset=earliest would, and says so.
	b.mu.Lock()
	p := b.topics["orders"].parts[0]
	p.records, p.logStart = p.records[2:], 2
	b.mu.Unlock()
	out, errOut, err = runConsume(t, ctx, b.addr, "--topic", "orders", "--partition", "0", "--offset", "0", "--until-end")
	if err != nil || out != "c\nd\n" || !strings.Contains(errOut, "partition 0: offset 0 is out of range [2, 4]; continuing at 2") {
		t.Fatalf("below log start = %q, %q, %v", out, errOut, err)
	}
}

func TestConsumeCtrlCPrintsEverythingFetched(t *testing.T) {
	b := newMemBroker(t)
	b.addTopic("orders", 3, 1, nil)
	for p := int32(0); p < 3; p++ {
		b.append("orders", p, rec(nil, "v", 1), rec(nil, "v", 2))
	}
	ctx, cancel := context.WithCancel(cmdCtx(t))
	var out syncBuffer
	var errOut bytes.Buffer
	done := make(chan error, 1)
	go func() {
		done <- (&consumeCommand{stdout: &out, stderr: &errOut}).Run(ctx,
			[]string{"--topic", "orders", "--from-beginning", "--max-wait", "50ms", "--bootstrap-server", b.addr})
	}()
	// Tailing: the six records appear (flushed while the consumer waits).
	poll.True(t, 20*time.Second, "six records printed while tailing", func() bool { return strings.Count(out.String(), "\n") >= 6 })
	b.append("orders", 2, rec(nil, "new", 3))
	poll.True(t, 20*time.Second, "a record produced while tailing printed", func() bool { return strings.Contains(out.String(), "new\n") })
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("consume after Ctrl-C: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("consume did not return after Ctrl-C")
	}
	if strings.Count(out.String(), "v\n") != 6 || strings.Count(out.String(), "\n") != 7 {
		t.Fatalf("output = %q", out.String())
	}
	if errOut.String() != "Processed a total of 7 messages\n" {
		t.Fatalf("stderr = %q", errOut.String())
	}
}

func TestConsumeCommandLineMistakes(t *testing.T) {
	cases := [][]string{
		{},
		{"--topic", "t", "extra"},
		{"--topic", "t", "--offset", "3"},
		{"--topic", "t", "--partition", "0", "--offset", "-1"},
		{"--topic", "t", "--partition", "0", "--offset", "3", "--from-beginning"},
		{"--topic", "t", "--format", "xml"},
		{"--topic", "t", "--max-records", "-1"},
		{"--topic", "t", "--partition", "-2"},
	}
	for _, args := range cases {
		_, _, err := runConsume(t, cmdCtx(t), "127.0.0.1:1", args...)
		if !errors.Is(err, errUsage) {
			t.Errorf("consume %q = %v, want a usage error", args, err)
		}
	}
}
