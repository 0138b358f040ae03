package systest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tapes-dev/tapes/internal/client"
	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/launch"
)

// binDir holds the binaries built once for the whole package.
var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "tapes-systest-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	root, err := moduleRoot()
	if err == nil {
		cmd := exec.Command("go", "build", "-o", dir+string(os.PathSeparator), "./brokerd", "./cluster")
		cmd.Dir = root
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		err = cmd.Run()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "systest: building binaries: %v\n", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	return filepath.Dir(strings.TrimSpace(string(out))), nil
}

// fastBrokerArgs shorten the timings so that failures are detected in
// seconds; the relations ValidateConfig checks still hold.
var fastBrokerArgs = []string{
	"--replica-lag-time-max", "2s",
	"--retention-check-interval", "300ms",
	"--broker-heartbeat-interval", "300ms",
	"--broker-session-timeout", "1500ms",
	"--raft-commit-timeout", "200ms",
	"--log-level", "info",
}

// env is one running test cluster with a client.
type env struct {
	t  *testing.T
	c  *launch.Cluster
	cl *client.Client
}

// startCluster starts n brokers with extra flags and waits until ready.
func startCluster(t *testing.T, n int, extra ...string) *env {
	t.Helper()
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := launch.Start(ctx, launch.Options{
		Dir: dir, Brokers: n, BrokerdPath: filepath.Join(binDir, "brokerd"),
		BrokerArgs: append(slices.Clone(fastBrokerArgs), extra...), StopTimeout: 10 * time.Second,
	})
	if err != nil {
		t.Fatalf("start cluster: %v", err)
	}
	e := &env{t: t, c: c}
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
	e.cl = cl
	return e
}

func dumpLogs(t *testing.T, dir string) {
	logs, _ := filepath.Glob(filepath.Join(dir, "logs", "*.log"))
	for _, l := range logs {
		b, _ := os.ReadFile(l)
		if len(b) > 6000 {
			b = b[len(b)-6000:]
		}
		t.Logf("---- tail of %s ----\n%s", filepath.Base(l), b)
	}
}

// createTopic creates a topic and waits until every partition has a ready
// leader with a full ISR.
func (e *env) createTopic(name string, partitions, rf int32, configs map[string]string) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := e.cl.CreateTopics(ctx, []*tapesv1.TopicSpec{{Name: name, Partitions: partitions, ReplicationFactor: rf, Configs: configs}}, false); err != nil {
		e.t.Fatalf("create topic %s: %v", name, err)
	}
	e.waitFor(30*time.Second, fmt.Sprintf("leaders and full ISR of %s", name), func() bool {
		md, err := e.cl.Metadata(ctx, []string{name}, true)
		if err != nil || len(md.Topics) != 1 || md.Topics[0].Error != nil {
			return false
		}
		for _, p := range md.Topics[0].Partitions {
			if p.HighWatermark < 0 || len(p.Isr) != int(rf) {
				return false
			}
		}
		return true
	})
}

// partition returns the metadata of one partition, with offsets.
func (e *env) partition(topic string, p int32) *tapesv1.PartitionMetadata {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	md, err := e.cl.Metadata(ctx, []string{topic}, true)
	if err != nil {
		e.t.Fatalf("metadata: %v", err)
	}
	return md.Topics[0].Partitions[p]
}

// waitFor polls cond every 100ms until it holds or d passes.
func (e *env) waitFor(d time.Duration, what string, cond func() bool) {
	e.t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			e.t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// readAll reads partition p from its start to its high watermark.
func (e *env) readAll(topic string, p int32) []*tapesv1.Record {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	start, err := e.cl.ListOffsets(ctx, topic, p, -2)
	if err != nil {
		e.t.Fatalf("list offsets: %v", err)
	}
	end, err := e.cl.ListOffsets(ctx, topic, p, -1)
	if err != nil {
		e.t.Fatalf("list offsets: %v", err)
	}
	var out []*tapesv1.Record
	for off := start.Offset; off < end.Offset; {
		resp, err := e.cl.Fetch(ctx, &tapesv1.FetchRequest{Topic: topic, Partition: p, Offset: off, MaxBytes: 1 << 20})
		if err != nil {
			e.t.Fatalf("fetch %s-%d at %d: %v", topic, p, off, err)
		}
		for _, r := range resp.Records {
			if r.Offset >= resp.HighWatermark {
				e.t.Fatalf("fetch returned offset %d at or past the high watermark %d", r.Offset, resp.HighWatermark)
			}
		}
		if len(resp.Records) == 0 {
			e.t.Fatalf("fetch at %d below end %d returned nothing", off, end.Offset)
		}
		out = append(out, resp.Records...)
		off = resp.Records[len(resp.Records)-1].Offset + 1
	}
	return out
}

// brokerName is the launcher's name of broker id.
func brokerName(id int32) string { return fmt.Sprintf("broker-%d", id) }

// records makes n records whose values are prefix-i.
func records(prefix string, from, n int) []*tapesv1.Record {
	out := make([]*tapesv1.Record, n)
	for i := range out {
		out[i] = &tapesv1.Record{Value: []byte(fmt.Sprintf("%s-%06d", prefix, from+i))}
	}
	return out
}

func values(recs []*tapesv1.Record) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = string(r.Value)
	}
	return out
}

// logContains reports whether a broker's log file contains s.
func (e *env) logContains(name, s string) bool {
	p, ok := e.c.Process(name)
	if !ok {
		return false
	}
	b, _ := os.ReadFile(p.Log)
	return bytes.Contains(b, []byte(s))
}
