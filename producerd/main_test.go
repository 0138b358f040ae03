package main

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

// run runs the daemon (or perf, when args start with "perf") in-process and
// returns the exit status and stderr.
func run(args ...string) (int, string) {
	var out, errb bytes.Buffer
	name, f := "producerd", runDaemon
	if len(args) > 0 && args[0] == "perf" {
		name, f, args = "producerd perf", runPerf, args[1:]
	}
	code := exitCode(name, f(args, &out, &errb), &errb)
	return code, errb.String()
}

func TestBadCommandLinesAreRefusedBeforeAnythingIsSent(t *testing.T) {
	// An unreachable cluster: nothing here may get as far as dialing.
	base := []string{"--bootstrap-server", "127.0.0.1:1", "--topic", "orders"}
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--acks", "2"}, `--acks "2"`},
		{[]string{"--rate", "-5"}, `--rate "-5": a rate cannot be negative`},
		{[]string{"--rate", "fast"}, `--rate "fast"`},
		{[]string{"--keys", "maybe"}, `--keys "maybe"`},
		{[]string{"--hot-key-share", "1.5"}, "--hot-key-share 1.5"},
		{[]string{"--value-size", "-1"}, "--value-size -1"},
		{[]string{"--salt-hot-key", "3"}, "--salt-hot-key 3 needs --hot-key-share > 0"},
		{[]string{"--salt-hot-key", "-1", "--hot-key-share", "0.5"}, "--salt-hot-key -1: want 0 (no salting) to 1000"},
		{[]string{"--salt-hot-key", "1001", "--hot-key-share", "0.5"}, "--salt-hot-key 1001"},
		{[]string{"--idempotent", "--acks", "1"}, "--idempotent needs --acks all, not --acks 1"},
		{[]string{"--idempotent", "--max-in-flight", "6"}, "--max-in-flight up to 5, not 6"},
		{[]string{"--max-in-flight", "0"}, "--max-in-flight 0"},
		{[]string{"--count", "-3"}, "--count -3"},
		{[]string{"--linger", "soon"}, `invalid value "soon" for flag -linger`},
		{[]string{"--no-such-flag"}, "flag provided but not defined: -no-such-flag"},
		{[]string{"extra"}, `unexpected argument "extra"`},
		{[]string{"--transactional-id", "t", "--txn-records", "0"}, "--txn-records 0: want more than 0"},
		{[]string{"--transactional-id", "t", "--transaction-timeout", "0"}, "--transaction-timeout 0s: want more than 0"},
	}
	for _, c := range cases {
		code, stderr := run(append(append([]string{}, base...), c.args...)...)
		if code != exitUsage || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", c.args, code, stderr, exitUsage, c.want)
		}
	}
	if code, stderr := run("--bootstrap-server", "127.0.0.1:1"); code != exitUsage || !strings.Contains(stderr, "--topic is required") {
		t.Errorf("no topic: %d %q", code, stderr)
	}
	perf := []struct {
		args []string
		want string
	}{
		{[]string{"perf", "--record-size", "100", "--throughput", "-1"}, "--num-records is required"},
		{[]string{"perf", "--num-records", "10", "--record-size", "100", "--throughput", "0"}, `--throughput "0"`},
		{[]string{"perf", "--num-records", "10", "--record-size", "100", "--throughput", "-2"}, `--throughput "-2"`},
		{[]string{"perf", "--num-records", "10", "--record-size", "0", "--throughput", "-1"}, "--record-size 0"},
		{[]string{"perf", "--num-records", "10", "--record-size", "10", "--throughput", "-1", "--acks", "2"}, `--acks "2"`},
		{[]string{"perf", "--num-records", "10", "--record-size", "10", "--throughput", "-1", "--idempotent", "--acks", "0"}, "--idempotent needs --acks all"},
	}
	for _, c := range perf {
		code, stderr := run(append(c.args, "--bootstrap-server", "127.0.0.1:1")...)
		if code != exitUsage || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", c.args, code, stderr, exitUsage, c.want)
		}
	}
}

