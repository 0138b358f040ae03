package bench

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/testcluster"
)

// perfFinal matches producerd perf's (kafka-producer-perf-test's) final line.
var perfFinal = regexp.MustCompile(`(?m)^(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency, ([\d.]+) ms max latency, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th, (\d+) ms 99\.9th\.$`)

type perfResult struct {
	records              int64
	recsPerSec, mbPerSec float64
	avgMs, maxMs         float64
	p50, p95, p99, p999  int64
	command              string
	elapsed              time.Duration
	cpu                  time.Duration // the producer process's user+system CPU over its life
	stdout, stderr       string
}

// cpuPercent is the producer's CPU as % of one core over its run.
func (r perfResult) cpuPercent() float64 {
	if r.elapsed <= 0 {
		return 0
	}
	return 100 * r.cpu.Seconds() / r.elapsed.Seconds()
}

// runPerf runs `producerd perf` with args against e and parses its final
// line.
func runPerf(t *testing.T, e *testcluster.Env, args ...string) perfResult {
	t.Helper()
	args = append([]string{"perf", "--bootstrap-server", strings.Join(e.C.Bootstrap(), ",")}, args...)
	return runPerfTool(t, "producerd "+strings.Join(args, " "), filepath.Join(binDir, "producerd"), args...)
}

