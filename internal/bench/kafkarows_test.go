package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// The rows of the Apache Kafka peer (../shared/peers/kafka, its
// scenarios.go) that TestBenchFailover and TestBenchIdleCPU print beside
// tapes': the harness's own failover and idle scenarios, one pass each
// (`kafka3.sh bench failover|idle -runs 1 -json FILE`), on a fresh cluster
// the harness starts and stops.

// kafkaLoad is what every measured row of the harness says of the machine
// over its measured part (cpu.go's addCPU, scenarios.go's quietWait).
type kafkaLoad struct {
	Scenario     string  `json:"scenario"`
	Error        string  `json:"error"`
	CPUOther     float64 `json:"cpu_other_pct"` // every other process, % of all cores
	Contaminated bool    `json:"contaminated"`  // CPUOther above the harness's -contaminated-pct (5)
	Load1Start   float64 `json:"load1_start"`
	QuietWaitS   float64 `json:"quiet_wait_s"`
}

// String is "load1 0.42 after waiting 60 s for a quiet machine, other
// processes 3.1% of the machine" and the harness's contaminated flag.
func (l kafkaLoad) String() string {
	s := fmt.Sprintf("load1 %.2f after waiting %.0f s for a quiet machine, other processes %.1f%% of the machine", l.Load1Start, l.QuietWaitS, l.CPUOther)
	if l.Contaminated {
		s += " (CONTAMINATED: shared machine)"
	}
	return s
}

// kafkaFailover is the harness's failover row: FailoverProbe sends one
// record at a time (acks=all, idempotent, linger.ms 0) to a 1-partition
// RF 3 topic (min.insync.replicas=2); each round SIGKILLs the leader.
type kafkaFailover struct {
	kafkaLoad
	Rounds []struct {
		Round                 int     `json:"round"`
		Killed                int     `json:"killed"`
		KilledWasQuorumLeader bool    `json:"killed_was_quorum_leader"`
		KillToFirstAckMs      float64 `json:"kill_to_first_ack_ms"` // SIGKILL sent -> first ack after the reap
		MaxGapMs              float64 `json:"max_gap_ms"`           // last ack before the kill -> first after
		ErrorsInGap           int     `json:"errors_in_gap"`
		NewLeader             int     `json:"new_leader"`
		RestartToFullISRS     float64 `json:"restart_to_full_isr_s"`
		Error                 string  `json:"error"`
	} `json:"rounds"`
	Verify *struct { // the probe's read-back of the partition; null if it gave none
		Acked    int64 `json:"acked"`
		Stored   int64 `json:"stored"`
		Missing  int64 `json:"missing"`
		Mismatch int64 `json:"mismatch"`
		Dups     int64 `json:"dups"`
	} `json:"verify"`
}

// kills and gaps are the rounds' kill_to_first_ack_ms and max_gap_ms.
func (f kafkaFailover) kills() []time.Duration {
	var ds []time.Duration
	for _, r := range f.Rounds {
		ds = append(ds, msDuration(r.KillToFirstAckMs))
	}
	return ds
}

func (f kafkaFailover) gaps() []time.Duration {
	var ds []time.Duration
	for _, r := range f.Rounds {
		ds = append(ds, msDuration(r.MaxGapMs))
	}
	return ds
}

func msDuration(ms float64) time.Duration { return time.Duration(ms * float64(time.Millisecond)) }

// kafkaIdle is the harness's idle row: CPU of each broker process (% of
// one core, utime+stime over the window) and its RSS, keyed n1..n3.
type kafkaIdle struct {
	kafkaLoad
	Partitions int                `json:"partitions"`
	IdleS      float64            `json:"idle_s"`
	CPU        map[string]float64 `json:"broker_cpu_core_pct"`
	CPUTotal   float64            `json:"brokers_cpu_core_pct_total"`
	RSSMiB     map[string]float64 `json:"broker_rss_mib"`
}

// perPartition is the whole cluster's CPU per partition, % of one core.
func (i kafkaIdle) perPartition() float64 { return i.CPUTotal / float64(i.Partitions) }

// kafkaRow finds the line of scenario in the harness's JSON lines and
// decodes it into row. A row with an error (the harness's "error" field:
// a round that failed, fewer rounds than asked, ...) is refused with it.
func kafkaRow(jsonl, scenario string, row any) error {
	for _, line := range jsonLines(jsonl) {
		var head kafkaLoad
		if err := json.Unmarshal([]byte(line), &head); err != nil {
			return fmt.Errorf("kafkabench line %q: %v", line, err)
		}
		if head.Scenario != scenario {
			continue
		}
		if head.Error != "" {
			return fmt.Errorf("kafkabench %s row: %s", scenario, head.Error)
		}
		if err := json.Unmarshal([]byte(line), row); err != nil {
			return fmt.Errorf("kafkabench %s line %q: %v", scenario, line, err)
		}
		return nil
	}
	return fmt.Errorf("kafkabench: no %s line in %d bytes of output", scenario, len(jsonl))
}

// parseKafkaFailover reads the failover row; one without rounds, or with a
// round lacking its figures, is refused.
func parseKafkaFailover(jsonl string) (kafkaFailover, error) {
	var f kafkaFailover
	if err := kafkaRow(jsonl, "failover", &f); err != nil {
		return kafkaFailover{}, err
	}
	if len(f.Rounds) == 0 {
		return kafkaFailover{}, fmt.Errorf("kafkabench failover row: no rounds")
	}
	for _, r := range f.Rounds {
		if r.Error != "" || r.KillToFirstAckMs <= 0 || r.MaxGapMs <= 0 {
			return kafkaFailover{}, fmt.Errorf("kafkabench failover round %d: kill_to_first_ack_ms %v, max_gap_ms %v, error %q", r.Round, r.KillToFirstAckMs, r.MaxGapMs, r.Error)
		}
	}
	return f, nil
}

