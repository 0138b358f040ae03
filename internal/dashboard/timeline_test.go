package dashboard

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func part(p int32, leader int32, epoch int64, isr ...int32) Partition {
	return Partition{Partition: p, Leader: leader, Epoch: epoch, Replicas: []int32{1, 2, 3}, ISR: isr}
}

func member(client string, parts ...int32) GroupMember {
	return GroupMember{MemberID: client + "-id", ClientID: client, Partitions: parts}
}

// step feeds the differ one snapshot and returns the entries' kinds and
// texts.
func step(d *differ, s Snapshot, procs []procState) []string {
	var out []string
	for _, e := range d.diff(&s, procs, time.Now()) {
		out = append(out, e.Kind+": "+e.Text)
	}
	return out
}

func TestDifferPartitionsAndGroups(t *testing.T) {
	d := newDiffer()
	s := Snapshot{
		Topics: []Topic{{Name: "orders", Partitions: []Partition{part(0, 2, 3, 1, 2, 3), part(1, 3, 4, 1, 2, 3)}}},
		Groups: []Group{{Group: "demo", State: "Stable", Generation: 2, Members: []GroupMember{member("consumer-1", 0, 1, 2, 5), member("consumer-2", 3, 4)}}},
	}
	if got := step(d, s, nil); got != nil {
		t.Fatalf("the first snapshot made entries: %v", got)
	}
	if got := step(d, s, nil); got != nil {
		t.Fatalf("an unchanged snapshot made entries: %v", got)
	}

	// Broker 2 dies: orders-0 gets a new leader and a shorter ISR.
	s.Topics[0].Partitions[0] = part(0, 3, 5, 3, 1)
	if got, want := step(d, s, nil), []string{"leader: orders-0: broker 3 leads, epoch 5", "isr: orders-0 ISR shrank to 1,3"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("failover: %q, want %q", got, want)
	}
	// A broker that has not heard of it yet answers with the old view: no entry.
	s.Topics[0].Partitions[0] = part(0, 2, 3, 1, 2, 3)
	if got := step(d, s, nil); got != nil {
		t.Fatalf("a stale view made entries: %v", got)
	}
	// No leader for a moment, then broker 2 back in the ISR.
	s.Topics[0].Partitions[0] = part(0, -1, 5)
	if got, want := step(d, s, nil), []string{"leader: orders-0: no leader (broker 3 led in epoch 5)"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("no leader: %q, want %q", got, want)
	}
	s.Topics[0].Partitions[0] = part(0, 3, 5, 3, 1, 2)
	if got, want := step(d, s, nil), []string{"leader: orders-0: broker 3 leads, epoch 5", "isr: orders-0 ISR expanded to 1,2,3"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("back: %q, want %q", got, want)
	}

	// consumer-3 joins: two partitions move to it.
	// While it rebalances, nothing is compared.
	s.Groups[0] = Group{Group: "demo", State: "CompletingRebalance", Generation: 4, Members: []GroupMember{member("consumer-1"), member("consumer-2"), member("consumer-3")}}
	if got := step(d, s, nil); got != nil {
		t.Fatalf("a rebalancing group made entries: %v", got)
	}
	s.Groups[0] = Group{Group: "demo", State: "Stable", Generation: 4, Members: []GroupMember{member("consumer-1", 0, 1), member("consumer-2", 3, 4), member("consumer-3", 2, 5)}}
	if got, want := step(d, s, nil), []string{"rebalance: group demo generation 4: consumer-3 joined and got 2, 5; consumer-1 gave up 2, 5"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("join: %q, want %q", got, want)
	}
	// consumer-2 leaves; consumer-1 takes its partitions.
	s.Groups[0] = Group{Group: "demo", State: "Stable", Generation: 5, Members: []GroupMember{member("consumer-1", 0, 1, 3, 4), member("consumer-3", 2, 5)}}
	if got, want := step(d, s, nil), []string{"rebalance: group demo generation 5: consumer-1 got 3, 4; consumer-2 left, giving up 3, 4"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("leave: %q, want %q", got, want)
	}
	// A new generation where nothing moved (the first round of a
	// cooperative rebalance).
	s.Groups[0].Generation = 6
	if got, want := step(d, s, nil), []string{"rebalance: group demo generation 6: no partition moved"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("nothing moved: %q, want %q", got, want)
	}
}

