package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestBadCommandLinesAreRefusedBeforeJoining(t *testing.T) {
	// An unreachable cluster: nothing here may get as far as dialing, and
	// no sink or history file may be created.
	dir := t.TempDir()
	base := []string{"--bootstrap-server", "127.0.0.1:1", "--group", "demo", "--topic", "orders",
		"--sink", filepath.Join(dir, "s.db"), "--history", filepath.Join(dir, "h.jsonl")}
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--commit", "sometimes"}, `--commit "sometimes": want after, before or auto`},
		{[]string{"--assignor", "roundrobin"}, `--assignor "roundrobin"`},
		{[]string{"--records-per-poll", "0"}, "--records-per-poll 0"},
		{[]string{"--from", "middle"}, `--from "middle"`},
		{[]string{"--isolation-level", "serializable"}, `--isolation-level "serializable": want read_committed or read_uncommitted`},
		{[]string{"--crash-after-records", "-1"}, "--crash-after-records -1"},
		{[]string{"--process-time", "-1s"}, "--process-time -1s"},
		{[]string{"--session-timeout", "1s", "--heartbeat-interval", "2s"}, "--heartbeat-interval 2s"},
		{[]string{"--auto-commit-interval", "0s"}, "--auto-commit-interval 0s"},
		{[]string{"--eos"}, "--eos needs --output-topic T"},
		{[]string{"--output-topic", "out"}, "need --eos"},
		{[]string{"--eos", "--output-topic", "orders"}, "--output-topic orders: cannot be --topic itself"},
		{[]string{"--eos", "--output-topic", "out", "--commit", "before"}, "--eos --commit before"},
		{[]string{"--eos", "--output-topic", "out", "--isolation-level", "read_uncommitted"}, "--eos --isolation-level read_uncommitted"},
		{[]string{"--eos", "--output-topic", "out", "--transaction-timeout", "0s"}, "--transaction-timeout 0s"},
		{[]string{"--eos", "--output-topic", "out"}, "--eos writes its results to --output-topic: --sink"},
		{[]string{"--no-such-flag"}, "flag provided but not defined: -no-such-flag"},
		{[]string{"extra"}, `unexpected argument "extra"`},
	}
	for _, c := range cases {
		var out, errb bytes.Buffer
		err := run(context.Background(), append(append([]string{}, base...), c.args...), &out, &errb)
		var ue *usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: err %v; want a usage error with %q", c.args, err, c.want)
		}
	}
	for _, args := range [][]string{
		{"--bootstrap-server", "127.0.0.1:1", "--topic", "orders"},
		{"--bootstrap-server", "127.0.0.1:1", "--group", "demo"},
		{"--bootstrap-server", "127.0.0.1:1", "--group", "demo", "--topic", "orders", "--idempotent-sink"},
	} {
		var out, errb bytes.Buffer
		var ue *usageError
		if err := run(context.Background(), args, &out, &errb); !errors.As(err, &ue) {
			t.Errorf("%v: err %v; want a usage error", args, err)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("a refused command line left files behind: %v", entries)
	}
}

func TestHelpExplainsEveryFlag(t *testing.T) {
	var out, errb bytes.Buffer
	if err := run(context.Background(), []string{"--help"}, &out, &errb); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("--help: %v", err)
	}
	for _, want := range []string{"-group", "-topic", "-assignor", "-records-per-poll", "-commit", "-auto-commit-interval", "-process-time",
		"-sink", "-idempotent-sink", "-from", "-history", "-crash-after-records", "-control-listen", "-session-timeout", "-isolation-level", "-eos", "-output-topic", "-transactional-id", "-sms-url", "-txn-history", `"event_id"`} {
		if !strings.Contains(errb.String(), want) {
			t.Errorf("--help does not mention %s", want)
		}
	}
}
