package bench

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/testcluster"
)

// Cost as work grows (issue 12, point 4): what the same cluster pays as
// partitions are added. Every row prints the command that produced it, each
// broker's fsyncs/s, CPU and profile (observe) and the machine's load.

// intList reads a comma-separated list of positive ints from the
// environment (e.g. TAPES_BENCH_SCALE_PARTITIONS=1,6), else def.
func intList(t *testing.T, name string, def []int) []int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	var out []int
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want a comma-separated list of positive integers", name, v)
		}
		out = append(out, n)
	}
	return out
}

// TestBenchScaleProduce prints acks=all records/s of `producerd perf
// --acks all --idempotent` with its default batching for topics of 1, 6,
// 24 and 96 partitions (TAPES_BENCH_SCALE_PARTITIONS), RF 3,
// min.insync.replicas=2, on one fresh 3-broker cluster, each row on a fresh
// topic, TAPES_BENCH_SCALE_RECORDS records (default 1,000,000) of 100
// bytes unthrottled. The curve should not fall as partitions are added
// until the brokers' CPU is full: each row prints every broker's CPU beside
// it.
func TestBenchScaleProduce(t *testing.T) {
	needBench(t)
	e := testcluster.Start(t, binDir, 3, append(slices.Clone(observeArgs), brokerArgs()...)...)
	counts := intList(t, "TAPES_BENCH_SCALE_PARTITIONS", []int{1, 6, 24, 96})
	records := setting("TAPES_BENCH_SCALE_RECORDS", 1_000_000)
	profile := time.Duration(setting("TAPES_BENCH_PROFILE_SECONDS", 5)) * time.Second
	fmt.Printf("\ncost as partitions grow: producerd perf --acks all --idempotent (default batching), %d 100-byte records unthrottled, RF 3, min.insync.replicas=2, one cluster, a fresh topic per row\n", records)
	fmt.Printf("%-11s %12s %8s %9s %9s %9s %9s\n", "partitions", "records/s", "MB/s", "avg ms", "p50 ms", "p99 ms", "max ms")
	for _, n := range counts {
		topic := fmt.Sprintf("scale-%d", n)
		e.CreateTopic(topic, int32(n), 3, map[string]string{"min.insync.replicas": "2"})
		o := observe(t, e, profile)
		r := runPerf(t, e, "--topic", topic, "--num-records", fmt.Sprint(records), "--record-size", "100",
			"--throughput", "-1", "--acks", "all", "--idempotent", "--reporting-interval", "5s")
		fmt.Printf("%-11d %12.0f %8.2f %9.1f %9d %9d %9.0f\n", n, r.recsPerSec, r.mbPerSec, r.avgMs, r.p50, r.p99, r.maxMs)
		fmt.Println("    command: " + r.command)
		printProgress(r)
		o.print()
		waitCaughtUp(t, e, topic, int32(n))
		time.Sleep(5 * time.Second) // as TestBenchProducerPerf: let the brokers settle
	}
}

// printProgress prints a perf tool's progress lines (every
// --reporting-interval) under its row: a stall shows as a window with few
// records sent.
func printProgress(r perfResult) {
	for _, l := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		if strings.Contains(l, "records sent") && !perfFinal.MatchString(l) {
			fmt.Println("    progress: " + strings.TrimSpace(l))
		}
	}
}

// TestBenchScalePartitions prints, for each partition count of
// TAPES_BENCH_SCALE_IDLE_PARTITIONS (default 100,1000), on a fresh
// 3-broker cluster with one topic of that many partitions (RF 3): how long
// the start took until every partition had a ready leader (the brokers'
// start, CreateTopics, the elections), and until every partition was led by
// its preferred replica with a full ISR; then, after
// TAPES_BENCH_SCALE_SETTLE_SECONDS (default 10), each broker's idle CPU,
// RSS, goroutines, threads and open files over TAPES_BENCH_IDLE_SECONDS
// (default 20), with its profile. For counts of at least
// TAPES_BENCH_SCALE_FAILOVER_PARTITIONS (default 1000) it then SIGKILLs the
// broker that leads the most partitions and prints the time until every
// partition it led had a ready leader again, until an acks=all produce to
// one of them succeeded, and until one had succeeded on every one of them.
func TestBenchScalePartitions(t *testing.T) {
	needBench(t)
	counts := intList(t, "TAPES_BENCH_SCALE_IDLE_PARTITIONS", []int{100, 1000})
	failoverFrom := setting("TAPES_BENCH_SCALE_FAILOVER_PARTITIONS", 1000)
	settle := time.Duration(setting("TAPES_BENCH_SCALE_SETTLE_SECONDS", 10)) * time.Second
	window := time.Duration(setting("TAPES_BENCH_IDLE_SECONDS", 20)) * time.Second
	limit := time.Duration(setting("TAPES_BENCH_SCALE_TIMEOUT_SECONDS", 600)) * time.Second
	for _, n := range counts {
		fmt.Printf("\n%d partitions (RF 3, one topic), 3 brokers, default timings, a fresh cluster:\n", n)
		m := openMachine()
		launched := time.Now()
		// The partition budget (default 500 replicas a broker) would refuse
		// the topic: raise it to fit it and the internal topics.
		args := append(slices.Clone(observeArgs), "--max-partitions-per-broker", strconv.Itoa(max(500, n+100)))
		args = append(args, brokerArgs()...)
		e := testcluster.Start(t, binDir, 3, args...)
		started := time.Since(launched)
		for _, b := range e.Brokers() {
			m.started(b.PID)
		}
		ctx, cancel := context.WithTimeout(context.Background(), limit)
		err := e.Client.CreateTopics(ctx, []*tapesv1.TopicSpec{{Name: "many", Partitions: int32(n), ReplicationFactor: 3,
			Configs: map[string]string{"min.insync.replicas": "2"}}}, false)
		cancel()
		if err != nil {
			t.Fatalf("create %d partitions: %v", n, err)
		}
		created := time.Since(launched)
		e.WaitFor(limit, fmt.Sprintf("a ready leader for each of %d partitions", n), func() bool {
			return len(readyLeaders(e, "many", 0)) == n
		})
		ready := time.Since(launched)
		e.WaitSettled("many", limit)
		settled := time.Since(launched)
		fmt.Printf("  start: brokers serving %.1f s; CreateTopics answered %.1f s; every partition a ready leader %.1f s; preferred leaders with full ISR %.1f s (from the launch)\n",
			started.Seconds(), created.Seconds(), ready.Seconds(), settled.Seconds())
		fmt.Printf("    command: testcluster.Start(3 brokers %s) + CreateTopics many, %d partitions, RF 3\n", strings.Join(args, " "), n)
		fmt.Println("    " + m.String())

		time.Sleep(settle)
		o := observe(t, e, window)
		time.Sleep(window)
		fmt.Printf("  idle over %v, %v after settling:\n", window, settle)
		for _, b := range e.Brokers() {
			fmt.Printf("    %s: RSS %.0f MiB, %d goroutines, %d threads, %d open files\n", b.Name,
				float64(procStatusKiB(b.PID, "VmRSS"))/1024, goroutines(e, b.Name), procStatusKiB(b.PID, "Threads"), openFDs(b.PID))
		}
		o.print()
		if n >= failoverFrom {
			scaleFailover(t, e, n, limit)
		}
		if err := e.C.Close(); err != nil {
			t.Errorf("close cluster: %v", err)
		}
	}
}

