package systest

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tapes-dev/tapes/internal/consumer"
	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/sink"
	"github.com/tapes-dev/tapes/internal/testcluster"
)

// consumerFlags are the timings consumer tests use: a 2 s session with
// heartbeats every 300 ms.
var consumerFlags = []string{"--session-timeout", "2s", "--heartbeat-interval", "300ms", "--log-level", "debug"}

// startConsumer starts consumerd NAME in group on orders with its history in
// dir; extra flags come last.
func startConsumer(t *testing.T, e *testcluster.Env, dir, group, name string, extra ...string) *producerdProc {
	t.Helper()
	args := append([]string{"--group", group, "--topic", "orders", "--name", name, "--history", filepath.Join(dir, name+".jsonl")}, consumerFlags...)
	return startDaemon(t, e, "consumerd", append(args, extra...)...)
}

func status(t *testing.T, p *producerdProc) *tapesv1.ConsumerStatusResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := p.consumerControl().ConsumerStatus(ctx, &tapesv1.ConsumerStatusRequest{})
	if err != nil {
		t.Fatalf("%s status: %v", p.bin, err)
	}
	return st
}

func owned(st *tapesv1.ConsumerStatusResponse) []int32 {
	var out []int32
	for _, p := range st.Partitions {
		out = append(out, p.Partition)
	}
	return out
}

// waitOwnership waits until the consumers together own partitions 0..n-1,
// each exactly once, every one owning at least one, in one generation.
func waitOwnership(t *testing.T, e *testcluster.Env, n int32, cs ...*producerdProc) {
	t.Helper()
	e.WaitFor(30*time.Second, fmt.Sprintf("%d consumers to share %d partitions", len(cs), n), func() bool {
		seen := map[int32]int{}
		gens := map[int32]bool{}
		for _, c := range cs {
			st := status(t, c)
			if len(st.Partitions) == 0 || st.State != "running" {
				return false
			}
			gens[st.Generation] = true
			for _, p := range owned(st) {
				seen[p]++
			}
		}
		if len(seen) != int(n) || len(gens) != 1 {
			return false
		}
		for _, k := range seen {
			if k != 1 {
				return false
			}
		}
		return true
	})
}

func stopConsumer(t *testing.T, p *producerdProc) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := p.consumerControl().StopConsumer(ctx, &tapesv1.StopConsumerRequest{}); err != nil {
		t.Fatalf("stop consumer: %v", err)
	}
	p.wait(15 * time.Second)
}