// parseKafkaIdle reads the idle row; one without the three brokers'
// figures is refused.
func parseKafkaIdle(jsonl string) (kafkaIdle, error) {
	var i kafkaIdle
	if err := kafkaRow(jsonl, "idle", &i); err != nil {
		return kafkaIdle{}, err
	}
	if len(i.CPU) != 3 || len(i.RSSMiB) != 3 || i.Partitions <= 0 || i.IdleS <= 0 {
		return kafkaIdle{}, fmt.Errorf("kafkabench idle row: %d brokers' CPU, %d brokers' RSS, %d partitions, %v s", len(i.CPU), len(i.RSSMiB), i.Partitions, i.IdleS)
	}
	return i, nil
}

// byNode renders a map keyed n1..n3 as "n1 1.2%, n2 ..." with unit.
func byNode(m map[string]float64, format string) string {
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, k+" "+fmt.Sprintf(format, m[k]))
	}
	return strings.Join(parts, ", ")
}

// kafkaPeerDir is TAPES_BENCH_KAFKA_PEER; when it is unset it prints the
// "skipped" line for what (the row that would have been measured).
func kafkaPeerDir(what string) string {
	dir := os.Getenv("TAPES_BENCH_KAFKA_PEER")
	if dir == "" {
		fmt.Printf("  Apache Kafka (%s): skipped: set TAPES_BENCH_KAFKA_PEER to a copy of ../shared/peers/kafka whose fetch.sh has run\n", what)
	}
	return dir
}

// kafkaFailoverRows runs the peer's failover scenario with rounds rounds
// and prints its row, the read-back, and the ratio of tapes' medians
// (kill and gap, timed as the peer times them) to Kafka's.
func kafkaFailoverRows(t *testing.T, dir string, rounds int, tapesKill, tapesGap []time.Duration) {
	t.Helper()
	jsonl, command := runKafkaPeerBench(t, dir, 10*time.Minute+time.Duration(rounds)*4*time.Minute, "failover", "-rounds", fmt.Sprint(rounds))
	f, err := parseKafkaFailover(jsonl)
	if err != nil {
		t.Fatalf("%s: %v", command, err)
	}
	quorum, errs := 0, 0
	for _, r := range f.Rounds {
		if r.KilledWasQuorumLeader {
			quorum++
		}
		errs += r.ErrorsInGap
	}
	fmt.Printf("  Apache Kafka, SIGKILL of the leader -> first ack (kill_to_first_ack_ms): %s\n", summary(f.kills()))
	fmt.Printf("  Apache Kafka, ack gap (max_gap_ms): %s\n", summary(f.gaps()))
	read := "no read-back verdict (see the probe log)"
	if v := f.Verify; v != nil {
		read = fmt.Sprintf("read back: acked %d, stored %d, missing %d, mismatch %d, dups %d", v.Acked, v.Stored, v.Missing, v.Mismatch, v.Dups)
	}
	fmt.Printf("    %d rounds, the killed broker was also the KRaft quorum leader in %d, %d send errors in the gaps; %s\n", len(f.Rounds), quorum, errs, read)
	fmt.Printf("    %s; command: %s\n", f.kafkaLoad, command)
	fmt.Printf("  tapes / Kafka: %.2f (goal: at most 0.20)  [medians of SIGKILL sent -> first acks=all success; max %.2f; ack gap median %.2f]\n",
		medianOf(tapesKill).Seconds()/medianOf(f.kills()).Seconds(),
		slices.Max(tapesKill).Seconds()/slices.Max(f.kills()).Seconds(),
		medianOf(tapesGap).Seconds()/medianOf(f.gaps()).Seconds())
}

// kafkaIdleRows runs the peer's idle scenario with tapes' partitions and
// window and prints its row and the ratio of tapes' CPU per partition
// (tapesPct: the whole cluster's, % of one core) to Kafka's.
func kafkaIdleRows(t *testing.T, dir string, parts int32, window time.Duration, tapesPct float64) {
	t.Helper()
	fmt.Printf("\nidle beside Apache Kafka 4.4 (the peer's idle scenario; tapes' cluster stopped): 3 KRaft brokers in combined mode, a fresh topic of the same partitions\n")
	fmt.Printf("(RF 3); its window, as long as tapes', starts 5 s after every partition has a full ISR and after the harness waited for a quiet machine; utime+stime per JVM\n")
	jsonl, command := runKafkaPeerBench(t, dir, 15*time.Minute+window, "idle",
		"-idle-partitions", fmt.Sprint(parts), "-idle-dur", window.String())
	i, err := parseKafkaIdle(jsonl)
	if err != nil {
		t.Fatalf("%s: %v", command, err)
	}
	fmt.Printf("  Apache Kafka, %d partitions (RF 3), 3 brokers (KRaft combined), %.1f s window: %.1f%% of one core for the whole cluster (%s), %.3f%% per partition; RSS %s\n",
		i.Partitions, i.IdleS, i.CPUTotal, byNode(i.CPU, "%.1f%%"), i.perPartition(), byNode(i.RSSMiB, "%.0f MiB"))
	fmt.Printf("    %s; command: %s\n", i.kafkaLoad, command)
	fmt.Printf("  tapes / Kafka, idle CPU per partition: %.2f (goal: below 1)\n", tapesPct/float64(parts)/i.perPartition())
}