func TestDifferFaults(t *testing.T) {
	d := newDiffer()
	links := func(mode1, mode2 string, delay int64) []Link {
		return []Link{{From: "broker-1", To: "broker-2", Mode: mode1, DelayMs: delay}, {From: "broker-2", To: "broker-1", Mode: mode2}}
	}
	procs := []procState{{Name: "broker-1", Kind: "broker", State: "running", PID: 10}, {Name: "broker-2", Kind: "broker", State: "running", PID: 11}}
	s := Snapshot{Links: links("pass", "pass", 0)}
	step(d, s, procs)

	procs[1].State = "paused"
	if got, want := step(d, s, procs), []string{"fault: broker-2 paused (SIGSTOP)"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("pause: %q, want %q", got, want)
	}
	procs[1].State = "running"
	if got, want := step(d, s, procs), []string{"fault: broker-2 resumed (SIGCONT)"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("resume: %q, want %q", got, want)
	}
	procs[1] = procState{Name: "broker-2", Kind: "broker", State: "exited", LastExit: "signal: killed"}
	if got, want := step(d, s, procs), []string{"fault: broker-2 exited (signal: killed)"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("kill: %q, want %q", got, want)
	}
	procs[1] = procState{Name: "broker-2", Kind: "broker", State: "running", PID: 12}
	// A process seen between its registration and its start.
	procs = append(procs, procState{Name: "producer-1", Kind: "producer", State: "never started"})
	if got, want := step(d, s, procs), []string{"fault: broker-2 restarted (pid 12)"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("restart: %q, want %q", got, want)
	}
	procs[2] = procState{Name: "producer-1", Kind: "producer", State: "running", PID: 20}
	if got, want := step(d, s, procs), []string{"fault: producer-1 started (pid 20)"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("start: %q, want %q", got, want)
	}

	s.Links = links("drop-back", "drop-forward", 0)
	got := step(d, s, procs)
	if len(got) != 1 || !strings.Contains(got[0], "broker-1->broker-2 cut one way (broker-2's answers held)") ||
		!strings.Contains(got[0], "broker-2->broker-1 cut one way (broker-2's requests held)") {
		t.Fatalf("one-way cut: %q", got)
	}
	s.Links = links("blackhole", "drop-forward", 200)
	if got, want := step(d, s, procs), []string{"fault: links: broker-1->broker-2 cut both ways, delayed 200 ms ± 0 ms"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("cut and delay: %q, want %q", got, want)
	}
	s.Links = links("pass", "pass", 0)
	if got, want := step(d, s, procs), []string{"fault: links healed: every link passes bytes both ways, without delay"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("heal: %q, want %q", got, want)
	}
}

