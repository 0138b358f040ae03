package bench

import (
	"os/exec"
	"testing"
	"time"

	"github.com/tapes-dev/tapes/internal/eventually"
)

// The producer's CPU % is its CPU time over its run's wall time.
func TestPerfResultCPUPercent(t *testing.T) {
	for _, c := range []struct {
		cpu, elapsed time.Duration
		want         float64
	}{
		{1500 * time.Millisecond, 2 * time.Second, 75},
		{3 * time.Second, 2 * time.Second, 150}, // a JVM on both cores
		{time.Second, 0, 0},
	} {
		if got := (perfResult{cpu: c.cpu, elapsed: c.elapsed}).cpuPercent(); got != c.want {
			t.Errorf("cpu %v over %v: %v%%, want %v%%", c.cpu, c.elapsed, got, c.want)
		}
	}
}

// runPerfTool records the child's own CPU time: a shell that spins before
// printing the final line has used some, and (one thread) no more than its
// wall time.
func TestRunPerfToolRecordsProducerCPU(t *testing.T) {
	final := "1000 records sent, 500.0 records/sec (0.05 MB/sec), 1.5 ms avg latency, 9.0 ms max latency, 1 ms 50th, 2 ms 95th, 3 ms 99th, 4 ms 99.9th."
	r := runPerfTool(t, "spin", "sh", "-c", `i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done; echo "`+final+`"`)
	if r.records != 1000 || r.p999 != 4 {
		t.Fatalf("parsed %+v", r)
	}
	if r.cpu <= 0 || r.cpu > r.elapsed+50*time.Millisecond {
		t.Fatalf("producer CPU %v over %v of wall time", r.cpu, r.elapsed)
	}
}

// kafkaBrokerRunning is true for a live process running kafka.Kafka and
// false once it is gone.
func TestKafkaBrokerRunning(t *testing.T) {
	cmd := exec.Command("sh", "-c", "sleep 60; :", "kafka.Kafka") // "; :": sh must not exec sleep
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	// the child's command line is the test's until it has exec'd sh
	eventually.True(t, 10*time.Second, "sh ... kafka.Kafka seen running", func() bool { return kafkaBrokerRunning(pid) })
	cmd.Process.Kill()
	cmd.Wait()
	if kafkaBrokerRunning(pid) {
		t.Errorf("pid %d seen running after it was reaped", pid)
	}
	other := exec.Command("sleep", "60")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { other.Process.Kill(); other.Wait() }()
	if kafkaBrokerRunning(other.Process.Pid) {
		t.Errorf("sleep 60 taken for a Kafka broker")
	}
}