func history(t *testing.T, dir, name string) []consumer.HistoryLine {
	t.Helper()
	h, err := consumer.ReadHistory(filepath.Join(dir, name+".jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// revokedAfter returns the partitions name revoked (or lost) at or after t0.
func revokedAfter(h []consumer.HistoryLine, t0 time.Time) []int32 {
	var out []int32
	for _, l := range h {
		if (l.Type == consumer.HistoryRevoked || l.Type == consumer.HistoryLost) && !l.At.Before(t0) {
			out = append(out, l.Partitions...)
		}
	}
	slices.Sort(out)
	return out
}

// processedOffsets returns, per partition, the offsets name processed.
func processedOffsets(h []consumer.HistoryLine) map[int32][]int64 {
	out := map[int32][]int64{}
	for _, l := range h {
		if l.Type == consumer.HistoryRecord {
			out[*l.Partition] = append(out[*l.Partition], *l.Offset)
		}
	}
	return out
}

// TestScaleOutCooperativeVsRange: two consumers share 6 partitions while a
// producer writes; a third joins. With cooperative-sticky only the
// partitions that move to the newcomer are revoked, and the partitions the
// first two keep are processed without a gap across the rebalance; with
// range every partition is revoked. Then (cooperative) the newcomer is
// SIGKILLed and its partitions move back after the session timeout.
func TestScaleOutCooperativeVsRange(t *testing.T) {
	e := start(t, 3)
	e.CreateTopic("orders", 6, 3, nil)
	prod := startProducerd(t, e, "--topic", "orders", "--rate", "300", "--duration", "5m", "--name", "producer-1", "--history", filepath.Join(t.TempDir(), "p.jsonl"))
	for _, assignor := range []string{"cooperative-sticky", "range"} {
		t.Run(assignor, func(t *testing.T) {
			dir := t.TempDir()
			group := "scale-" + assignor
			c1 := startConsumer(t, e, dir, group, "consumer-1", "--assignor", assignor)
			c2 := startConsumer(t, e, dir, group, "consumer-2", "--assignor", assignor)
			waitOwnership(t, e, 6, c1, c2)
			before := map[string][]int32{"consumer-1": owned(status(t, c1)), "consumer-2": owned(status(t, c2))}
			time.Sleep(time.Second)
			joinedAt := time.Now()
			c3 := startConsumer(t, e, dir, group, "consumer-3", "--assignor", assignor)
			waitOwnership(t, e, 6, c1, c2, c3)
			third := owned(status(t, c3))
			time.Sleep(time.Second)
			t.Logf("%s: before %v; consumer-3 got %v", assignor, before, third)

			if assignor == "cooperative-sticky" {
				// Scale in by SIGKILL: the newcomer's partitions go back
				// to the others once its session (2 s) expires.
				killedAt := time.Now()
				if err := c3.cmd.Process.Kill(); err != nil {
					t.Fatal(err)
				}
				waitOwnership(t, e, 6, c1, c2)
				t.Logf("after consumer-3's SIGKILL its partitions were owned again within %v", time.Since(killedAt).Round(time.Millisecond))
			}
			stopConsumer(t, c1)
			stopConsumer(t, c2)
			if assignor == "range" {
				stopConsumer(t, c3)
			}

			var revoked []int32
			for _, name := range []string{"consumer-1", "consumer-2"} {
				h := history(t, dir, name)
				r := revokedAfter(h, joinedAt)
				if assignor == "range" {
					// Eager: everything each owned was revoked at the
					// rebalance (and again at the stop).
					for _, p := range before[name] {
						if !slices.Contains(r, p) {
							t.Errorf("range: %s did not revoke partition %d when consumer-3 joined", name, p)
						}
					}
					continue
				}
				// Cooperative: before the kill, only what moved.
				var moved []int32
				for _, l := range h {
					if l.Type == consumer.HistoryRevoked && !l.At.Before(joinedAt) && len(l.Partitions) < len(before[name]) {
						moved = append(moved, l.Partitions...)
					}
				}
				revoked = append(revoked, moved...)
				// What this member kept was processed without a gap.
				offs := processedOffsets(h)
				for _, p := range before[name] {
					if slices.Contains(moved, p) {
						continue
					}
					o := offs[p]
					for i := 1; i < len(o); i++ {
						if o[i] != o[i-1]+1 {
							t.Errorf("%s partition %d (kept across the rebalance): offset %d follows %d", name, p, o[i], o[i-1])
							break
						}
					}
				}
			}
			if assignor == "cooperative-sticky" {
				slices.Sort(revoked)
				slices.Sort(third)
				if !slices.Equal(revoked, third) {
					t.Errorf("cooperative: revoked %v when consumer-3 joined; want exactly what it got, %v", revoked, third)
				}
			}
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	prod.control().Stop(ctx, &tapesv1.StopRequest{})
}

// TestPausedConsumerIsFenced: a consumer SIGSTOPped past its session
// timeout is removed from the group; after SIGCONT its commit is rejected
// (UNKNOWN_MEMBER_ID or ILLEGAL_GENERATION), it reports its partitions lost
// and rejoins in a later generation.
func TestPausedConsumerIsFenced(t *testing.T) {
	e := start(t, 3)
	e.CreateTopic("orders", 4, 3, nil)
	prod := startProducerd(t, e, "--topic", "orders", "--rate", "200", "--duration", "5m", "--name", "producer-1")
	dir := t.TempDir()
	c1 := startConsumer(t, e, dir, "zombie", "consumer-1")
	c2 := startConsumer(t, e, dir, "zombie", "consumer-2", "--process-time", "20ms", "--records-per-poll", "20")
	waitOwnership(t, e, 4, c1, c2)
	gen := status(t, c2).Generation
	if err := syscall.Kill(c2.cmd.Process.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stoppedAt := time.Now()
	// consumer-1 takes everything over once consumer-2's session expires.
	e.WaitFor(20*time.Second, "consumer-1 to own all 4 partitions", func() bool { return len(owned(status(t, c1))) == 4 })
	if err := syscall.Kill(c2.cmd.Process.Pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	t.Logf("consumer-2 (generation %d) paused for %v", gen, time.Since(stoppedAt).Round(time.Millisecond))
	waitOwnership(t, e, 4, c1, c2)
	stopConsumer(t, c1)
	stopConsumer(t, c2)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	prod.control().Stop(ctx, &tapesv1.StopRequest{})

	h := history(t, dir, "consumer-2")
	var rejected, lost, rejoined bool
	for _, l := range h {
		if l.At.Before(stoppedAt) {
			continue
		}
		switch {
		case l.Type == consumer.HistoryCommit && l.Generation == gen && l.Status == "ok" && !lost && rejected:
			t.Errorf("a commit of the fenced generation %d was accepted after the rejection: %+v", gen, l)
		case l.Type == consumer.HistoryCommit && l.Status == "error" && (l.Error == "UNKNOWN_MEMBER_ID" || l.Error == "ILLEGAL_GENERATION"):
			rejected = true
		case l.Type == consumer.HistoryLost:
			lost = true
		case l.Type == consumer.HistoryAssigned && l.Generation > gen:
			rejoined = true
		}
	}
	if !rejected || !lost || !rejoined {
		t.Fatalf("after SIGCONT: commit rejected %v, partitions reported lost %v, rejoined %v; want all", rejected, lost, rejoined)
	}
}

// TestCommitModesAndSink: 600 records; a consumer crashes mid-batch after
// 150 records and a second one finishes the group's work. commit=before
// loses records (never processed > 0), commit=after repeats some
// (duplicates > 0, never processed = 0), commit=after with the idempotent
// sink repeats no effect. A replay group then reads everything from the
// earliest offset without moving the first groups' offsets.
func TestCommitModesAndSink(t *testing.T) {
	e := start(t, 3)
	e.CreateTopic("orders", 3, 3, nil)
	dir := t.TempDir()
	ph := filepath.Join(dir, "producer.jsonl")
	if code, out, errOut := runProducerd(t, e, "--topic", "orders", "--count", "600", "--name", "producer-1", "--history", ph); code != 0 {
		t.Fatalf("producerd exit %d\n%s\n%s", code, out, errOut)
	}
	cases := []struct {
		commit     string
		idempotent bool
		check      func(st sink.Stats) error
	}{
		{"before", false, func(st sink.Stats) error {
			if st.NeverProcessed == 0 || st.Duplicates != 0 {
				return fmt.Errorf("want never processed > 0 and no duplicates")
			}
			return nil
		}},
		{"after", false, func(st sink.Stats) error {
			if st.NeverProcessed != 0 || st.Duplicates == 0 {
				return fmt.Errorf("want duplicates > 0 and nothing never processed")
			}
			return nil
		}},
		{"after", true, func(st sink.Stats) error {
			if st.NeverProcessed != 0 || st.Duplicates != 0 {
				return fmt.Errorf("want no duplicate effect and nothing never processed")
			}
			return nil
		}},
	}
	for _, c := range cases {
		name := "commit-" + c.commit
		if c.idempotent {
			name += "-idempotent"
		}
		t.Run(name, func(t *testing.T) {
			db := filepath.Join(dir, name+".db")
			args := []string{"--commit", c.commit, "--records-per-poll", "100", "--sink", db}
			if c.idempotent {
				args = append(args, "--idempotent-sink")
			}
			crasher := startConsumer(t, e, dir, name, name+"-1", append(args, "--crash-after-records", "150")...)
			if code := crasher.wait(30 * time.Second); code != 3 {
				t.Fatalf("crashing consumer exited %d, want 3", code)
			}
			finisher := startConsumer(t, e, dir, name, name+"-2", args...)
			waitCaughtUp(t, e, name, 600)
			stopConsumer(t, finisher)
			st, err := sink.ComputeStats(context.Background(), db, []string{ph})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: delivered %d, effects %d, duplicates %d, never processed %d", name, st.Delivered, st.Effects, st.Duplicates, st.NeverProcessed)
			if err := c.check(st); err != nil {
				t.Fatalf("%s: %+v: %v", name, st, err)
			}
		})
	}

	// Replay: a new group rebuilds a view from the earliest offset; the
	// other groups' offsets do not move.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	before, err := e.Client.OffsetFetch(ctx, "commit-after", nil)
	if err != nil {
		t.Fatal(err)
	}
	replay := startConsumer(t, e, dir, "replay", "replay-1", "--from", "earliest")
	waitCaughtUp(t, e, "replay", 600)
	stopConsumer(t, replay)
	if n := len(processedOffsets(history(t, dir, "replay-1"))); n != 3 {
		t.Fatalf("replay read %d partitions", n)
	}
	total := 0
	for _, o := range processedOffsets(history(t, dir, "replay-1")) {
		total += len(o)
	}
	if total != 600 {
		t.Fatalf("replay processed %d records, want 600", total)
	}
	after, err := e.Client.OffsetFetch(ctx, "commit-after", nil)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(before) != fmt.Sprint(after) {
		t.Fatalf("the replay moved another group's offsets: %v -> %v", before, after)
	}
}

// waitCaughtUp waits until group has committed offsets summing to total
// over the topic's partitions.
func waitCaughtUp(t *testing.T, e *testcluster.Env, group string, total int64) {
	t.Helper()
	e.WaitFor(60*time.Second, "group "+group+" to commit all "+strconv.FormatInt(total, 10)+" records", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		offs, err := e.Client.OffsetFetch(ctx, group, nil)
		if err != nil {
			return false
		}
		var sum int64
		for _, o := range offs {
			sum += o.Offset
		}
		return sum == total
	})
}

// TestRetentionGapIsReported: a group committed offset 0, then retention
// deleted the partition's first segments. Its next consumer does not
// silently skip: it reports the gap [0, log start) and goes on at the log
// start (--from earliest).
func TestRetentionGapIsReported(t *testing.T) {
	e := start(t, 3)
	e.CreateTopic("orders", 1, 3, map[string]string{"segment.bytes": "4096", "retention.bytes": "8192"})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := e.Client.OffsetCommit(ctx, &tapesv1.OffsetCommitRequest{GroupId: "late", GenerationId: -1,
		Offsets: []*tapesv1.OffsetCommitPartition{{Topic: "orders", Partition: 0, Offset: 0}}}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 600; i += 10 {
		recs := testcluster.Records("v", i, 10)
		for _, r := range recs {
			r.Value = append(r.Value, []byte(strings.Repeat("x", 90))...)
		}
		if _, err := e.Client.Produce(ctx, &tapesv1.ProduceRequest{Topic: "orders", Partition: 0, Acks: -1, Records: recs}); err != nil {
			t.Fatal(err)
		}
	}
	e.WaitFor(20*time.Second, "retention to delete the first segments", func() bool {
		return e.Partition("orders", 0).LogStartOffset > 0
	})
	dir := t.TempDir()
	c := startConsumer(t, e, dir, "late", "consumer-1", "--from", "earliest")
	waitCaughtUp(t, e, "late", 600)
	stopConsumer(t, c)
	var gap *consumer.HistoryLine
	first := int64(-1)
	for _, l := range history(t, dir, "consumer-1") {
		switch {
		case l.Type == consumer.HistoryGap && gap == nil:
			gap = &l
		case l.Type == consumer.HistoryRecord && first < 0:
			first = *l.Offset
		}
	}
	if gap == nil {
		t.Fatal("no gap line in the history")
	}
	t.Logf("gap reported: offsets %d..%d lost to retention, resumed at %d; first record processed at %d", *gap.From, *gap.To-1, *gap.ResumeAt, first)
	if *gap.From != 0 || *gap.To <= 0 || *gap.ResumeAt != *gap.To || first != *gap.To {
		t.Fatalf("gap %d..%d resume %d, first processed %d: want [0, log start) and processing from the log start", *gap.From, *gap.To, *gap.ResumeAt, first)
	}
	if !strings.Contains(c.stdout.String(), "were deleted by retention") {
		t.Errorf("consumerd did not say so on stdout:\n%s", c.stdout.String())
	}
}

// TestGroupSurvivesCoordinatorKill: two consumers (commit after, idempotent
// sink) work through 1,500 records while the group's coordinator broker is
// SIGKILLed; the group goes on under the new coordinator, nothing committed
// is lost, and every acknowledged record has its effect exactly once.
func TestGroupSurvivesCoordinatorKill(t *testing.T) {
	e := start(t, 3)
	e.CreateTopic("orders", 3, 3, map[string]string{"min.insync.replicas": "2"})
	dir := t.TempDir()
	ph := filepath.Join(dir, "producer.jsonl")
	if code, out, errOut := runProducerd(t, e, "--topic", "orders", "--count", "1500", "--idempotent", "--name", "producer-1", "--history", ph); code != 0 {
		t.Fatalf("producerd exit %d\n%s\n%s", code, out, errOut)
	}
	db := filepath.Join(dir, "sink.db")
	args := []string{"--sink", db, "--idempotent-sink", "--records-per-poll", "20", "--process-time", "2ms"}
	c1 := startConsumer(t, e, dir, "survivor", "consumer-1", args...)
	c2 := startConsumer(t, e, dir, "survivor", "consumer-2", args...)
	waitOwnership(t, e, 3, c1, c2)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	coord, err := e.Client.FindCoordinator(ctx, "survivor")
	if err != nil {
		t.Fatal(err)
	}
	e.WaitFor(20*time.Second, "some commits", func() bool {
		offs, err := e.Client.OffsetFetch(ctx, "survivor", nil)
		return err == nil && len(offs) == 3
	})
	before, _ := e.Client.OffsetFetch(ctx, "survivor", nil)
	if err := e.C.Kill(testcluster.BrokerName(coord.NodeId)); err != nil {
		t.Fatal(err)
	}
	t.Logf("killed coordinator broker %d with committed offsets %v", coord.NodeId, before)
	waitCaughtUp(t, e, "survivor", 1500)
	after, err := e.Client.OffsetFetch(ctx, "survivor", nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range after {
		if o.Offset < before[i].Offset {
			t.Fatalf("committed offset of partition %d went back from %d to %d", o.Partition, before[i].Offset, o.Offset)
		}
	}
	stopConsumer(t, c1)
	stopConsumer(t, c2)
	st, err := sink.ComputeStats(context.Background(), db, []string{ph})
	if err != nil {
		t.Fatal(err)
	}
	if st.NeverProcessed != 0 || st.Duplicates != 0 || st.Delivered != 1500 {
		t.Fatalf("after the coordinator's kill: %+v; want 1500 delivered, none lost, no duplicate effect", st)
	}
}

// TestConsumerControlEndpoint: pause stops processing while heartbeats go
// on (the member keeps its partitions and generation past its session
// timeout), resume continues, --commit auto commits on its timer, and crash
// exits at once with code 3 without leaving.
func TestConsumerControlEndpoint(t *testing.T) {
	e := start(t, 3)
	e.CreateTopic("orders", 2, 3, nil)
	prod := startProducerd(t, e, "--topic", "orders", "--rate", "200", "--duration", "5m", "--name", "producer-1")
	dir := t.TempDir()
	c := startConsumer(t, e, dir, "ctl", "consumer-1", "--commit", "auto", "--auto-commit-interval", "500ms")
	waitOwnership(t, e, 2, c)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ctl := c.consumerControl()
	if _, err := ctl.PauseConsumer(ctx, &tapesv1.PauseConsumerRequest{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // a batch in progress finishes
	before := status(t, c)
	time.Sleep(3 * time.Second) // past the 2 s session timeout
	paused := status(t, c)
	if paused.State != "paused" || paused.Processed != before.Processed || paused.Generation != before.Generation || len(paused.Partitions) != 2 {
		t.Fatalf("while paused: %+v (before: processed %d, generation %d); want no processing, same generation, both partitions kept",
			paused, before.Processed, before.Generation)
	}
	if _, err := ctl.ResumeConsumer(ctx, &tapesv1.ResumeConsumerRequest{}); err != nil {
		t.Fatal(err)
	}
	e.WaitFor(10*time.Second, "processing to go on after resume", func() bool { return status(t, c).Processed > paused.Processed })
	if st := status(t, c); st.Generation != before.Generation {
		t.Fatalf("generation moved from %d to %d: the pause cost the member its partitions", before.Generation, st.Generation)
	}
	commits := 0
	for _, l := range history(t, dir, "consumer-1") {
		if l.Type == consumer.HistoryCommit && l.Status == "ok" {
			commits++
		}
	}
	if commits < 2 {
		t.Fatalf("--commit auto made %d commits", commits)
	}
	if _, err := ctl.CrashConsumer(ctx, &tapesv1.CrashConsumerRequest{}); err != nil && !strings.Contains(err.Error(), "Unavailable") {
		t.Fatal(err)
	}
	if code := c.wait(10 * time.Second); code != 3 {
		t.Fatalf("crash: exit %d, want 3", code)
	}
	prod.control().Stop(ctx, &tapesv1.StopRequest{})
}
