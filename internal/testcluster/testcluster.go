package testcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tapes-dev/tapes/internal/client"
	"github.com/tapes-dev/tapes/internal/eventually"
	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/launch"
)

// Build compiles brokerd, cluster, producerd, consumerd and chaos from this module into a temporary
// directory and returns it with a function that removes it. Tests call it
// once, from TestMain.
func Build() (binDir string, cleanup func(), err error) {
	dir, err := os.MkdirTemp("", "tapes-testcluster-bin-")
	if err != nil {
		return "", nil, err
	}
	cleanup = func() { os.RemoveAll(dir) }
	root, err := moduleRoot()
	if err == nil {
		cmd := exec.Command("go", "build", "-o", dir+string(os.PathSeparator), "./brokerd", "./cluster", "./producerd", "./consumerd", "./chaos")
		cmd.Dir = root
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		err = cmd.Run()
	}
	if err != nil {
		cleanup()
		return "", nil, fmt.Errorf("building binaries: %w", err)
	}
	return dir, cleanup, nil
}

// FastBrokerArgs shorten the timings so that failures are detected in
// seconds; the relations ValidateConfig checks still hold. The Raft
// timeouts are half of brokerd's defaults (which are long for an idle
// cluster's CPU, ARCHITECTURE.md "Idle cost"): a paused or cut-off leader is
// found in 0.5-1 s, and a new partition's first election comes as soon.
// Flag and value alternate (chaos_cli_test passes them pairwise).
var FastBrokerArgs = []string{
	"--raft-heartbeat-timeout", "500ms",
	"--raft-election-timeout", "500ms",
	"--raft-leader-lease", "500ms",
	"--raft-heartbeat-linger", "60ms",
	"--replica-lag-time-max", "2s",
	"--retention-check-interval", "300ms",
	"--broker-heartbeat-interval", "300ms",
	"--broker-session-timeout", "1500ms",
	"--raft-commit-timeout", "200ms",
	"--preferred-leader-delay", "1s",
	"--log-level", "info",
}

// Env is one running test cluster with a client.
type Env struct {
	T testing.TB
	// C is the launcher of the broker processes (Kill, Stop, Pause, Restart).
	C *launch.Cluster
	// Client is connected to every broker.
	Client *client.Client
	// Dir is the cluster directory (cluster.json, logs/, broker data).
	Dir string
}

// Start starts n brokers from binDir (see Build) with the given brokerd
// flags (tests pass FastBrokerArgs first), waits until the cluster is ready, and registers
// cleanup that stops every process (and prints the brokers' log tails when
// the test failed).
func Start(t testing.TB, binDir string, n int, args ...string) *Env {
	t.Helper()
	return start(t, binDir, n, false, args)
}

// StartLinked is Start with a fault-injection link on every ordered pair of
// brokers (launch.Options.Links): e.C.SetLink cuts, delays and heals them.
// The test's own client dials the brokers directly.
func StartLinked(t testing.TB, binDir string, n int, args ...string) *Env {
	t.Helper()
	return start(t, binDir, n, true, args)
}

