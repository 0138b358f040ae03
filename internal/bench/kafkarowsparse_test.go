package bench

import (
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// kafkabenchOut is written by hand in the shape of what `kafka3.sh bench
// idle failover -runs 1` prints on stdout (scenarios.go, main.go: one
// json.Marshal of a map per line, keys sorted), shortened: the cluster
// line, an idle row and a failover row of two rounds.
const kafkabenchOut = `{"bootstrap":"127.0.0.1:40001,127.0.0.1:40003,127.0.0.1:40005","cluster_id":"AbCdEfGhIjKlMnOpQrStUv","cpus":2,"flush_every_message":false,"heap":"512m","nodes":[{"controller_port":40002,"dir":"/tmp/kafka3-123/n1","id":1,"pid":5101,"port":40001},{"controller_port":40004,"dir":"/tmp/kafka3-123/n2","id":2,"pid":5102,"port":40003},{"controller_port":40006,"dir":"/tmp/kafka3-123/n3","id":3,"pid":5103,"port":40005}],"ready_s":14.2,"run":1,"scenario":"cluster"}
{"broker_cpu_core_pct":{"n1":2.13,"n2":1.87,"n3":2.5},"broker_rss_mib":{"n1":612.3,"n2":598.1,"n3":640},"brokers_cpu_core_pct_total":6.5,"contaminated":true,"cpu_ours_pct":3.4,"cpu_other_pct":12.7,"cpu_steal_pct":0.4,"cpu_window_s":20,"idle_s":20,"load1_before_wait":1.83,"load1_start":0.92,"partitions":100,"quiet_wait_s":180.2,"run":1,"scenario":"idle","time":"2026-12-03T14:30:00Z","topic":"idle-r1","variant":"100_partitions"}
{"contaminated":false,"cpu_ours_pct":41.2,"cpu_other_pct":3.1,"cpu_steal_pct":0.2,"cpu_window_s":71.5,"kill_to_first_ack_ms_max":9912.4,"kill_to_first_ack_ms_median":9650.2,"load1_before_wait":0.81,"load1_start":0.64,"max_gap_ms_max":9913.9,"max_gap_ms_median":9651.5,"probe_log":"/tmp/kafka3-123/failover-probe.log","producer_config":{"acks":"-1","linger.ms":"0"},"quiet_wait_s":12.3,"rounds":[{"acks_before_kill":1520,"errors_in_gap":0,"isr_after":[2,3],"kill_to_first_ack_ms":9650.2,"killed":1,"killed_pid":5101,"killed_was_quorum_leader":false,"max_gap_ms":9651.5,"new_leader":2,"quorum_leader":3,"restart_to_full_isr_s":11.4,"round":1},{"acks_before_kill":3011,"error_samples":["org.apache.kafka.common.errors.NotLeaderOrFollowerException: x"],"errors_in_gap":2,"isr_after":[1,3],"kill_to_first_ack_ms":9912.4,"killed":2,"killed_pid":5102,"killed_was_quorum_leader":true,"max_gap_ms":9913.9,"new_leader":3,"quorum_leader":2,"restart_to_full_isr_s":12.9,"round":2}],"run":1,"scenario":"failover","time":"2026-12-03T14:31:00Z","topic":"failover-r1","variant":"kill_leader_sigkill","verify":{"acked":4500,"dups":0,"end":4500,"mismatch":0,"missing":0,"stored":4500}}
`

// The failover row's rounds, read-back and machine load are read from the
// harness's output.
func TestParseKafkaFailover(t *testing.T) {
	f, err := parseKafkaFailover(kafkabenchOut)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := f.kills(), []time.Duration{9650200 * time.Microsecond, 9912400 * time.Microsecond}; !slices.Equal(got, want) {
		t.Errorf("kills %v, want %v", got, want)
	}
	if got, want := f.gaps(), []time.Duration{9651500 * time.Microsecond, 9913900 * time.Microsecond}; !slices.Equal(got, want) {
		t.Errorf("gaps %v, want %v", got, want)
	}
	r := f.Rounds[1]
	if r.Round != 2 || r.Killed != 2 || !r.KilledWasQuorumLeader || r.ErrorsInGap != 2 || r.NewLeader != 3 || r.RestartToFullISRS != 12.9 || f.Rounds[0].KilledWasQuorumLeader {
		t.Errorf("rounds %+v", f.Rounds)
	}
	if v := f.Verify; v == nil || v.Acked != 4500 || v.Stored != 4500 || v.Missing != 0 || v.Mismatch != 0 || v.Dups != 0 {
		t.Errorf("verify %+v", f.Verify)
	}
	if f.CPUOther != 3.1 || f.Contaminated || f.Load1Start != 0.64 || f.QuietWaitS != 12.3 {
		t.Errorf("load %+v", f.kafkaLoad)
	}
	if got, want := f.kafkaLoad.String(), "load1 0.64 after waiting 12 s for a quiet machine, other processes 3.1% of the machine"; got != want {
		t.Errorf("load %q, want %q", got, want)
	}
}

// The idle row's CPU and RSS per broker are read from the harness's output.
func TestParseKafkaIdle(t *testing.T) {
	i, err := parseKafkaIdle(kafkabenchOut)
	if err != nil {
		t.Fatal(err)
	}
	if i.Partitions != 100 || i.IdleS != 20 || i.CPUTotal != 6.5 || i.perPartition() != 0.065 {
		t.Errorf("idle %+v", i)
	}
	if got, want := byNode(i.CPU, "%.1f%%"), "n1 2.1%, n2 1.9%, n3 2.5%"; got != want {
		t.Errorf("CPU %q, want %q", got, want)
	}
	if got, want := byNode(i.RSSMiB, "%.0f MiB"), "n1 612 MiB, n2 598 MiB, n3 640 MiB"; got != want {
		t.Errorf("RSS %q, want %q", got, want)
	}
	if !i.Contaminated || !strings.HasSuffix(i.kafkaLoad.String(), "(CONTAMINATED: shared machine)") {
		t.Errorf("load %q", i.kafkaLoad)
	}
}

// A row that is missing, has the harness's error, a failed or empty round,
// or the wrong brokers, or output that is not JSON, is refused with the
// reason.
func TestParseKafkaRowsRefuse(t *testing.T) {
	lines := strings.Split(strings.TrimSpace(kafkabenchOut), "\n")
	cluster, idle, failover := lines[0], lines[1], lines[2]
	for _, c := range []struct {
		out, scenario, want string
	}{
		{cluster + "\n" + idle, "failover", "no failover line"},
		{cluster + "\n" + failover, "idle", "no idle line"},
		{cluster + "\n" + strings.Replace(failover, `"contaminated"`, `"error":"only 1 of 2 rounds completed","contaminated"`, 1), "failover", "failover row: only 1 of 2 rounds completed"},
		{cluster + "\n" + strings.Replace(failover, `"kill_to_first_ack_ms":9912.4,`, ``, 1), "failover", "failover round 2: kill_to_first_ack_ms 0"},
		{cluster + "\n" + strings.Replace(failover, `"round":2}`, `"round":2,"error":"no ack within 1m0s of the kill"}`, 1), "failover", `error "no ack within 1m0s of the kill"`},
		{cluster + "\n" + strings.Replace(failover, `"rounds":[`, `"rounds":[],"x":[`, 1), "failover", "failover row: no rounds"},
		{cluster + "\n" + strings.Replace(idle, `"n3":2.5`, `"n3":2.5,"n4":1`, 1), "idle", "4 brokers' CPU"},
		{cluster + "\n" + strings.Replace(idle, `,"n3":2.5`, ``, 1), "idle", "2 brokers' CPU"},
		{cluster + "\n" + strings.Replace(idle, `"partitions":100`, `"partitions":0`, 1), "idle", "0 partitions"},
		{"not json\n" + idle, "idle", `line "not json"`},
	} {
		var err error
		if c.scenario == "failover" {
			_, err = parseKafkaFailover(c.out)
		} else {
			_, err = parseKafkaIdle(c.out)
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("parse of ...%q: %v, want an error with %q", c.out[max(0, len(c.out)-80):], err, c.want)
		}
	}
}

// kafkaBrokersIn finds a live process running kafka.Kafka with a file of
// a given node directory in its command line, and not one of another
// directory.
func TestKafkaBrokersIn(t *testing.T) {
	dir := t.TempDir()
	n1 := filepath.Join(dir, "n1")
	// The shell waits on its builtin read (stdin stays open until the
	// cleanup), so that it never forks: a child between fork and exec
	// would show the same command line.
	cmd := exec.Command("sh", "-c", "read x", "kafka.Kafka", filepath.Join(n1, "server.properties"))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close() })
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	if got := kafkaBrokersIn([]string{n1}); !slices.Equal(got, []int{cmd.Process.Pid}) {
		t.Errorf("kafkaBrokersIn(%s) = %v, want [%d]", n1, got, cmd.Process.Pid)
	}
	if got := kafkaBrokersIn([]string{filepath.Join(dir, "n"), filepath.Join(dir, "n2")}); len(got) != 0 {
		t.Errorf("kafkaBrokersIn(other dirs) = %v, want none", got)
	}
	if !kafkaBrokerRunning(cmd.Process.Pid) {
		t.Errorf("kafkaBrokerRunning(%d) = false", cmd.Process.Pid)
	}
}
