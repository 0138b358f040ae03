package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// jsResult is one JSON line of jsbench's stdout (../shared/peers/jetstream):
// the fields of a scenario the JetStream peer rows print or check.
type jsResult struct {
	Scenario     string  `json:"scenario"`
	Sync         string  `json:"sync"`
	Replicas     int     `json:"replicas"`
	Size         int     `json:"size"`
	Sent         int64   `json:"sent"`
	Acked        int64   `json:"acked"`
	Errors       int64   `json:"errors"`
	ElapsedS     float64 `json:"elapsed_s"`
	MsgsPerS     float64 `json:"msgs_per_s"`
	MBPerS       float64 `json:"mb_per_s"` // 10^6 bytes
	CPUHarness   float64 `json:"cpu_harness_pct"`
	CPUOther     float64 `json:"cpu_other_pct"` // other processes, % of all cores
	CPUSteal     float64 `json:"cpu_steal_pct"`
	Capped       bool    `json:"capped"`
	TimedOut     bool    `json:"ack_wait_timedout"`
	Skipped      string  `json:"skipped"`
	PublishError string  `json:"publish_error"`
	FirstError   string  `json:"first_error"`
	// The "cluster" line's servers: "pid 8697 client 39835 route ...".
	N1 string `json:"n1"`
	N2 string `json:"n2"`
	N3 string `json:"n3"`
}

// jsRun is what one jsbench run printed: its R3 async_publish row and the
// PIDs of the three servers it started.
type jsRun struct {
	async jsResult
	pids  []int
}

var jsServerPID = regexp.MustCompile(`^pid (\d+) `)

// jsonLines is the non-empty lines, trimmed, of a tool's output of one
// JSON object a line (jsbench's stdout, the Kafka peer harness's -json
// file).
func jsonLines(out string) []string {
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	return lines
}

// parseJetStream reads jsbench's stdout (one JSON object a line) and
// returns its Replicas=3 async_publish row and the servers' PIDs. A row
// that was skipped, capped, timed out or had a publish error is refused:
// it is not a throughput figure.
func parseJetStream(stdout string) (jsRun, error) {
	var run jsRun
	found := false
	for _, line := range jsonLines(stdout) {
		var r jsResult
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			return jsRun{}, fmt.Errorf("jsbench line %q: %v", line, err)
		}
		switch {
		case r.Scenario == "cluster":
			for _, s := range []string{r.N1, r.N2, r.N3} {
				m := jsServerPID.FindStringSubmatch(s)
				if m == nil {
					return jsRun{}, fmt.Errorf("jsbench cluster line %q: no server PID in %q", line, s)
				}
				pid, _ := strconv.Atoi(m[1])
				run.pids = append(run.pids, pid)
			}
		case r.Scenario == "async_publish" && r.Replicas == 3:
			run.async, found = r, true
		}
	}
	a := run.async
	switch {
	case !found:
		return jsRun{}, fmt.Errorf("jsbench printed no async_publish line with replicas 3")
	case a.Skipped != "":
		return jsRun{}, fmt.Errorf("jsbench async_publish (sync %s) skipped: %s", a.Sync, a.Skipped)
	case a.PublishError != "" || a.Errors > 0:
		return jsRun{}, fmt.Errorf("jsbench async_publish (sync %s): %d errors, publish error %q, first error %q", a.Sync, a.Errors, a.PublishError, a.FirstError)
	case a.Capped || a.TimedOut:
		return jsRun{}, fmt.Errorf("jsbench async_publish (sync %s): capped %v, acks timed out %v (%d of %d acknowledged)", a.Sync, a.Capped, a.TimedOut, a.Acked, a.Sent)
	case a.Acked <= 0 || a.MsgsPerS <= 0:
		return jsRun{}, fmt.Errorf("jsbench async_publish (sync %s): %d acknowledged, %v msgs/s", a.Sync, a.Acked, a.MsgsPerS)
	case len(run.pids) != 3:
		return jsRun{}, fmt.Errorf("jsbench printed %d server PIDs, want 3 (no cluster line?)", len(run.pids))
	}
	return run, nil
}

// jetStreamRows runs the jsbench binary at bin (TAPES_BENCH_JETSTREAM) once
// with -sync default and once with -sync always, TAPES_BENCH_JETSTREAM_RECORDS
// (default 200,000) 100-byte messages published asynchronously to a
// Replicas=3 file stream (at most 256 unacknowledged, the client on the
// stream leader), and prints each async_publish row beside tapes' row:
// records/s, MB/s (2^20 bytes, as producerd perf's), and the machine's other
// load that jsbench measured (cpu_other_pct, % of all cores); then
// tapes/JetStream records/s against the goals of issue 12 (at least 4x
// default durability, 8x sync_interval: always), printed, not asserted.
// The caller has stopped tapes' cluster; the two runs are sequential, and
// each stops its three servers before it exits, which is checked by their
// PIDs, so no two clusters share the cores.
func jetStreamRows(t *testing.T, bin string, tapes perfResult) {
	t.Helper()
	n := setting("TAPES_BENCH_JETSTREAM_RECORDS", 200_000)
	rates := map[string]float64{}
	for _, mode := range []string{"default", "always"} {
		args := []string{"-sync", mode, "-r1=false", "-failover=false", "-n", "1000", "-async-n", fmt.Sprint(n), "-dir", t.TempDir()}
		cmd := exec.Command(bin, args...)
		var out, errb strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errb
		start := time.Now()
		err := cmd.Run()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s\n%s", bin, strings.Join(args, " "), err, out.String(), errb.String())
		}
		run, err := parseJetStream(out.String())
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", bin, strings.Join(args, " "), err, errb.String())
		}
		a := run.async
		name := "JetStream R3 async, " + map[string]string{"default": "default sync", "always": "sync always"}[mode]
		fmt.Printf("%-36s %12.0f %8.2f   (other processes %.1f%% of the cores, jsbench and its servers %.1f%%, steal %.1f%%%s)\n",
			name, a.MsgsPerS, a.MBPerS*1e6/(1<<20), a.CPUOther, a.CPUHarness, a.CPUSteal, busyNote(a.CPUOther))
		fmt.Printf("    %s %s  (%d acknowledged in %.1f s; whole run %.0f s)\n", bin, strings.Join(args, " "), a.Acked, a.ElapsedS, time.Since(start).Seconds())
		if left := slices.DeleteFunc(slices.Clone(run.pids), func(pid int) bool { return !jsServerRunning(pid) }); len(left) > 0 {
			t.Fatalf("JetStream servers left running after jsbench exited: PIDs %v", left)
		}
		fmt.Printf("    JetStream servers (PIDs %v) gone\n", run.pids)
		rates[mode] = a.MsgsPerS
	}
	fmt.Printf("tapes / JetStream R3 async, records/s: %.2fx default sync (goal: at least 4x), %.2fx sync always (goal: at least 8x)\n",
		tapes.recsPerSec/rates["default"], tapes.recsPerSec/rates["always"])
}

// jsServerRunning says whether pid is a live jsbench server (its command
// line has -serve; a zombie's or a reused PID's does not).
func jsServerRunning(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return err == nil && strings.Contains(string(b), "-serve")
}