// runPerfTool runs name args (`producerd perf` or Kafka's
// kafka-producer-perf-test, which print the same final line), shown as
// command, and parses its final line.
func runPerfTool(t *testing.T, command, name string, args ...string) perfResult {
	t.Helper()
	cmd := exec.Command(name, args...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	err := cmd.Run()
	r := perfResult{command: command, elapsed: time.Since(start), stdout: out.String(), stderr: errb.String()}
	if ps := cmd.ProcessState; ps != nil {
		// The kernel's utime+stime of the child (all its threads: the
		// JVM's too), the counters /proc/PID/stat shows, read at its
		// reaping, so none of its last moments is missed.
		r.cpu = ps.UserTime() + ps.SystemTime()
	}
	if err != nil {
		t.Fatalf("%s: %v\n%s\n%s", r.command, err, r.stdout, r.stderr)
	}
	m := perfFinal.FindStringSubmatch(r.stdout)
	if m == nil {
		t.Fatalf("%s: no final line in\n%s\n%s", r.command, r.stdout, r.stderr)
	}
	r.records, _ = strconv.ParseInt(m[1], 10, 64)
	r.recsPerSec, _ = strconv.ParseFloat(m[2], 64)
	r.mbPerSec, _ = strconv.ParseFloat(m[3], 64)
	r.avgMs, _ = strconv.ParseFloat(m[4], 64)
	r.maxMs, _ = strconv.ParseFloat(m[5], 64)
	r.p50, _ = strconv.ParseInt(m[6], 10, 64)
	r.p95, _ = strconv.ParseInt(m[7], 10, 64)
	r.p99, _ = strconv.ParseInt(m[8], 10, 64)
	r.p999, _ = strconv.ParseInt(m[9], 10, 64)
	return r
}

// TestBenchProducerPerf runs the real `producerd perf` against a fresh
// 3-broker cluster (default timings): 100-byte records, 6 partitions with
// 3 replicas, unthrottled, for acks=0, acks=1 and acks=all with the
// idempotent producer; then acks=all (idempotent) throttled to half the
// rate it reached, for the latency at a sustainable load. Each row writes a
// fresh topic, and starts once every replica of the previous one caught up.
// The producer runs on the same machine as the brokers. Settings:
// TAPES_BENCH_PERF_RECORDS (unthrottled runs' records, default 1,000,000),
// TAPES_BENCH_BATCH_BYTES (one batch size; default both Kafka's 16384 and
// 262144), TAPES_BENCH_SECONDS (the throttled run's length, default 10).
// Under each row: every broker's fsyncs/s and CPU over the row, and the top
// functions of a CPU profile of its first TAPES_BENCH_PROFILE_SECONDS
// (default 5).
func TestBenchProducerPerf(t *testing.T) {
	needBench(t)
	e := testcluster.Start(t, binDir, 3, append(slices.Clone(observeArgs), brokerArgs()...)...)
	profile := time.Duration(setting("TAPES_BENCH_PROFILE_SECONDS", 5)) * time.Second
	records := setting("TAPES_BENCH_PERF_RECORDS", 1_000_000)
	seconds := setting("TAPES_BENCH_SECONDS", 10)
	batches := []int{16384, 262144}
	if b := setting("TAPES_BENCH_BATCH_BYTES", 0); b > 0 {
		batches = []int{b}
	}
	rows := []struct {
		name  string
		flags []string
	}{
		{"0", []string{"--acks", "0"}},
		{"1", []string{"--acks", "1"}},
		{"all, idempotent", []string{"--acks", "all", "--idempotent"}},
	}
	fmt.Printf("\nproducerd perf: 100-byte records, 6 partitions (RF 3, min.insync.replicas=2), linger 5ms, max.in.flight 5, producer on the same machine\n")
	fmt.Printf("%-8s %-24s %12s %8s %9s %9s %9s %9s %9s %9s\n", "batch", "acks", "records/s", "MB/s", "avg ms", "p50 ms", "p95 ms", "p99 ms", "p99.9 ms", "max ms")
	var commands []string
	topicN := 0
	run := func(batchBytes int, name string, n int, flags ...string) perfResult {
		topicN++
		topic := fmt.Sprintf("perf-%d", topicN)
		e.CreateTopic(topic, 6, 3, map[string]string{"min.insync.replicas": "2"})
		args := append([]string{"--topic", topic, "--num-records", fmt.Sprint(n), "--record-size", "100",
			"--batch-bytes", fmt.Sprint(batchBytes), "--linger", "5", "--max-in-flight", "5", "--reporting-interval", "5s"}, flags...)
		o := observe(t, e, profile)
		r := runPerf(t, e, args...)
		fmt.Printf("%-8d %-24s %12.0f %8.2f %9.1f %9d %9d %9d %9d %9.0f\n", batchBytes, name, r.recsPerSec, r.mbPerSec, r.avgMs, r.p50, r.p95, r.p99, r.p999, r.maxMs)
		o.print()
		commands = append(commands, r.command)
		waitCaughtUp(t, e, topic, 6)
		// Let the brokers finish what the run left (the page cache's
		// writeback, garbage collection) before the next one starts.
		time.Sleep(5 * time.Second)
		return r
	}
	for _, bb := range batches {
		var allRate float64
		for _, row := range rows {
			r := run(bb, row.name, records, append([]string{"--throughput", "-1"}, row.flags...)...)
			allRate = r.recsPerSec
		}
		// The latency target: p99 under 50 ms at half of 300,000/s;
		// then half of what this run reached unthrottled.
		const targetHalf = 150_000
		run(bb, fmt.Sprintf("all, idem., at %d/s", targetHalf), targetHalf*seconds, "--throughput", fmt.Sprint(targetHalf), "--acks", "all", "--idempotent")
		half := int(allRate / 2)
		run(bb, fmt.Sprintf("all, idem., at %d/s", half), half*seconds, "--throughput", fmt.Sprint(half), "--acks", "all", "--idempotent")
	}
	fmt.Println("commands (the bootstrap addresses are the fresh cluster's):")
	for _, c := range commands {
		fmt.Println("  " + c)
	}
}

// waitCaughtUp waits until every replica of topic has applied its leader's
// high watermark, so that the next run does not share the machine with
// followers catching up.
func waitCaughtUp(t *testing.T, e *testcluster.Env, topic string, partitions int32) {
	t.Helper()
	hw := map[int32]int64{}
	for p := int32(0); p < partitions; p++ {
		hw[p] = e.Partition(topic, p).HighWatermark
	}
	e.WaitFor(2*time.Minute, "replicas of "+topic+" to catch up", func() bool {
		return e.EveryReplica(topic, -1, 0, func(r *tapesv1.ReplicaStatus) bool { return r.HighWatermark >= hw[r.Partition] })
	})
}