func start(t testing.TB, binDir string, n int, links bool, args []string) *Env {
	t.Helper()
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := launch.Start(ctx, launch.Options{
		Dir: dir, Brokers: n, BrokerdPath: filepath.Join(binDir, "brokerd"),
		BrokerArgs: slices.Clone(args), StopTimeout: 10 * time.Second, Links: links,
	})
	if err != nil {
		t.Fatalf("start cluster: %v", err)
	}
	e := &Env{T: t, C: c, Dir: dir}
	t.Cleanup(func() {
		if t.Failed() {
			dumpLogs(t, dir)
		}
		if err := c.Close(); err != nil {
			t.Errorf("close cluster: %v", err)
		}
	})
	if err := c.WaitReady(ctx); err != nil {
		t.Fatalf("cluster not ready: %v", err)
	}
	cl, err := client.New(client.Config{Bootstrap: c.Bootstrap(), RequestTimeout: 5 * time.Second, MetadataMaxAge: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	e.Client = cl
	return e
}

func dumpLogs(t testing.TB, dir string) {
	logs, _ := filepath.Glob(filepath.Join(dir, "logs", "*.log"))
	for _, l := range logs {
		b, _ := os.ReadFile(l)
		if len(b) > 6000 {
			b = b[len(b)-6000:]
		}
		t.Logf("---- tail of %s ----\n%s", filepath.Base(l), b)
	}
}

// CreateTopic creates a topic and waits until every partition is led by its
// preferred replica (brokers hand leadership to it) with a full ISR, so that
// a test starts from a settled cluster.
func (e *Env) CreateTopic(name string, partitions, rf int32, configs map[string]string) {
	e.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := e.Client.CreateTopics(ctx, []*tapesv1.TopicSpec{{Name: name, Partitions: partitions, ReplicationFactor: rf, Configs: configs}}, false); err != nil {
		e.T.Fatalf("create topic %s: %v", name, err)
	}
	e.WaitSettled(name, 60*time.Second)
}

// WaitSettled waits until every partition of topic is led by its preferred
// replica with every replica in the ISR.
func (e *Env) WaitSettled(topic string, d time.Duration) {
	e.T.Helper()
	e.WaitFor(d, fmt.Sprintf("preferred leaders and full ISR of %s", topic), func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		md, err := e.Client.Metadata(ctx, []string{topic}, true)
		if err != nil || len(md.Topics) != 1 || md.Topics[0].Error != nil {
			return false
		}
		for _, p := range md.Topics[0].Partitions {
			if p.HighWatermark < 0 || len(p.Isr) != len(p.Replicas) || p.LeaderId != p.Replicas[0] {
				return false
			}
		}
		return true
	})
}

// partition returns the metadata of one partition, with offsets.
func (e *Env) Partition(topic string, p int32) *tapesv1.PartitionMetadata {
	e.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	md, err := e.Client.Metadata(ctx, []string{topic}, true)
	if err != nil {
		e.T.Fatalf("metadata: %v", err)
	}
	return md.Topics[0].Partitions[p]
}

// WaitFor polls cond every 100ms until it holds or d passes, and fails the
// test if it never does.
func (e *Env) WaitFor(d time.Duration, what string, cond func() bool) {
	e.T.Helper()
	err := eventually.WaitEvery(d, 100*time.Millisecond, func() error {
		if cond() {
			return nil
		}
		return errors.New("condition not met")
	})
	if err != nil {
		e.T.Fatalf("timed out after %v waiting for %s", d, what)
	}
}

// readAll reads partition p from its start to its high watermark.
func (e *Env) ReadAll(topic string, p int32) []*tapesv1.Record {
	e.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	start, err := e.Client.ListOffsets(ctx, topic, p, -2)
	if err != nil {
		e.T.Fatalf("list offsets: %v", err)
	}
	end, err := e.Client.ListOffsets(ctx, topic, p, -1)
	if err != nil {
		e.T.Fatalf("list offsets: %v", err)
	}
	var out []*tapesv1.Record
	for off := start.Offset; off < end.Offset; {
		resp, err := e.Client.Fetch(ctx, &tapesv1.FetchRequest{Topic: topic, Partition: p, Offset: off, MaxBytes: 1 << 20})
		if err != nil {
			e.T.Fatalf("fetch %s-%d at %d: %v", topic, p, off, err)
		}
		for _, r := range resp.Records {
			if r.Offset >= resp.HighWatermark {
				e.T.Fatalf("fetch returned offset %d at or past the high watermark %d", r.Offset, resp.HighWatermark)
			}
		}
		next := client.NextOffset(resp, off)
		if next == off {
			e.T.Fatalf("fetch at %d below end %d returned nothing", off, end.Offset)
		}
		out = append(out, resp.Records...)
		off = next
	}
	return out
}

// brokerName is the launcher's name of broker id.
func BrokerName(id int32) string { return fmt.Sprintf("broker-%d", id) }

// records makes n records whose values are prefix-i.
func Records(prefix string, from, n int) []*tapesv1.Record {
	out := make([]*tapesv1.Record, n)
	for i := range out {
		out[i] = &tapesv1.Record{Value: []byte(fmt.Sprintf("%s-%06d", prefix, from+i))}
	}
	return out
}

func Values(recs []*tapesv1.Record) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = string(r.Value)
	}
	return out
}

// logContains reports whether a broker's log file contains s.
func (e *Env) LogContains(name, s string) bool {
	p, ok := e.C.Process(name)
	if !ok {
		return false
	}
	b, _ := os.ReadFile(p.Log)
	return bytes.Contains(b, []byte(s))
}

// produceN writes n records in batches of 50 with acks=all and fails the
// test on any error.
func (e *Env) ProduceN(topic string, p int32, prefix string, n int) {
	e.T.Helper()
	for i := 0; i < n; i += 50 {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		_, err := e.Client.Produce(ctx, &tapesv1.ProduceRequest{Topic: topic, Partition: p, Acks: -1, Records: Records(prefix, i, min(50, n-i))})
		cancel()
		if err != nil {
			e.T.Fatalf("produce %s at %d: %v", prefix, i, err)
		}
	}
}