func TestCheckAcked(t *testing.T) {
	rec := func(off int64, id string) ackedRecord {
		return ackedRecord{Producer: "producer-1", EventID: id, Offset: off}
	}
	pending := map[int64][]ackedRecord{
		4: {rec(4, "p-4")}, // below from: not judged
		5: {rec(5, "p-5")}, // intact
		6: {rec(6, "p-6")}, // overwritten by another record after a truncation
		7: {rec(7, "p-7")}, // missing below the HW
		// Acknowledged twice: by the isolated old leader (lost), then by
		// the new one (kept).
		8: {rec(8, "p-8"), rec(8, "p-10")},
		9: {rec(9, "p-9")}, // at the end of what was read: not judged yet
	}
	log := map[int64]string{5: "p-5", 6: "q-1", 8: "p-10", 9: "p-9"}
	lost, judged := checkAcked(pending, log, 5, 9)
	if !reflect.DeepEqual(judged, []int64{5, 6, 7, 8}) {
		t.Fatalf("judged %v, want [5 6 7 8]", judged)
	}
	want := []lostRecord{{ackedRecord: rec(6, "p-6"), Found: "q-1"}, {ackedRecord: rec(7, "p-7")}, {ackedRecord: rec(8, "p-8"), Found: "p-10"}}
	if !reflect.DeepEqual(lost, want) {
		t.Fatalf("lost %+v, want %+v", lost, want)
	}

	// The detector: retention drops what it deleted, check forgets what
	// it judged, the text names offsets and producers.
	d := newLostDetector()
	tp := partKey{"orders", 0}
	for off := int64(0); off < 30; off++ {
		d.add(tp, rec(off, "p-"+string(rune('a'+off))))
	}
	if from, ok := d.due(tp, 10, 25); !ok || from != 10 {
		t.Fatalf("due = %d, %v, want 10 (0-9 deleted by retention)", from, ok)
	}
	log = map[int64]string{}
	for off := int64(10); off < 25; off++ {
		log[off] = "p-" + string(rune('a'+off))
	}
	for _, off := range []int64{12, 13, 14, 20} {
		log[off] = "other"
	}
	d.add(tp, ackedRecord{Producer: "producer-2", EventID: "x", Offset: 20})
	got := d.check(tp, log, 10, 25)
	if len(got) != 5 {
		t.Fatalf("lost %+v, want 5", got)
	}
	if text, want := lostText(tp, got), "acks=1: 5 acknowledged records lost on orders-0 (offsets 12-14, 20; producer-1, producer-2)"; text != want {
		t.Fatalf("text %q, want %q", text, want)
	}
	if from, ok := d.due(tp, 10, 40); !ok || from != 25 {
		t.Fatalf("due after the check = %d, %v, want 25", from, ok)
	}
	if _, ok := d.due(tp, 10, 25); ok {
		t.Fatalf("records at or above the HW are due")
	}
	if s := offsetRanges([]int64{1, 3, 5, 7, 9}, 3); s != "1, 3, 5, …" {
		t.Fatalf("offsetRanges capped = %q", s)
	}
}

func TestTailer(t *testing.T) {
	path := filepath.Join(t.TempDir(), "h.jsonl")
	tl := newTailer(path, false)
	if lines, _, err := tl.lines(); err != nil || lines != nil {
		t.Fatalf("missing file: %q, %v", lines, err)
	}
	write := func(s string, flag int) {
		f, err := os.OpenFile(path, flag|os.O_WRONLY|os.O_CREATE, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		f.WriteString(s)
		f.Close()
	}
	write("one\ntwo\nthr", os.O_APPEND)
	lines, reset, err := tl.lines()
	if err != nil || reset || len(lines) != 2 || string(lines[1]) != "two" {
		t.Fatalf("lines = %q, %v, %v", lines, reset, err)
	}
	write("ee\n", os.O_APPEND)
	if lines, _, _ := tl.lines(); len(lines) != 1 || string(lines[0]) != "three" {
		t.Fatalf("the torn line completed = %q", lines)
	}
	write("new\n", os.O_TRUNC)
	if lines, reset, _ := tl.lines(); !reset || len(lines) != 1 || string(lines[0]) != "new" {
		t.Fatalf("after truncation = %q, reset %v", lines, reset)
	}
	if lines, _, _ := newTailer(path, true).lines(); len(lines) != 0 {
		t.Fatalf("from the end = %q", lines)
	}
}

func TestCommitRejected(t *testing.T) {
	e, ok := commitRejected([]byte(`{"type":"commit","consumer":"consumer-2","generation":4,"topic":"orders","offsets":{"2":55,"0":120},"status":"error","error":"ILLEGAL_GENERATION","at":"2026-11-29T12:00:00Z"}`))
	if !ok || e.Kind != KindCommitRejected || e.Text != "consumer-2: commit rejected with ILLEGAL_GENERATION (generation 4; orders 0→120, 2→55)" {
		t.Fatalf("entry = %+v, %v", e, ok)
	}
	for _, l := range []string{
		`{"type":"commit","consumer":"consumer-2","generation":4,"topic":"orders","offsets":{"0":1},"status":"ok","at":"2026-11-29T12:00:00Z"}`,
		`{"type":"record","consumer":"consumer-2","generation":4,"topic":"orders","partition":0,"offset":1,"at":"2026-11-29T12:00:00Z"}`,
		`{"type":"commit",`,
	} {
		if _, ok := commitRejected([]byte(l)); ok {
			t.Fatalf("%s made an entry", l)
		}
	}
}