func TestHelpExplainsEveryFlag(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"perf", "--help"}} {
		code, stderr := run(args...)
		if code != 0 {
			t.Fatalf("%v: exit %d", args, code)
		}
		for _, line := range strings.Split(stderr, "\n") {
			// Every flag line ("  -name type") is followed by its sentence.
			if strings.HasPrefix(line, "  -") && strings.Contains(line, "\t") {
				t.Errorf("%v: flag without an explanation on its own line: %q", args, line)
			}
		}
		for _, want := range []string{"-acks", "-idempotent", "-bootstrap-server", "-dir", "-linger", "-batch-bytes", "-max-in-flight"} {
			if !strings.Contains(stderr, want) {
				t.Errorf("%v: help lacks %s", args, want)
			}
		}
	}
	_, stderr := run("--help")
	for _, want := range []string{"-count", "-duration", "-rate", "-keys", "-key-space", "-hot-key-share", "-value-size", "-retries", "-delivery-timeout", "-history", "-name", "-control-listen", `"event_id"`} {
		if !strings.Contains(stderr, want) {
			t.Errorf("help lacks %s", want)
		}
	}
}

func TestParseRateAndMilliseconds(t *testing.T) {
	for in, want := range map[string]float64{"1000": 1000, "1000/s": 1000, "2.5/sec": 2.5, "0": 0} {
		if got, err := parseRate(in); err != nil || got != want {
			t.Errorf("parseRate(%q) = %v, %v", in, got, err)
		}
	}
	var d time.Duration
	for in, want := range map[string]time.Duration{"5": 5 * time.Millisecond, "0": 0, "1s": time.Second, "2.5": 2500 * time.Microsecond} {
		if err := (msDuration{&d}).Set(in); err != nil || d != want {
			t.Errorf("linger %q = %v, %v", in, d, err)
		}
	}
}

func TestPacerSpacesRecordsAndDoesNotBurstAfterAStall(t *testing.T) {
	var p pacer
	t0 := time.Unix(100, 0)
	p.reset(100, t0)
	// 100/s: record n is due at n*10ms.
	for n := 0; n < 5; n++ {
		if w := p.next(t0); w != time.Duration(n)*10*time.Millisecond {
			t.Fatalf("record %d: wait %v", n, w)
		}
	}
	// Three seconds late: start over rather than send 300 at once.
	late := t0.Add(3 * time.Second)
	if w := p.next(late); w != 0 {
		t.Fatalf("after a stall: wait %v", w)
	}
	if w := p.next(late); w != 10*time.Millisecond {
		t.Fatalf("after a stall, the next: wait %v", w)
	}
	var unlimited pacer
	unlimited.reset(0, t0)
	if w := unlimited.next(t0); w != 0 {
		t.Fatalf("no limit: wait %v", w)
	}
}

// A setup step that fails still reports a history that could not be
// closed (it was dropped), and keeps its own kind for the exit status.
func TestSetupFailureReportsTheHistoryClose(t *testing.T) {
	diskFull := errors.New("no space left on device")
	err := setupFailed(usagef("--control-listen x: bad"), "/tmp/h.jsonl", func() error { return diskFull })
	var ue *usageError
	if !errors.Is(err, diskFull) || !errors.As(err, &ue) || !strings.Contains(err.Error(), "close --history /tmp/h.jsonl") {
		t.Fatalf("err = %v; want the usage error and the close's error", err)
	}
	if code := exitCode("producerd", err, io.Discard); code != exitUsage {
		t.Fatalf("exit %d, want %d", code, exitUsage)
	}
	plain := errors.New("x")
	if got := setupFailed(plain, "h", func() error { return nil }); got != plain {
		t.Fatalf("a clean close changed the error: %v", got)
	}
}
