package systest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/tapes-dev/tapes/internal/eventually"
	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/kerr"
	"github.com/tapes-dev/tapes/internal/testcluster"
)

// partitionDirs returns, per broker, the names of its partition
// directories whose topic is topic.
func partitionDirs(t *testing.T, e *testcluster.Env, topic string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, b := range e.Brokers() {
		entries, err := os.ReadDir(filepath.Join(b.DataDir, "partitions"))
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		for _, d := range entries {
			if strings.HasPrefix(d.Name(), topic+"-") {
				out[b.Name] = append(out[b.Name], d.Name())
			}
		}
	}
	return out
}

func metadataSize(t *testing.T, e *testcluster.Env, topic string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	md, err := e.Client.Metadata(ctx, []string{topic}, false)
	if err != nil {
		t.Fatal(err)
	}
	return proto.Size(md)
}

// TestPartitionBudget (issue 15.1): a CreateTopics over the cluster's
// partition budget is POLICY_VIOLATION naming the limit and the count, and
// creates nothing (no metadata, no directory); a topic within it does not
// change another topic's Metadata answer; a.b and a_b collide (15.5).
func TestPartitionBudget(t *testing.T) {
	e := start(t, 3, "--max-partitions-per-broker", "20")
	e.CreateTopic("small", 3, 3, nil) // 9 of the cluster's 60 replicas
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	err := e.Client.CreateTopics(ctx, []*tapesv1.TopicSpec{{Name: "huge", Partitions: 100000, ReplicationFactor: 1}}, false)
	if !kerr.Is(err, kerr.PolicyViolation) || !strings.Contains(err.Error(), "holds 9 of its limit of 60") {
		t.Fatalf("create of 100000 partitions: %v, want POLICY_VIOLATION naming 9 of 60", err)
	}
	md, err := e.Client.Metadata(ctx, []string{"huge"}, false)
	if err != nil {
		t.Fatal(err)
	}
	if !kerr.Is(kerr.FromDetail(md.Topics[0].Error), kerr.UnknownTopicOrPartition) {
		t.Fatalf("refused topic in the metadata: %v", md.Topics[0])
	}
	time.Sleep(2 * time.Second) // a broker that wrongly opened replicas would have by now
	if dirs := partitionDirs(t, e, "huge"); len(dirs) != 0 {
		t.Fatalf("refused topic has directories: %v", dirs)
	}

	before := metadataSize(t, e, "small")
	e.CreateTopic("wide", 45, 1, nil) // 54 of 60; at most 15+3 on a broker
	if after := metadataSize(t, e, "small"); after != before {
		t.Fatalf("Metadata of small is %d bytes beside a 45-partition topic, %d before", after, before)
	}
	// 54 + 9 > 60.
	err = e.Client.CreateTopics(ctx, []*tapesv1.TopicSpec{{Name: "more", Partitions: 3, ReplicationFactor: 3}}, false)
	if !kerr.Is(err, kerr.PolicyViolation) {
		t.Fatalf("create past the budget: %v", err)
	}

	if err := e.Client.DeleteTopics(ctx, []string{"wide"}); err != nil {
		t.Fatal(err)
	}
	e.CreateTopic("a.b", 1, 1, nil)
	err = e.Client.CreateTopics(ctx, []*tapesv1.TopicSpec{{Name: "a_b", Partitions: 1, ReplicationFactor: 1}}, false)
	if !kerr.Is(err, kerr.InvalidTopic) || !strings.Contains(err.Error(), `"a.b"`) {
		t.Fatalf("create a_b beside a.b: %v, want INVALID_TOPIC_EXCEPTION naming a.b", err)
	}
}

