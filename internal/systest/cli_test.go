package systest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tapes-dev/tapes/internal/partitioner"
	"github.com/tapes-dev/tapes/internal/testcluster"
)

// cli runs the built `cluster` binary against e's cluster (--dir) and
// returns stdout; stderr is attached to failures.
func cli(t *testing.T, e *testcluster.Env, stdin string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, "cluster"), append(args, "--dir", e.Dir)...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		err = fmt.Errorf("cluster %s: %w: %s", strings.Join(args, " "), err, errb.String())
	}
	return out.String(), err
}

// TestCLIRoundTrip drives the operator CLI as a person would: create a
// topic, produce keyed and keyless lines, read everything back as JSON with
// --until-end, describe the topic in kafka-topics' shape, delete it.
func TestCLIRoundTrip(t *testing.T) {
	e := start(t, 3)
	if out, err := cli(t, e, "", "topics", "create", "orders", "--partitions", "3", "--replication-factor", "3", "--config", "min.insync.replicas=2"); err != nil || !strings.Contains(out, "Created topic orders.") {
		t.Fatalf("create: %q, %v", out, err)
	}
	e.WaitSettled("orders", 60*time.Second)
	var keyed, keyless []string
	for i := 0; i < 20; i++ {
		keyed = append(keyed, fmt.Sprintf("alice-%d", i))
		keyless = append(keyless, fmt.Sprintf("anon-%d", i))
	}
	if _, err := cli(t, e, strings.Join(keyed, "\n")+"\n", "produce", "--topic", "orders", "--key", "alice", "--acks", "all"); err != nil {
		t.Fatal(err)
	}
	if _, err := cli(t, e, strings.Join(keyless, "\n")+"\n", "produce", "--topic", "orders", "--acks", "1"); err != nil {
		t.Fatal(err)
	}
	out, err := cli(t, e, "", "consume", "--topic", "orders", "--from-beginning", "--until-end", "--format", "json")
	if err != nil {
		t.Fatal(err)
	}
	alicePartition := partitioner.ForKey([]byte("alice"), 3)
	var aliceSeen []string
	count := 0
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var l consumedRecord
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("not a JSON record line: %q: %v", sc.Text(), err)
		}
		count++
		if l.Key != nil && *l.Key == "alice" {
			if l.Partition != alicePartition {
				t.Errorf("key alice on partition %d, Kafka's partitioner says %d", l.Partition, alicePartition)
			}
			aliceSeen = append(aliceSeen, l.Value)
		} else if l.Key != nil {
			t.Errorf("unexpected key %q", *l.Key)
		}
		if l.Timestamp <= 0 {
			t.Errorf("record without timestamp: %q", sc.Text())
		}
	}
	if count != 40 {
		t.Fatalf("consume --until-end printed %d records, want 40:\n%s", count, out)
	}
	if strings.Join(aliceSeen, ",") != strings.Join(keyed, ",") {
		t.Fatalf("keyed records out of order: %v", aliceSeen)
	}
	desc, err := cli(t, e, "", "topics", "describe", "orders")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Topic: orders", "PartitionCount: 3", "ReplicationFactor: 3", "min.insync.replicas=2", "Partition: 2", "Leader:", "Replicas:", "Isr:", "Epoch:", "LogStart: 0", "HighWatermark:"} {
		if !strings.Contains(desc, want) {
			t.Errorf("describe lacks %q:\n%s", want, desc)
		}
	}
	if _, err := cli(t, e, "", "topics", "create", "bad name", "--partitions", "1", "--replication-factor", "1"); err == nil || !strings.Contains(err.Error(), "INVALID_TOPIC_EXCEPTION") {
		t.Errorf("bad topic name: %v", err)
	}
	if _, err := cli(t, e, "", "topics", "delete", "orders"); err != nil {
		t.Fatal(err)
	}
	if list, _ := cli(t, e, "", "topics", "list"); strings.Contains(list, "orders") {
		t.Errorf("orders still listed after delete: %q", list)
	}
	// Every broker removes the deleted topic's replicas from disk.
	e.WaitFor(20*time.Second, "replica directories of the deleted topic to disappear", func() bool {
		for _, b := range e.Brokers() {
			if m, _ := filepath.Glob(filepath.Join(b.DataDir, "partitions", "orders-*")); len(m) > 0 {
				return false
			}
		}
		return true
	})
}

// TestLeadersBalanced: six partitions on three brokers end up with two
// leaders per broker (the preferred replicas), whatever the elections did.
func TestLeadersBalanced(t *testing.T) {
	e := start(t, 3)
	e.CreateTopic("six", 6, 3, nil)
	perBroker := map[int32]int{}
	for p := int32(0); p < 6; p++ {
		perBroker[e.Partition("six", p).LeaderId]++
	}
	for id := int32(1); id <= 3; id++ {
		if perBroker[id] != 2 {
			t.Fatalf("leaders per broker %v, want 2 each", perBroker)
		}
	}
}
