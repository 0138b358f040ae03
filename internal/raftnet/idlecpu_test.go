package raftnet

import (
	"flag"
	"fmt"
	"os"
	"runtime/pprof"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

var (
	idleCPU       = flag.Bool("idlecpu", false, "run TestIdleCPU: measure the CPU cost of idle Raft groups")
	idleGroups    = flag.Int("idlecpu.groups", 100, "groups of 3 voters for TestIdleCPU")
	idleCPUWindow = flag.Duration("idlecpu.window", 10*time.Second, "measurement window of TestIdleCPU")
	idleProfile   = flag.String("idlecpu.profile", "", "write a CPU profile of TestIdleCPU's measurement window to this file")
	idleLinger    = flag.Duration("idlecpu.linger", 0, "Config.HeartbeatLinger of TestIdleCPU (0: default, negative: none)")
)

// TestIdleCPU measures what idle groups cost: 100 groups of 3 voters over
// 3 Muxes in this process, Raft timings heartbeat/election/lease 500 ms and
// CommitTimeout 1 s, and reports the process CPU time (user + system, from
// getrusage) per second of wall time. Not part of the normal run:
//
//	go test -run TestIdleCPU -v ./internal/raftnet/ -idlecpu
func TestIdleCPU(t *testing.T) {
	if !*idleCPU {
		t.Skip("measurement; run go test -run TestIdleCPU -v ./internal/raftnet/ -idlecpu")
	}
	tm := timing{
		heartbeat: 500 * time.Millisecond,
		election:  500 * time.Millisecond,
		lease:     500 * time.Millisecond,
		commit:    time.Second,
	}
	c := newCluster(t, 3, Config{HeartbeatLinger: *idleLinger})
	var gs []*group
	for i := range *idleGroups {
		gs = append(gs, c.startGroup(fmt.Sprintf("idle%03d", i), tm, nil, nil))
	}
	leaders := func() map[*group]*member {
		out := make(map[*group]*member)
		for _, g := range gs {
			out[g] = g.leader(t, 30*time.Second)
		}
		return out
	}
	before := leaders()
	time.Sleep(3 * time.Second) // let elections and the first replication settle

	var hb0, calls0, ae0, unary0 int64
	for _, b := range c.brokers {
		hb0 += b.heartbeats.Load()
		calls0 += b.heartbeatCalls.Load()
		ae0 += b.streamAppends.Load()
		unary0 += b.appendCalls.Load()
	}
	if *idleProfile != "" {
		f, err := os.Create(*idleProfile)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			t.Fatal(err)
		}
	}
	cpu0, wall0 := cpuTime(t), time.Now()
	time.Sleep(*idleCPUWindow)
	cpu1, wall1 := cpuTime(t), time.Now()
	if *idleProfile != "" {
		pprof.StopCPUProfile()
	}
	var hb1, calls1, ae1, unary1 int64
	for _, b := range c.brokers {
		hb1 += b.heartbeats.Load()
		calls1 += b.heartbeatCalls.Load()
		ae1 += b.streamAppends.Load()
		unary1 += b.appendCalls.Load()
	}

	after := leaders()
	changed := 0
	perBroker := make(map[raft.ServerID]int)
	for g, l := range after {
		if before[g] != l {
			changed++
		}
		perBroker[l.b.id]++
	}
	wall := wall1.Sub(wall0).Seconds()
	load := (cpu1 - cpu0).Seconds() / wall
	t.Logf("%d idle groups x 3 voters over 3 muxes, %.1f s: CPU %.3f s/s (%.1f%% of one core, %.2f ms/s per group), "+
		"%.0f heartbeats/s and %.0f AppendEntries without entries/s in %.0f messages/s, %.0f AppendEntries calls/s, "+
		"leaders per broker %v, %d groups changed leader",
		len(gs), wall, load, 100*load, 1000*load/float64(len(gs)),
		float64(hb1-hb0)/wall, float64(ae1-ae0)/wall, float64(calls1-calls0)/wall, float64(unary1-unary0)/wall,
		perBroker, changed)

	var wg sync.WaitGroup
	for _, g := range gs {
		for _, m := range g.members {
			wg.Go(func() { m.shutdown(t) })
		}
	}
	wg.Wait()
}

// cpuTime returns the user plus system CPU time of this process.
func cpuTime(t *testing.T) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