// scaleFailover SIGKILLs the broker that leads the most partitions of
// "many" and prints how long the survivors took to lead them all again and
// to accept acks=all produces to them.
func scaleFailover(t *testing.T, e *testcluster.Env, n int, limit time.Duration) {
	t.Helper()
	led := map[int32][]int32{}
	for p, b := range readyLeaders(e, "many", 0) {
		led[b] = append(led[b], p)
	}
	var victim int32
	for b, ps := range led {
		if len(ps) > len(led[victim]) {
			victim = b
		}
	}
	mine := led[victim]
	slices.Sort(mine)
	m := openMachine()
	if err := e.C.Kill(testcluster.BrokerName(victim)); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	// Produce to the first partition it led until one acks=all answer
	// succeeds, then to every one of them (16 at a time).
	firstOK := make(chan time.Duration, 1)
	allOK := make(chan time.Duration, 1)
	go func() {
		probe := func(p int32) {
			for time.Since(killed) < limit {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				_, err := e.Client.Produce(ctx, &tapesv1.ProduceRequest{Topic: "many", Partition: p, Acks: -1, Records: testcluster.Records("failover", 0, 1), TimeoutMs: 900})
				cancel()
				if err == nil {
					return
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
		probe(mine[0])
		firstOK <- time.Since(killed)
		work := make(chan int32)
		var wg sync.WaitGroup
		for range 16 {
			wg.Go(func() {
				for p := range work {
					probe(p)
				}
			})
		}
		for _, p := range mine[1:] {
			work <- p
		}
		close(work)
		wg.Wait()
		allOK <- time.Since(killed)
	}()
	e.WaitFor(limit, fmt.Sprintf("a ready leader on a survivor for each of the %d partitions broker %d led", len(mine), victim), func() bool {
		now := readyLeaders(e, "many", victim)
		for _, p := range mine {
			if b, ok := now[p]; !ok || b == victim {
				return false
			}
		}
		return true
	})
	releading := time.Since(killed)
	first, all := <-firstOK, <-allOK
	fmt.Printf("  failover: SIGKILL of broker %d (led %d of %d partitions): every one led by a survivor %.2f s; first acks=all success on %s-%d %.2f s; an acks=all success on every one %.2f s\n",
		victim, len(mine), n, releading.Seconds(), "many", mine[0], first.Seconds(), all.Seconds())
	fmt.Println("    " + m.String())
}

// readyLeaders maps each partition of topic to the broker (not skip) that
// reports itself its ready leader (a leader past its barrier reports an
// ISR). Brokers that do not answer are left out.
func readyLeaders(e *testcluster.Env, topic string, skip int32) map[int32]int32 {
	out := map[int32]int32{}
	for _, b := range e.Brokers() {
		if b.ID == skip || !e.C.Running(b.Name) {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		resp, err := e.Client.DescribeReplicas(ctx, b.ID)
		cancel()
		if err != nil {
			continue
		}
		for _, r := range resp.Replicas {
			if r.Topic == topic && r.RaftState == "Leader" && len(r.Isr) > 0 {
				out[r.Partition] = b.ID
			}
		}
	}
	return out
}

// goroutines is broker name's goroutine count from its pprof listener
// (the first line of /debug/pprof/goroutine?debug=1), or -1.
func goroutines(e *testcluster.Env, name string) int {
	b, err := fetch(e.ServedURL(name, "pprof") + "goroutine?debug=1")
	if err != nil {
		return -1
	}
	line, _, _ := strings.Cut(string(b), "\n")
	n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "goroutine profile: total")))
	if err != nil {
		return -1
	}
	return n
}
