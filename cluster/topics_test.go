package main

import (
	"bytes"
	"errors"
	"flag"
	"strings"
	"testing"

	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/kerr"
)

// runTopics runs `cluster topics ARGS` against addr.
func runTopics(t *testing.T, addr string, args ...string) (string, string, error) {
	t.Helper()
	return runTopicsFlags(t, append(args, "--bootstrap-server", addr)...)
}

// runTopicsFlags runs `cluster topics ARGS` and returns stdout and stderr.
func runTopicsFlags(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := &topicsCommand{stdout: &out, stderr: &errOut}
	err := cmd.Run(cmdCtx(t), args)
	return out.String(), errOut.String(), err
}

func TestTopicsCreateListDescribeDelete(t *testing.T) {
	b := newMemBroker(t)
	b.addTopic("__consumer_offsets", 1, 1, nil)

	out, _, err := runTopics(t, b.addr, "create", "orders", "--partitions", "2", "--replication-factor", "3",
		"--config", "min.insync.replicas=2", "--config", "retention.ms=60000")
	if err != nil || out != "Created topic orders.\n" {
		t.Fatalf("create = %q, %v", out, err)
	}
	if _, _, err := runTopics(t, b.addr, "create", "orders", "--partitions", "2", "--replication-factor", "3"); !kerr.Is(err, kerr.TopicAlreadyExists) {
		t.Fatalf("second create = %v, want TOPIC_ALREADY_EXISTS", err)
	}
	if out, _, err := runTopics(t, b.addr, "create", "orders", "--partitions", "2", "--replication-factor", "3", "--if-not-exists"); err != nil || out != "" {
		t.Fatalf("create --if-not-exists = %q, %v", out, err)
	}
	if out, _, err := runTopics(t, b.addr, "create", "dry", "--partitions", "1", "--replication-factor", "1", "--validate-only"); err != nil || out != "Topic dry is valid.\n" {
		t.Fatalf("create --validate-only = %q, %v", out, err)
	}

	out, _, err = runTopics(t, b.addr, "list")
	if err != nil || out != "__consumer_offsets\norders\n" {
		t.Fatalf("list = %q, %v", out, err)
	}

	b.append("orders", 1, &tapesv1.Record{Value: []byte("x")}, &tapesv1.Record{Value: []byte("y")})
	out, _, err = runTopics(t, b.addr, "describe", "orders")
	want := "Topic: orders  TopicId: 2  PartitionCount: 2  ReplicationFactor: 3  Configs: min.insync.replicas=2,retention.ms=60000\n" +
		"  Topic: orders  Partition: 0  Leader: 1  Replicas: 1,2,3  Isr: 1  Epoch: 3  LogStart: 0  HighWatermark: 0\n" +
		"  Topic: orders  Partition: 1  Leader: 1  Replicas: 1,2,3  Isr: 1  Epoch: 3  LogStart: 0  HighWatermark: 2\n"
	if err != nil || out != want {
		t.Fatalf("describe =\n%s(err %v)\nwant\n%s", out, err, want)
	}
	out, _, err = runTopics(t, b.addr, "describe")
	if err != nil || !strings.HasPrefix(out, "Topic: __consumer_offsets  TopicId: 1  PartitionCount: 1  ReplicationFactor: 1  Configs: \n") || !strings.HasSuffix(out, want) {
		t.Fatalf("describe (all) =\n%s(err %v)", out, err)
	}

	out, _, err = runTopics(t, b.addr, "delete", "orders", "ghost")
	if !kerr.Is(err, kerr.UnknownTopicOrPartition) || !strings.Contains(err.Error(), `"ghost"`) || out != "Deleted topic orders.\n" {
		t.Fatalf("delete orders ghost = %q, %v; want orders deleted and ghost UNKNOWN_TOPIC_OR_PARTITION", out, err)
	}
	if _, _, err := runTopics(t, b.addr, "describe", "orders"); !kerr.Is(err, kerr.UnknownTopicOrPartition) {
		t.Fatalf("describe deleted topic = %v", err)
	}
}

func TestTopicsCommandLineMistakes(t *testing.T) {
	// Nothing listens here: every case must fail before dialing.
	const nowhere = "127.0.0.1:1"
	cases := [][]string{
		{},
		{"frobnicate"},
		{"create"},
		{"create", "a", "b", "--partitions", "1", "--replication-factor", "1"},
		{"create", "a", "--replication-factor", "1"},
		{"create", "a", "--partitions", "0", "--replication-factor", "1"},
		{"create", "a", "--partitions", "1", "--replication-factor", "-2"},
		{"create", "a", "--partitions", "1", "--replication-factor", "1", "--config", "novalue"},
		{"create", "a", "--partitions", "1", "--replication-factor", "1", "--config", "k=1", "--config", "k=2"},
		{"create", "a", "--partitions", "x", "--replication-factor", "1"},
		{"list", "extra"},
		{"delete"},
	}
	for _, args := range cases {
		var out, errOut bytes.Buffer
		err := (&topicsCommand{stdout: &out, stderr: &errOut}).Run(cmdCtx(t), append(args, "--bootstrap-server", nowhere))
		if !errors.Is(err, errUsage) {
			t.Errorf("topics %q = %v, want a usage error", args, err)
		}
	}
	var errOut bytes.Buffer
	err := (&topicsCommand{stdout: &bytes.Buffer{}, stderr: &errOut}).Run(cmdCtx(t), []string{"create", "--help"})
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("create --help = %v", err)
	}
	for _, f := range []string{"-partitions", "-replication-factor", "-config", "-dir", "-bootstrap-server", "-timeout", "-validate-only", "-if-not-exists"} {
		if !strings.Contains(errOut.String(), f) {
			t.Errorf("create --help does not explain %s:\n%s", f, errOut.String())
		}
	}
}
