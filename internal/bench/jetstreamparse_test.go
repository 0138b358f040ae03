package bench

import (
	"strings"
	"testing"
)

// jsbenchOut is what `jsbench -sync default -r1=false -failover=false -n
// 1000 -async-n 200000` printed on stdout (2026-12-03, this machine).
const jsbenchOut = `{"cpus":2,"go":"go1.26.8","inflight":256,"modes":["default"],"n_async":200000,"n_sync":1000,"nats_go":"v1.55.0","nats_server":"v2.15.2","scenario":"env","size":100,"tmp":"/tmp/jsbench-717238022"}
{"n1":"pid 8697 client 39835 route 46413 http 44887","n2":"pid 8698 client 46869 route 41221 http 35975","n3":"pid 8702 client 38871 route 35261 http 36491","scenario":"cluster","server_sync_always":false,"server_sync_interval":"2m0s","startup_s":0.22623304,"sync":"default"}
{"acked":1000,"capped":false,"client_on":"n2","cpu_harness_pct":64,"cpu_other_pct":30.3,"cpu_steal_pct":2.6,"elapsed_s":0.449083583,"errors":0,"leader":"n2","max_ms":5.5,"mb_per_s":0.22267569732113765,"mean_ms":0.448,"msgs_per_s":2226.7569732113766,"msgs_target":1000,"p50_ms":0.402,"p999_ms":4.329,"p99_ms":1.296,"replicas":3,"scenario":"sync_publish","size":100,"stream":"SYNC_R3","sync":"default","warmup_msgs":200}
{"ack_wait_timedout":false,"acked":200000,"capped":false,"client_on":"n2","cpu_harness_pct":61,"cpu_other_pct":32.5,"cpu_steal_pct":4.7,"elapsed_s":5.905083558,"errors":0,"inflight":256,"leader":"n2","mb_per_s":3.3869122771183653,"msgs_per_s":33869.122771183655,"msgs_target":200000,"replicas":3,"scenario":"async_publish","sent":200000,"size":100,"stream":"ASYNC_R3","stream_msgs":200000,"sync":"default"}
`

// The R3 async_publish line's figures and the cluster line's server PIDs
// are read from jsbench's output.
func TestParseJetStream(t *testing.T) {
	run, err := parseJetStream(jsbenchOut)
	if err != nil {
		t.Fatal(err)
	}
	a := run.async
	if a.Scenario != "async_publish" || a.Sync != "default" || a.Replicas != 3 || a.Acked != 200000 ||
		a.MsgsPerS != 33869.122771183655 || a.MBPerS != 3.3869122771183653 || a.CPUOther != 32.5 || a.CPUHarness != 61 || a.CPUSteal != 4.7 {
		t.Errorf("async row %+v", a)
	}
	if want := []int{8697, 8698, 8702}; len(run.pids) != 3 || run.pids[0] != want[0] || run.pids[1] != want[1] || run.pids[2] != want[2] {
		t.Errorf("server PIDs %v, want %v", run.pids, want)
	}
}

// A run whose async row is missing, skipped, capped or failed, or whose
// output is not JSON, is refused with the reason.
func TestParseJetStreamRefuses(t *testing.T) {
	lines := strings.Split(strings.TrimSpace(jsbenchOut), "\n")
	head := strings.Join(lines[:3], "\n")
	for _, c := range []struct{ out, want string }{
		{head, "no async_publish line"},
		{head + "\n" + strings.Replace(lines[3], `"replicas":3`, `"replicas":1`, 1), "no async_publish line"},
		{head + "\n" + `{"scenario":"async_publish","replicas":3,"sync":"always","skipped":"time budget"}`, "skipped: time budget"},
		{head + "\n" + strings.Replace(lines[3], `"capped":false`, `"capped":true`, 1), "capped true"},
		{head + "\n" + strings.Replace(lines[3], `"errors":0`, `"errors":7`, 1), "7 errors"},
		{strings.Join([]string{lines[0], lines[2], lines[3]}, "\n"), "0 server PIDs"},
		{head + "\nnot json", `line "not json"`},
	} {
		_, err := parseJetStream(c.out)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("parse of ...%q: %v, want an error with %q", c.out[max(0, len(c.out)-80):], err, c.want)
		}
	}
}