// followerOf returns a replica of topic/p that is not its leader.
func (e *Env) FollowerOf(topic string, p int32) (leader, follower int32) {
	pm := e.Partition(topic, p)
	for _, r := range pm.Replicas {
		if r != pm.LeaderId {
			return pm.LeaderId, r
		}
	}
	e.T.Fatalf("%s-%d has no follower", topic, p)
	return 0, 0
}

// waitISR waits until the ISR of topic/p equals want (as sets).
func (e *Env) WaitISR(topic string, p int32, want []int32, d time.Duration) {
	e.T.Helper()
	want = slices.Clone(want)
	slices.Sort(want)
	e.WaitFor(d, "ISR to become "+fmtIDs(want), func() bool {
		isr := slices.Clone(e.Partition(topic, p).Isr)
		slices.Sort(isr)
		return slices.Equal(isr, want)
	})
}

// assertReplicasIdentical waits until every running replica of topic/p has
// applied the leader's high watermark, then compares their logs record by
// record through each broker's own copy (DescribeReplicas for the bounds,
// the files after a clean stop for the bytes).
func (e *Env) AssertReplicasIdentical(topic string, p int32, skip int32) {
	e.T.Helper()
	hw := e.Partition(topic, p).HighWatermark
	e.WaitFor(20*time.Second, fmt.Sprintf("replicas of %s-%d to reach %d", topic, p, hw), func() bool {
		return e.EveryReplica(topic, p, skip, func(r *tapesv1.ReplicaStatus) bool { return r.HighWatermark >= hw })
	})
	e.CompareLogFiles(topic, p, skip, hw)
}

// EveryReplica reports whether every running broker other than skip (0:
// none) answers DescribeReplicas and each replica of topic/p it holds
// (of every partition of topic when p < 0) satisfies cond.
func (e *Env) EveryReplica(topic string, p int32, skip int32, cond func(*tapesv1.ReplicaStatus) bool) bool {
	for _, b := range e.Brokers() {
		if b.ID == skip || !e.C.Running(b.Name) {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		resp, err := e.Client.DescribeReplicas(ctx, b.ID)
		cancel()
		if err != nil {
			return false
		}
		for _, r := range resp.Replicas {
			if r.Topic == topic && (p < 0 || r.Partition == p) && !cond(r) {
				return false
			}
		}
	}
	return true
}

func Others(all []int32, drop int32) []int32 {
	var out []int32
	for _, id := range all {
		if id != drop {
			out = append(out, id)
		}
	}
	return out
}

func fmtIDs(ids []int32) string {
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = fmt.Sprint(id)
	}
	return "[" + strings.Join(parts, ",") + "]"
}

func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	return filepath.Dir(strings.TrimSpace(string(out))), nil
}

// ServedURL returns the URL broker name last logged as serving what
// ("metrics" for --metrics-listen, "pprof" for --pprof-listen; give either
// as 127.0.0.1:0 and the broker logs the port it got), waiting for the line
// up to 10 s. The last line counts: a restarted broker logs a new one.
func (e *Env) ServedURL(name, what string) string {
	e.T.Helper()
	re := regexp.MustCompile(`"serving ` + regexp.QuoteMeta(what) + `" url=(\S+)`)
	p, ok := e.C.Process(name)
	if !ok {
		e.T.Fatalf("no process %s", name)
	}
	var url string
	e.WaitFor(10*time.Second, "the "+what+" address in "+name+"'s log", func() bool {
		b, _ := os.ReadFile(p.Log)
		m := re.FindAllSubmatch(b, -1)
		if len(m) > 0 {
			url = string(m[len(m)-1][1])
		}
		return len(m) > 0
	})
	return url
}

// KafkaBootstrap returns the brokers' Kafka listeners (HOST:PORT) in id
// order, as Kafka clients' bootstrap.servers takes them.
func (e *Env) KafkaBootstrap() []string { return e.C.KafkaBootstrap() }

// KafkaAddress returns broker id's Kafka listener (HOST:PORT).
func (e *Env) KafkaAddress(id int32) string {
	e.T.Helper()
	p, ok := e.C.Process(BrokerName(id))
	if !ok || p.KafkaAddress == "" {
		e.T.Fatalf("broker %d has no Kafka address (%+v)", id, p)
	}
	return p.KafkaAddress
}
