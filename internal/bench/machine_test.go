package bench

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// The machine's load beside every figure: this project's machines are
// shared, and a row measured while other processes used the cores is a
// lower bound, not a figure. A machineWindow is opened when a row starts
// and printed when it ends (called from the test goroutine).
type machineWindow struct {
	at   time.Time
	busy float64 // the machine's busy CPU seconds (user+nice+system) at the start
	ours float64 // CPU seconds of this test process and its reaped children, plus pids, at the start
	pids []int   // the processes the row started (brokers, tools) still running at the start
}

// openMachine starts a window; pids are the row's own processes (brokers),
// whose CPU does not count as the machine's other load.
func openMachine(pids ...int) machineWindow {
	w := machineWindow{at: time.Now(), busy: machineBusy(), pids: pids}
	w.ours = ownCPU(pids)
	return w
}

// started adds processes started after the window opened (their CPU
// until then was zero) to the row's own.
func (w *machineWindow) started(pids ...int) { w.pids = append(w.pids, pids...) }

// String is "machine: load average 1.23 / 0.98 (1 / 5 min), other
// processes 34% of 2 cores over the row" (other = the machine's busy time
// minus this test's, its children's and the row's processes').
func (w machineWindow) String() string {
	elapsed := time.Since(w.at).Seconds()
	capacity := elapsed * float64(runtime.NumCPU())
	other := 0.0
	if capacity > 0 {
		other = 100 * max(0, (machineBusy()-w.busy)-(ownCPU(w.pids)-w.ours)) / capacity
	}
	return fmt.Sprintf("machine: load average %s (1 / 5 min), other processes %.0f%% of %d cores over the row%s",
		loadAverages(), other, runtime.NumCPU(), busyNote(other))
}

// busyNote flags a row measured while other processes held more than a
// tenth of the machine.
func busyNote(otherPct float64) string {
	if otherPct > 10 {
		return " (CONTAMINATED: shared machine, figures are lower bounds)"
	}
	return ""
}

// loadAverages is the 1- and 5-minute load averages from /proc/loadavg.
func loadAverages() string {
	b, err := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if err != nil || len(f) < 2 {
		return "unknown"
	}
	return f[0] + " / " + f[1]
}

// machineBusy is the machine's busy CPU seconds from /proc/stat's first
// line (user, nice, system; loopback traffic's softirq time is charged to
// no process, so it is left out).
func machineBusy() float64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	sum := 0.0
	for _, i := range []int{1, 2, 3} {
		if i < len(f) {
			x, _ := strconv.ParseFloat(f[i], 64)
			sum += x
		}
	}
	const clockTicks = 100 // USER_HZ
	return sum / clockTicks
}

// ownCPU is the CPU seconds of this process with its reaped children and
// of pids (0 for one that is gone).
func ownCPU(pids []int) float64 {
	total := procTimes(os.Getpid(), true)
	for _, p := range pids {
		total += procTimes(p, false)
	}
	return total
}

// procTimes reads utime+stime (and cutime+cstime with children) of pid
// from /proc; 0 when it is gone.
func procTimes(pid int, children bool) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	n := 2
	if children {
		n = 4
	}
	sum := 0.0
	for i := 11; i < 11+n && i < len(f); i++ {
		x, _ := strconv.ParseFloat(f[i], 64)
		sum += x
	}
	const clockTicks = 100 // USER_HZ
	return sum / clockTicks
}

// procStatusKiB reads a "Name:   N kB" field (VmRSS, ...) of pid's
// /proc/PID/status in KiB, or -1.
func procStatusKiB(pid int, field string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	for _, l := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, field+":"); ok {
			if f := strings.Fields(rest); len(f) > 0 {
				n, _ := strconv.ParseInt(f[0], 10, 64)
				return n
			}
		}
	}
	return -1
}

// openFDs counts pid's open file descriptors, or -1.
func openFDs(pid int) int {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return -1
	}
	return len(ents)
}