// TestCreateThenDeleteLeavesNothing (issue 15.1): a topic with many
// partitions deleted right after its creation: both answer success, no
// broker keeps (or, after a restart, reopens) a directory of it, and a
// broker that finds a directory of a topic the metadata does not have
// removes it on start.
func TestCreateThenDeleteLeavesNothing(t *testing.T) {
	e := start(t, 3)
	e.CreateTopic("orders", 1, 3, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	for round := range 2 {
		name := fmt.Sprintf("burst%d", round)
		if err := e.Client.CreateTopics(ctx, []*tapesv1.TopicSpec{{Name: name, Partitions: 100, ReplicationFactor: 3}}, false); err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
		if err := e.Client.DeleteTopics(ctx, []string{name}); err != nil {
			t.Fatalf("delete %s right after its creation: %v", name, err)
		}
	}
	for _, name := range []string{"burst0", "burst1"} {
		eventually.True(t, 60*time.Second, "no directory of "+name+" on any broker", func() bool {
			return len(partitionDirs(t, e, name)) == 0
		})
	}
	// A directory no metadata names, as a broker down during a delete keeps.
	ghost := filepath.Join(e.Brokers()[0].DataDir, "partitions", "ghost-0@999")
	if err := os.MkdirAll(ghost, 0o755); err != nil {
		t.Fatal(err)
	}
	deletions := func() int { // replicas of burst* a broker had open and deleted
		n := 0
		for _, b := range e.Brokers() {
			log, _ := os.ReadFile(b.Log)
			n += strings.Count(string(log), `deleting replica of a deleted topic" topic=burst`)
		}
		return n
	}
	before := deletions()
	for _, b := range e.Brokers() {
		if err := e.C.Restart(b.Name); err != nil {
			t.Fatal(err)
		}
	}
	e.WaitSettled("orders", 60*time.Second)
	eventually.True(t, 30*time.Second, "the ghost directory removed on start", func() bool {
		_, err := os.Stat(ghost)
		return os.IsNotExist(err)
	})
	for _, name := range []string{"burst0", "burst1"} {
		if dirs := partitionDirs(t, e, name); len(dirs) != 0 {
			t.Fatalf("after a restart, %s has directories again: %v", name, dirs)
		}
	}
	if after := deletions(); after != before {
		t.Fatalf("after a restart, brokers reopened and deleted %d replicas of the deleted topics", after-before)
	}
}

// TestCreateTopicNeedsLiveBrokers (issue 11.1): with one of three brokers
// SIGKILLed, replication factor 3 is INVALID_REPLICATION_FACTOR naming the
// two live brokers, and replication factor 2 places no replica on the dead
// one.
func TestCreateTopicNeedsLiveBrokers(t *testing.T) {
	e := start(t, 3)
	e.CreateTopic("orders", 1, 3, nil)
	killed := time.Now()
	if err := e.C.Kill(testcluster.BrokerName(3)); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 20*time.Second, "broker 3 shown dead", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		md, err := e.Client.Metadata(ctx, []string{"orders"}, false)
		if err != nil {
			return false
		}
		for _, b := range md.Brokers {
			if b.Id == 3 {
				return !b.Alive
			}
		}
		return false
	})
	t.Logf("broker 3 shown dead %v after SIGKILL (session timeout 1.5 s)", time.Since(killed).Round(time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := e.Client.CreateTopics(ctx, []*tapesv1.TopicSpec{{Name: "strict3", Partitions: 1, ReplicationFactor: 3}}, false)
	if !kerr.Is(err, kerr.InvalidReplicationFactor) || !strings.Contains(err.Error(), "larger than the 2 available brokers") {
		t.Fatalf("RF 3 with a broker dead: %v, want INVALID_REPLICATION_FACTOR naming 2 available brokers", err)
	}
	if err := e.Client.CreateTopics(ctx, []*tapesv1.TopicSpec{{Name: "two", Partitions: 4, ReplicationFactor: 2}}, false); err != nil {
		t.Fatal(err)
	}
	md, err := e.Client.Metadata(ctx, []string{"strict3", "two"}, false)
	if err != nil {
		t.Fatal(err)
	}
	if !kerr.Is(kerr.FromDetail(md.Topics[0].Error), kerr.UnknownTopicOrPartition) {
		t.Fatalf("strict3 exists after its refusal: %v", md.Topics[0])
	}
	for _, p := range md.Topics[1].Partitions {
		for _, r := range p.Replicas {
			if r == 3 {
				t.Fatalf("partition %d of two assigned to the dead broker: %v", p.Partition, p.Replicas)
			}
		}
	}
}

// TestStartingBrokerAnswersRetriable (issue 11.2): a broker that cannot
// register (no controller quorum) answers client requests with the
// retriable BROKER_NOT_AVAILABLE saying so, and serves once it registers.
func TestStartingBrokerAnswersRetriable(t *testing.T) {
	e := start(t, 3)
	for _, id := range []int32{1, 2, 3} {
		if err := e.C.Stop(testcluster.BrokerName(id)); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.C.Restart(testcluster.BrokerName(1)); err != nil {
		t.Fatal(err)
	}
	b1, _ := e.C.Process(testcluster.BrokerName(1))
	conn, err := grpc.NewClient(b1.Address, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ask := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := tapesv1.NewBrokerServiceClient(conn).CreateTopics(ctx, &tapesv1.CreateTopicsRequest{Topics: []*tapesv1.TopicSpec{{Name: "t1", Partitions: 1, ReplicationFactor: 3}}})
		if err != nil {
			return kerr.FromStatus(err)
		}
		return kerr.FromDetail(resp.Results[0].Error)
	}
	// The answer while alone, once its gRPC server is up.
	eventually.True(t, 20*time.Second, "broker 1 answering", func() bool {
		err = ask()
		return kerr.CodeOf(err) != ""
	})
	ke, ok := kerr.As(err)
	if !ok || ke.Code() != kerr.BrokerNotAvailable || !ke.Detail.Retriable || !strings.Contains(err.Error(), "not registered") {
		t.Fatalf("broker 1 alone: %v, want retriable BROKER_NOT_AVAILABLE saying it has not registered", err)
	}
	for _, id := range []int32{2, 3} {
		if err := e.C.Restart(testcluster.BrokerName(id)); err != nil {
			t.Fatal(err)
		}
	}
	// While others are still starting the answer may be retriable; once
	// all are up it is success. Nothing on the way is a real refusal.
	eventually.Nil(t, 60*time.Second, "create t1 with all brokers back", func() error {
		err := ask()
		if err != nil && !kerr.CodeOf(err).Retriable() {
			t.Fatalf("create while brokers start: %v (not retriable)", err)
		}
		return err
	})
}
