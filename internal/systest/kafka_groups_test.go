package systest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	fkerr "github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tapes-dev/tapes/internal/clitext"
	"github.com/tapes-dev/tapes/internal/consumer"
	"github.com/tapes-dev/tapes/internal/eventually"
	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/kerr"
	"github.com/tapes-dev/tapes/internal/producer"
	"github.com/tapes-dev/tapes/internal/testcluster"
)

// kgoMemberEnv, when set, makes the test binary a franz-go group member
// instead of running tests (init below): the mixed-group test re-executes
// itself so that it can SIGKILL that member. The value is
// "BOOTSTRAP GROUP TOPIC HISTORY".
const kgoMemberEnv = "TAPES_SYSTEST_KGO_MEMBER"

// kgoMemberCommit is the offset the franz-go member commits for every
// partition it is given: a fixed position, with its generation, that the
// test compares across kadm and the CLI (the records it processes are in
// its history, not in its commits). It is 0, the log's start: the member's
// first commit may reach the coordinator before franz-go asks for the
// partition's committed offset, and any later position would then make the
// member (and, after its SIGKILL, the members taking its partitions over)
// skip the records below it, which the test requires to be processed.
const kgoMemberCommit = 0

func init() {
	if spec := os.Getenv(kgoMemberEnv); spec != "" {
		os.Exit(runKgoMember(strings.Fields(spec)))
	}
}

// runKgoMember is the franz-go member process: a kgo consumer in group
// args[1] on topic args[2] with the cooperative-sticky balancer and a 3 s
// session. It writes its assigned, revoked and lost partitions to the
// history file args[3] (consumer.HistoryLine, as consumerd does) and
// prints one line per change of its partitions,
//
//	owns member=ID generation=N partitions=0,1,2
//
// and one per commit it makes of kgoMemberCommit, for newly assigned
// partitions at once and for all it owns every second,
//
//	committed member=ID generation=N partitions=0,1 err=<nil>
//
// and a "record" history line for every record it processes. It runs
// until killed.
func runKgoMember(args []string) int {
	if len(args) != 4 {
		fmt.Fprintf(os.Stderr, "%s: want BOOTSTRAP GROUP TOPIC HISTORY, got %q\n", kgoMemberEnv, args)
		return 2
	}
	topic := args[2]
	hist, err := consumer.CreateHistory(args[3])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	historyLine := func(cl *kgo.Client, typ string, ps []int32) {
		_, gen := cl.GroupMetadata()
		if err := hist.Write(consumer.HistoryLine{Type: typ, Consumer: "kgo-member", Generation: gen, Topic: topic, Partitions: ps}); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}
	var (
		mu    sync.Mutex
		owned = map[int32]bool{}
	)
	say := func(format string, a ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(os.Stdout, format+"\n", a...)
	}
	list := func(ps []int32) string {
		slices.Sort(ps)
		s := make([]string, len(ps))
		for i, p := range ps {
			s[i] = strconv.Itoa(int(p))
		}
		return strings.Join(s, ",")
	}
	report := func(cl *kgo.Client) {
		member, gen := cl.GroupMetadata()
		mu.Lock()
		ps := slices.Collect(maps.Keys(owned))
		mu.Unlock()
		say("owns member=%s generation=%d partitions=%s", member, gen, list(ps))
	}
	// drop forgets the partitions of a revoked or lost callback.
	drop := func(typ string) func(context.Context, *kgo.Client, map[string][]int32) {
		return func(_ context.Context, cl *kgo.Client, m map[string][]int32) {
			historyLine(cl, typ, m[topic])
			mu.Lock()
			for _, p := range m[topic] {
				delete(owned, p)
			}
			mu.Unlock()
			report(cl)
		}
	}
	toCommit := make(chan []int32, 16)
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(args[0], ",")...), kgo.ClientID("kgo-member"),
		kgo.ConsumerGroup(args[1]), kgo.ConsumeTopics(topic), kgo.Balancers(kgo.CooperativeStickyBalancer()),
		kgo.SessionTimeout(3*time.Second), kgo.HeartbeatInterval(300*time.Millisecond), kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsAssigned(func(_ context.Context, cl *kgo.Client, m map[string][]int32) {
			historyLine(cl, consumer.HistoryAssigned, m[topic])
			mu.Lock()
			for _, p := range m[topic] {
				owned[p] = true
			}
			mu.Unlock()
			report(cl)
			if len(m[topic]) > 0 {
				toCommit <- m[topic]
			}
		}),
		kgo.OnPartitionsRevoked(drop(consumer.HistoryRevoked)), kgo.OnPartitionsLost(drop(consumer.HistoryLost)),
	)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	go func() {
		tick := time.NewTicker(time.Second)
		for {
			var ps []int32
			select {
			case ps = <-toCommit:
			case <-tick.C:
				mu.Lock()
				ps = slices.Collect(maps.Keys(owned))
				mu.Unlock()
				if len(ps) == 0 {
					continue
				}
			}
			offs := map[string]map[int32]kgo.EpochOffset{topic: {}}
			for _, p := range ps {
				offs[topic][p] = kgo.EpochOffset{Epoch: -1, Offset: kgoMemberCommit}
			}
			member, _ := cl.GroupMetadata()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			cl.CommitOffsetsSync(ctx, offs, func(_ *kgo.Client, req *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
				if err == nil {
					for _, t := range resp.Topics {
						for _, p := range t.Partitions {
							if err == nil {
								err = fkerr.ErrorForCode(p.ErrorCode)
							}
						}
					}
				}
				say("committed member=%s generation=%d partitions=%s err=%v", member, req.Generation, list(ps), err)
			})
			cancel()
		}
	}()
	// The poll loop processes each record by writing its "record" history
	// line, as consumerd does. Rebalances wait for the loop
	// (BlockRebalanceOnPoll, AllowRebalance after the records are
	// written), so a revoked partition's records are all written before
	// its "revoked" line and none after.
	for {
		fs := cl.PollFetches(context.Background())
		_, gen := cl.GroupMetadata()
		fs.EachRecord(func(r *kgo.Record) {
			l := consumer.HistoryLine{Type: consumer.HistoryRecord, Consumer: "kgo-member", Generation: gen, Topic: topic,
				Partition: &r.Partition, Offset: &r.Offset, Value: ptrTo(string(r.Value))}
			if r.Key != nil {
				l.Key = ptrTo(string(r.Key))
			}
			for _, h := range r.Headers {
				if h.Key == "event_id" {
					l.EventID = ptrTo(string(h.Value))
				}
			}
			if err := hist.Write(l); err != nil {
				fmt.Fprintln(os.Stderr, err)
			}
		})
		cl.AllowRebalance()
	}
}

func ptrTo[T any](v T) *T { return &v }

// kgoMember is a running franz-go member process.
type kgoMember struct {
	cmd    *exec.Cmd
	out    *lockedBuffer
	stderr *lockedBuffer
	exited chan struct{}
}

// startKgoMember starts the franz-go member process (runKgoMember) with its
// history in dir/kgo-member.jsonl; it is killed at cleanup.
func startKgoMember(t *testing.T, e *testcluster.Env, dir, group, topic string) *kgoMember {
	t.Helper()
	m := &kgoMember{out: &lockedBuffer{}, stderr: &lockedBuffer{}, exited: make(chan struct{})}
	m.cmd = exec.Command(os.Args[0], "-test.run=^$")
	m.cmd.Env = append(os.Environ(), kgoMemberEnv+"="+strings.Join([]string{strings.Join(e.KafkaBootstrap(), ","), group, topic, filepath.Join(dir, "kgo-member.jsonl")}, " "))
	pr, pw := io.Pipe()
	m.cmd.Stdout, m.cmd.Stderr = pw, m.stderr
	if err := m.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		m.cmd.Wait()
		pw.Close()
		close(m.exited)
	}()
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			m.out.Write([]byte(sc.Text() + "\n"))
		}
	}()
	t.Cleanup(func() {
		select {
		case <-m.exited:
		default:
			m.cmd.Process.Kill()
			<-m.exited
		}
		if t.Failed() {
			t.Logf("franz-go member stdout:\n%s\nstderr (tail):\n%s", m.out.String(), tail(m.stderr.String(), 4000))
		}
	})
	return m
}

// kafkaAdmin returns a franz-go client of e's Kafka listeners, closed at
// cleanup, and kadm over it.
func kafkaAdmin(t *testing.T, e *testcluster.Env) (*kgo.Client, *kadm.Client) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.KafkaBootstrap()...), kgo.RequestRetries(20), kgo.RetryTimeout(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl, kadm.NewClient(cl)
}

// kgoLine is one parsed line of the member's output.
type kgoLine struct {
	kind       string // "owns" or "committed"
	member     string
	generation int32
	partitions []int32
	err        string
}

func (m *kgoMember) lines() []kgoLine {
	var out []kgoLine
	for _, l := range strings.Split(m.out.String(), "\n") {
		f := strings.Fields(l)
		if len(f) < 4 {
			continue
		}
		kl := kgoLine{kind: f[0]}
		for _, kv := range f[1:] {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "member":
				kl.member = v
			case "generation":
				g, _ := strconv.Atoi(v)
				kl.generation = int32(g)
			case "partitions":
				for _, p := range strings.Split(v, ",") {
					if n, err := strconv.Atoi(p); err == nil {
						kl.partitions = append(kl.partitions, int32(n))
					}
				}
			case "err":
				kl.err = v
			}
		}
		out = append(out, kl)
	}
	return out
}

// owns returns the member's latest ownership line.
func (m *kgoMember) owns() (kgoLine, bool) {
	ls := m.lines()
	for i := len(ls) - 1; i >= 0; i-- {
		if ls[i].kind == "owns" {
			return ls[i], true
		}
	}
	return kgoLine{}, false
}

// consumerPartitions decodes a described member's assignment (consumer
// protocol) into partitions of topic.
func consumerPartitions(d *tapesv1.GroupDescription, m *tapesv1.GroupMember, topic string) ([]int32, error) {
	tps, err := clitext.MemberPartitions(d, m)
	if err != nil {
		return nil, err
	}
	var out []int32
	for _, tp := range tps {
		if tp.Topic == topic {
			out = append(out, tp.Partitions...)
		}
	}
	slices.Sort(out)
	return out, nil
}

// mixedGroupAgrees checks that the gRPC DescribeGroups, `cluster groups
// describe --members` and kadm's DescribeGroups show the same Stable
// generation of clients members (by client id) sharing partitions
// 0..n-1 of topic, each exactly once and each member at least one; it
// returns the gRPC description.
func mixedGroupAgrees(t *testing.T, e *testcluster.Env, adm *kadm.Client, group, topic string, n int32, clients []string) (*tapesv1.GroupDescription, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d, err := e.Client.DescribeGroup(ctx, group)
	if err != nil {
		return nil, err
	}
	if d.State != "Stable" || len(d.Members) != len(clients) {
		return nil, fmt.Errorf("group %s is %s with %d members, want Stable with %d", group, d.State, len(d.Members), len(clients))
	}
	grpcParts := map[string][]int32{}
	var ids []string
	seen := map[int32]int{}
	for _, m := range d.Members {
		ps, err := consumerPartitions(d, m, topic)
		if err != nil {
			return nil, fmt.Errorf("member %s: %v", m.MemberId, err)
		}
		if len(ps) == 0 {
			return nil, fmt.Errorf("member %s (%s) owns nothing yet", m.MemberId, m.ClientId)
		}
		for _, p := range ps {
			seen[p]++
		}
		grpcParts[m.MemberId] = ps
		ids = append(ids, m.ClientId)
	}
	slices.Sort(ids)
	if !slices.Equal(ids, clients) {
		return nil, fmt.Errorf("members' client ids %v, want %v", ids, clients)
	}
	if len(seen) != int(n) {
		return nil, fmt.Errorf("partitions assigned %v, want 0..%d each once", seen, n-1)
	}
	for p, k := range seen {
		if k != 1 || p < 0 || p >= n {
			return nil, fmt.Errorf("partition %d assigned %d times", p, k)
		}
	}

	// The CLI's --members table: the same members and decoded assignments.
	out, err := cli(t, e, "", "groups", "describe", group, "--members")
	if err != nil {
		return nil, err
	}
	rows := strings.Split(strings.TrimSpace(out), "\n")
	if len(rows) != len(clients)+1 {
		return nil, fmt.Errorf("cluster groups describe --members:\n%s", out)
	}
	for _, r := range rows[1:] {
		f := strings.Fields(r)
		if len(f) != 6 {
			return nil, fmt.Errorf("row %q", r)
		}
		ps, ok := grpcParts[f[1]]
		if !ok {
			return nil, fmt.Errorf("CLI member %s not in the gRPC description", f[1])
		}
		if want := clitext.Assignment([]*tapesv1.TopicPartitions{{Topic: topic, Partitions: ps}}); f[5] != want || f[4] != strconv.Itoa(len(ps)) {
			return nil, fmt.Errorf("CLI row %q, want assignment %s", r, want)
		}
	}

	// kadm through the Kafka listener: the same.
	dgs, err := adm.DescribeGroups(ctx, group)
	if err != nil {
		return nil, err
	}
	dg := dgs[group]
	if dg.Err != nil || dg.State != "Stable" || dg.ProtocolType != "consumer" || dg.Protocol != d.Protocol || len(dg.Members) != len(clients) {
		return nil, fmt.Errorf("kadm DescribeGroups: err %v state %s protocol %s/%s, %d members", dg.Err, dg.State, dg.ProtocolType, dg.Protocol, len(dg.Members))
	}
	for _, km := range dg.Members {
		a, ok := km.Assigned.AsConsumer()
		if !ok {
			return nil, fmt.Errorf("kadm: member %s's assignment does not decode", km.MemberID)
		}
		var ps []int32
		for _, at := range a.Topics {
			if at.Topic == topic {
				ps = append(ps, at.Partitions...)
			}
		}
		slices.Sort(ps)
		if want, ok := grpcParts[km.MemberID]; !ok || !slices.Equal(ps, want) {
			return nil, fmt.Errorf("kadm: member %s (%s) assigned %v, gRPC says %v", km.MemberID, km.ClientID, ps, want)
		}
		if _, ok := km.Join.AsConsumer(); !ok {
			return nil, fmt.Errorf("kadm: member %s's subscription does not decode", km.MemberID)
		}
	}
	return d, nil
}

// cliRow is one row of `cluster groups describe GROUP`: CURRENT-OFFSET,
// LOG-END-OFFSET and LAG (-1 for "-") and CONSUMER-ID.
type cliRow struct {
	current, end, lag int64
	consumer          string
}

// cliOffsets parses `cluster groups describe GROUP`, by partition.
func cliOffsets(t *testing.T, e *testcluster.Env, group string) (map[int32]cliRow, error) {
	out, err := cli(t, e, "", "groups", "describe", group)
	if err != nil {
		return nil, err
	}
	num := func(s string) int64 {
		if s == "-" {
			return -1
		}
		n, _ := strconv.ParseInt(s, 10, 64)
		return n
	}
	rows := map[int32]cliRow{}
	for _, r := range strings.Split(strings.TrimSpace(out), "\n")[1:] {
		f := strings.Fields(r)
		if len(f) < 7 {
			return nil, fmt.Errorf("row %q", r)
		}
		p, _ := strconv.Atoi(f[2])
		rows[int32(p)] = cliRow{current: num(f[3]), end: num(f[4]), lag: num(f[5]), consumer: f[6]}
	}
	return rows, nil
}

// kadmOffsets is kadm FetchOffsets of group, partition -> offset.
func kadmOffsets(adm *kadm.Client, group, topic string) (map[int32]int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		return nil, err
	}
	if err := resp.Error(); err != nil {
		return nil, err
	}
	offs := map[int32]int64{}
	for p, o := range resp[topic] {
		offs[p] = o.At
	}
	return offs, nil
}

// TestKafkaMixedGroup (issue 10 point 6): one group holds a franz-go
// cooperative-sticky consumer (a process of its own, through the Kafka
// listeners) and two consumerd (gRPC). gRPC DescribeGroups, `cluster
// groups describe --members` and kadm DescribeGroups show the same three
// members and assignments; kadm ListGroups lists the group and kadm
// FetchOffsets equals the CLI's CURRENT-OFFSET column; the franz-go
// member's commits with its generation are accepted, and one with its
// first (stale) generation is ILLEGAL_GENERATION on the Kafka API as on
// gRPC; a simple commit (generation -1) goes into an empty group only. Then
// the franz-go member is SIGKILLed and, after its session timeout, its
// partitions move to the two consumerd.
//
// producerd writes across the SIGKILL; every member writes a "record"
// history line per record it processes (the franz-go member as consumerd
// does). The three histories show no partition owned by two members at
// once (ownershipOverlap), every member's records processed inside its
// own ownership of their partition (processedOutsideOwnership: so no
// partition's record is processed by two members at once), and every
// offset of the log, those producerd wrote included, processed; the
// franz-go member's partitions are processed by the consumerd members
// after its SIGKILL.
func TestKafkaMixedGroup(t *testing.T) {
	e := start(t, 3)
	const topic, grp, n = "orders", "mixed", 6
	e.CreateTopic(topic, n, 3, map[string]string{"min.insync.replicas": "2"})
	for p := int32(0); p < n; p++ {
		e.ProduceN(topic, p, fmt.Sprintf("p%d-", p), 20)
	}
	kcl, adm := kafkaAdmin(t, e)

	// The franz-go member alone: every partition, committed at its
	// generation.
	dir := t.TempDir()
	km := startKgoMember(t, e, dir, grp, topic)
	var first kgoLine
	eventually.Nil(t, 60*time.Second, "the franz-go member to own all 6 partitions", func() error {
		l, ok := km.owns()
		if !ok || len(l.partitions) != n {
			return fmt.Errorf("owns %+v", l)
		}
		first = l
		return nil
	})
	eventually.Nil(t, 30*time.Second, "the franz-go member's first commit", func() error {
		for _, l := range km.lines() {
			if l.kind == "committed" && l.generation == first.generation {
				if l.err != "<nil>" {
					t.Fatalf("commit in generation %d: %s", l.generation, l.err)
				}
				return nil
			}
		}
		return fmt.Errorf("no commit line for generation %d", first.generation)
	})
	t.Logf("franz-go member %s owns %v in generation %d", first.member, first.partitions, first.generation)

	// Two consumerd join: three members share the partitions.
	c1 := startConsumer(t, e, dir, grp, "consumer-1")
	c2 := startConsumer(t, e, dir, grp, "consumer-2")
	var d *tapesv1.GroupDescription
	eventually.Nil(t, 90*time.Second, "gRPC, CLI and kadm to agree on three members sharing 6 partitions", func() error {
		var err error
		d, err = mixedGroupAgrees(t, e, adm, grp, topic, n, []string{"consumer-1", "consumer-2", "kgo-member"})
		if err != nil {
			return err
		}
		// And the franz-go member knows what the group says it owns.
		l, _ := km.owns()
		for _, m := range d.Members {
			if m.MemberId == l.member {
				ps, _ := consumerPartitions(d, m, topic)
				if l.generation != d.GenerationId || !slices.Equal(ps, l.partitions) {
					return fmt.Errorf("franz-go member says %+v, the group generation %d %v", l, d.GenerationId, ps)
				}
				return nil
			}
		}
		return fmt.Errorf("franz-go member %s not in the group", l.member)
	})
	mine, _ := km.owns()
	t.Logf("generation %d: franz-go member owns %v", d.GenerationId, mine.partitions)

	// ListGroups through every broker's Kafka listener.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	listed, err := adm.ListGroups(ctx)
	if err != nil {
		t.Fatalf("kadm ListGroups: %v", err)
	}
	if lg, ok := listed[grp]; !ok || lg.State != "Stable" || lg.ProtocolType != "consumer" {
		t.Fatalf("kadm ListGroups: %+v", listed)
	}

	// A broker that is not the group's coordinator answers NOT_COORDINATOR.
	other := d.CoordinatorId%3 + 1
	hb := kmsg.NewPtrHeartbeatRequest()
	hb.Group, hb.MemberID, hb.Generation = grp, mine.member, mine.generation
	hresp, err := hb.RequestWith(ctx, kcl.Broker(int(other)))
	if err != nil || fkerr.ErrorForCode(hresp.ErrorCode) != fkerr.NotCoordinator {
		t.Fatalf("Heartbeat to broker %d (coordinator %d): %v %+v, want NOT_COORDINATOR", other, d.CoordinatorId, err, hresp)
	}
	hresp, err = hb.RequestWith(ctx, kcl.Broker(int(d.CoordinatorId)))
	if err != nil || hresp.ErrorCode != 0 {
		t.Fatalf("Heartbeat to the coordinator %d: %v %+v", d.CoordinatorId, err, hresp)
	}

	// A commit with the franz-go member's first generation is fenced, on
	// the Kafka API and on gRPC alike.
	stale := kmsg.NewPtrOffsetCommitRequest()
	stale.Group, stale.MemberID, stale.Generation = grp, first.member, first.generation
	st := kmsg.NewOffsetCommitRequestTopic()
	st.Topic = topic
	sp := kmsg.NewOffsetCommitRequestTopicPartition()
	sp.Partition, sp.Offset = mine.partitions[0], 3
	st.Partitions = append(st.Partitions, sp)
	stale.Topics = append(stale.Topics, st)
	sresp, err := stale.RequestWith(ctx, kcl)
	if err != nil {
		t.Fatal(err)
	}
	if code := sresp.Topics[0].Partitions[0].ErrorCode; fkerr.ErrorForCode(code) != fkerr.IllegalGeneration {
		t.Fatalf("Kafka commit with stale generation %d: %v, want ILLEGAL_GENERATION", first.generation, fkerr.ErrorForCode(code))
	}
	err = e.Client.OffsetCommit(ctx, &tapesv1.OffsetCommitRequest{GroupId: grp, MemberId: first.member, GenerationId: first.generation,
		Offsets: []*tapesv1.OffsetCommitPartition{{Topic: topic, Partition: mine.partitions[0], Offset: 3}}})
	if !kerr.Is(err, kerr.IllegalGeneration) {
		t.Fatalf("gRPC commit with stale generation %d: %v, want ILLEGAL_GENERATION", first.generation, err)
	}
	// A simple commit (kadm: generation -1, no member) into the active
	// group is refused; into a group without members it is stored.
	kadmOffs := kadm.Offsets{}
	kadmOffs.Add(kadm.Offset{Topic: topic, Partition: 0, At: 7, LeaderEpoch: -1})
	if resp, err := adm.CommitOffsets(ctx, grp, kadmOffs); err != nil || !fkerrIs(resp.Error(), fkerr.UnknownMemberID) {
		t.Fatalf("kadm CommitOffsets into the active group: %v %v, want UNKNOWN_MEMBER_ID", err, resp.Error())
	}
	if resp, err := adm.CommitOffsets(ctx, "simple", kadmOffs); err != nil || resp.Error() != nil {
		t.Fatalf("kadm CommitOffsets into an empty group: %v %v", err, resp.Error())
	}

	// Offsets: kadm equals the CLI, for the mixed group (the franz-go
	// member's partitions at its commit, the consumerd ones where they got
	// to) and the simple one.
	for _, g := range []string{grp, "simple"} {
		eventually.Nil(t, 60*time.Second, "kadm FetchOffsets to equal cluster groups describe for "+g, func() error {
			a, err := kadmOffsets(adm, g, topic)
			if err != nil {
				return err
			}
			rows, err := cliOffsets(t, e, g)
			if err != nil {
				return err
			}
			b := map[int32]int64{}
			for p, r := range rows {
				b[p] = r.current
			}
			for p, o := range b {
				if _, ok := a[p]; !ok && o == -1 {
					a[p] = -1 // the CLI lists owned partitions without a commit
				}
			}
			if !maps.Equal(a, b) {
				return fmt.Errorf("kadm %v, CLI %v", a, b)
			}
			if g == "simple" && (a[0] != 7 || a[1] != -1) {
				return fmt.Errorf("simple group offsets %v", a)
			}
			if g == grp {
				for _, p := range mine.partitions {
					if a[p] != kgoMemberCommit {
						return fmt.Errorf("franz-go member's partition %d at %d, want its commit %d", p, a[p], kgoMemberCommit)
					}
				}
			}
			return nil
		})
	}

	// kadm's lag (DescribeGroups, OffsetFetch and ListOffsets through the
	// Kafka listeners) equals the CLI's LOG-END-OFFSET, LAG and
	// CONSUMER-ID columns.
	eventually.Nil(t, 60*time.Second, "kadm Lag to equal cluster groups describe", func() error {
		lags, err := adm.Lag(ctx, grp)
		if err != nil {
			return err
		}
		l := lags[grp]
		if err := l.Error(); err != nil {
			return err
		}
		rows, err := cliOffsets(t, e, grp)
		if err != nil {
			return err
		}
		if len(rows) != n {
			return fmt.Errorf("CLI rows %v", rows)
		}
		for p, r := range rows {
			ml, ok := l.Lag.Lookup(topic, p)
			if !ok || ml.Err != nil {
				return fmt.Errorf("kadm lag of partition %d: %v %v", p, ok, ml.Err)
			}
			consumer := "-"
			if ml.Member != nil {
				consumer = ml.Member.MemberID
			}
			if ml.Lag != r.lag || ml.End.Offset != r.end || ml.Commit.At != r.current || consumer != r.consumer {
				return fmt.Errorf("partition %d: kadm commit %d end %d lag %d member %s; CLI %+v", p, ml.Commit.At, ml.End.Offset, ml.Lag, consumer, r)
			}
		}
		return nil
	})

	// Records flow from here on: producerd writes while the franz-go
	// member processes its partitions, then across its SIGKILL.
	prodHist := filepath.Join(dir, "producer-1.producer.jsonl")
	prod := startProducerd(t, e, "--topic", topic, "--rate", "100", "--count", "1500", "--name", "producer-1", "--history", prodHist)
	eventually.Nil(t, 60*time.Second, "the franz-go member to process producerd's records", func() error {
		for _, l := range history(t, dir, "kgo-member") {
			if l.Type == consumer.HistoryRecord && *l.Offset >= 20 {
				return nil
			}
		}
		return errors.New("no record past the first 20 of a partition processed yet")
	})

	// SIGKILL the franz-go member: after its session timeout (3 s) its
	// partitions move to the consumerd members.
	killed := time.Now()
	if err := km.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-km.exited
	waitOwnership(t, e, n, c1, c2)
	moved := time.Since(killed)
	eventually.Nil(t, 30*time.Second, "two members left", func() error {
		_, err := mixedGroupAgrees(t, e, adm, grp, topic, n, []string{"consumer-1", "consumer-2"})
		return err
	})
	// The coordinator counts the session from the member's last
	// heartbeat, which reached it up to one heartbeat interval (300 ms)
	// before the kill: moving earlier than that means the partitions
	// moved for another reason than the expired session.
	if earliest := 3*time.Second - 2*300*time.Millisecond; moved < earliest {
		t.Fatalf("partitions moved %v after the kill, before the 3 s session timeout less two heartbeat intervals (%v)", moved, earliest)
	}
	t.Logf("the franz-go member's partitions %v moved to the consumerd members %v after its SIGKILL", mine.partitions, moved.Round(100*time.Millisecond))

	// No partition was owned by two members at once, by the three
	// histories (the franz-go member's ownership ends at its SIGKILL at
	// the latest).
	hs := map[string][]consumer.HistoryLine{}
	for _, name := range []string{"kgo-member", "consumer-1", "consumer-2"} {
		hs[name] = history(t, dir, name)
	}
	if err := ownershipOverlap(hs, map[string]time.Time{"kgo-member": killed}, time.Now()); err != nil {
		t.Fatal(err)
	}
	for name, h := range hs {
		if len(h) == 0 {
			t.Fatalf("%s wrote no history", name)
		}
	}

	// Every offset of the log is processed, producerd's 1500 included,
	// and the franz-go member's partitions by the consumerd members after
	// the kill; then the histories are read again for the checks.
	prod.wait(90 * time.Second)
	acked := 0
	pl, err := producer.ReadHistoryFile(prodHist)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range pl {
		if l.Status == producer.StatusOK {
			acked++
		}
	}
	if acked != 1500 {
		t.Fatalf("producerd acknowledged %d of its 1500 records", acked)
	}
	eventually.Nil(t, 60*time.Second, "every offset of the log processed", func() error {
		done := map[int32]map[int64]bool{}
		after := map[int32]bool{}
		for name := range hs {
			hs[name] = history(t, dir, name)
			for _, l := range hs[name] {
				if l.Type != consumer.HistoryRecord {
					continue
				}
				if done[*l.Partition] == nil {
					done[*l.Partition] = map[int64]bool{}
				}
				done[*l.Partition][*l.Offset] = true
				if name != "kgo-member" && l.At.After(killed) {
					after[*l.Partition] = true
				}
			}
		}
		for p := int32(0); p < n; p++ {
			hw := e.Partition(topic, p).HighWatermark
			for o := int64(0); o < hw; o++ {
				if !done[p][o] {
					return fmt.Errorf("%s-%d offset %d (of %d) not processed", topic, p, o, hw)
				}
			}
		}
		for _, p := range mine.partitions {
			if !after[p] {
				return fmt.Errorf("the franz-go member's partition %d not processed by a consumerd after the kill", p)
			}
		}
		return nil
	})
	if err := processedOutsideOwnership(hs, map[string]time.Time{"kgo-member": killed}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := ownershipOverlap(hs, map[string]time.Time{"kgo-member": killed}, time.Now()); err != nil {
		t.Fatal(err)
	}
	var kgoRecords int
	for _, l := range hs["kgo-member"] {
		if l.Type == consumer.HistoryRecord {
			kgoRecords++
		}
	}
	t.Logf("every offset processed; the franz-go member processed %d records, each inside its ownership", kgoRecords)
}

// TestProcessedOutsideOwnership: the check above finds a record processed
// after its partition was revoked, or after its member was killed, and
// accepts records inside the ownership.
func TestProcessedOutsideOwnership(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	rec := func(s int, p int32, off int64) consumer.HistoryLine {
		return consumer.HistoryLine{Type: consumer.HistoryRecord, At: at(s), Partition: &p, Offset: &off}
	}
	hs := map[string][]consumer.HistoryLine{"a": {
		{Type: consumer.HistoryAssigned, At: at(0), Partitions: []int32{0, 1}},
		rec(1, 0, 0), rec(2, 1, 0),
		{Type: consumer.HistoryRevoked, At: at(5), Partitions: []int32{1}},
		rec(6, 0, 1),
	}}
	if err := processedOutsideOwnership(hs, nil, at(30)); err != nil {
		t.Fatalf("records inside the ownership: %v", err)
	}
	if err := processedOutsideOwnership(hs, map[string]time.Time{"a": at(5)}, at(30)); err == nil {
		t.Fatal("a record at 6 of a member killed at 5: not found")
	}
	hs["a"] = append(hs["a"], rec(7, 1, 1))
	if err := processedOutsideOwnership(hs, nil, at(30)); err == nil {
		t.Fatal("partition 1 processed after its revocation: not found")
	}
}

// processedOutsideOwnership returns an error naming the first record a
// member processed (a "record" line) at a time it did not own the
// record's partition by its own history (ownership as ownershipOverlap
// reads it). With no overlapping ownership, it means no partition's record
// was processed by two members at once.
func processedOutsideOwnership(histories map[string][]consumer.HistoryLine, ended map[string]time.Time, now time.Time) error {
	for member, h := range histories {
		open := map[int32]time.Time{}
		end := now
		if e, ok := ended[member]; ok {
			end = e
		}
		for _, l := range h {
			switch l.Type {
			case consumer.HistoryAssigned:
				for _, p := range l.Partitions {
					open[p] = l.At
				}
			case consumer.HistoryRevoked, consumer.HistoryLost:
				for _, p := range l.Partitions {
					delete(open, p)
				}
			case consumer.HistoryRecord:
				if _, ok := open[*l.Partition]; !ok || l.At.After(end) {
					return fmt.Errorf("%s processed partition %d offset %d at %v without owning it", member, *l.Partition, *l.Offset, l.At.Format(time.StampMicro))
				}
			}
		}
	}
	return nil
}

// TestOwnershipOverlap: the check above finds a partition owned by two
// members at once, and accepts a hand-over.
func TestOwnershipOverlap(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	line := func(typ string, s int, ps ...int32) consumer.HistoryLine {
		return consumer.HistoryLine{Type: typ, At: at(s), Partitions: ps}
	}
	hs := map[string][]consumer.HistoryLine{
		"a": {line(consumer.HistoryAssigned, 0, 0, 1), line(consumer.HistoryRevoked, 5, 1)},
		"b": {line(consumer.HistoryAssigned, 6, 1)},
	}
	if err := ownershipOverlap(hs, map[string]time.Time{"a": at(20)}, at(30)); err != nil {
		t.Fatalf("hand-over: %v", err)
	}
	hs["b"] = append(hs["b"], line(consumer.HistoryAssigned, 10, 0))
	if err := ownershipOverlap(hs, map[string]time.Time{"a": at(20)}, at(30)); err == nil {
		t.Fatal("partition 0 owned by a until 20 and by b from 10: no overlap found")
	}
	if err := ownershipOverlap(hs, map[string]time.Time{"a": at(9)}, at(30)); err != nil {
		t.Fatalf("a killed at 9, b from 10: %v", err)
	}
}

// ownershipOverlap returns an error naming the first partition that two
// members' histories own at the same time: a member owns a partition from
// its "assigned" line to its "revoked" or "lost" line, or to ended[member]
// (a killed member), or now. Members' clocks are this machine's.
func ownershipOverlap(histories map[string][]consumer.HistoryLine, ended map[string]time.Time, now time.Time) error {
	type span struct {
		member     string
		start, end time.Time
	}
	spans := map[int32][]span{}
	for member, h := range histories {
		open := map[int32]time.Time{}
		for _, l := range h {
			for _, p := range l.Partitions {
				switch l.Type {
				case consumer.HistoryAssigned:
					open[p] = l.At
				case consumer.HistoryRevoked, consumer.HistoryLost:
					if start, ok := open[p]; ok {
						spans[p] = append(spans[p], span{member, start, l.At})
						delete(open, p)
					}
				}
			}
		}
		end, ok := ended[member]
		if !ok {
			end = now
		}
		for p, start := range open {
			spans[p] = append(spans[p], span{member, start, end})
		}
	}
	for p, ss := range spans {
		slices.SortFunc(ss, func(a, b span) int { return a.start.Compare(b.start) })
		for i := 1; i < len(ss); i++ {
			if ss[i].start.Before(ss[i-1].end) {
				return fmt.Errorf("partition %d owned by %s from %v while %s owned it until %v",
					p, ss[i].member, ss[i].start.Format(time.StampMicro), ss[i-1].member, ss[i-1].end.Format(time.StampMicro))
			}
		}
	}
	return nil
}

func fkerrIs(err error, want *fkerr.Error) bool {
	fe, ok := err.(*fkerr.Error)
	return ok && fe == want
}

// TestKafkaGroupCoordinatorFailover: a franz-go member and a consumerd in
// one group; the coordinator's broker is SIGKILLed. The franz-go member
// finds the new coordinator through the Kafka listeners (NOT_COORDINATOR
// or a closed connection, then FindCoordinator) and stays in the group
// under the same member id, its next commit with its generation is
// accepted, and gRPC, the CLI and kadm agree on the group again.
func TestKafkaGroupCoordinatorFailover(t *testing.T) {
	e := start(t, 3)
	const topic, grp, n = "orders", "failover", 3
	e.CreateTopic(topic, n, 3, map[string]string{"min.insync.replicas": "2"})
	_, adm := kafkaAdmin(t, e)
	dir := t.TempDir()
	km := startKgoMember(t, e, dir, grp, topic)
	startConsumer(t, e, dir, grp, "consumer-1")
	clients := []string{"consumer-1", "kgo-member"}
	var d *tapesv1.GroupDescription
	eventually.Nil(t, 90*time.Second, "two members sharing 3 partitions", func() error {
		var err error
		d, err = mixedGroupAgrees(t, e, adm, grp, topic, n, clients)
		return err
	})
	mine, _ := km.owns()
	before := len(km.lines())
	killed := time.Now()
	if err := e.C.Kill(testcluster.BrokerName(d.CoordinatorId)); err != nil {
		t.Fatal(err)
	}
	t.Logf("killed broker %d, the coordinator of %s (generation %d; franz-go member %s owns %v)", d.CoordinatorId, grp, d.GenerationId, mine.member, mine.partitions)
	var took time.Duration
	// Two accepted commits after the kill: the second was sent after the
	// first had been answered, so after the kill, and only a live
	// coordinator accepts it.
	eventually.Nil(t, 60*time.Second, "a commit of the franz-go member accepted by the new coordinator", func() error {
		accepted := 0
		for _, l := range km.lines()[before:] {
			if l.kind == "committed" && l.err == "<nil>" && l.member == mine.member {
				accepted++
			}
		}
		if accepted < 2 {
			return fmt.Errorf("%d accepted commits since the kill", accepted)
		}
		took = time.Since(killed)
		return nil
	})
	// A new admin client: franz-go keeps a group's coordinator cached
	// until the coordinator answers a coordinator error, and a dead one
	// answers nothing (the same against Apache Kafka).
	_, adm2 := kafkaAdmin(t, e)
	eventually.Nil(t, 60*time.Second, "the group on the new coordinator", func() error {
		d2, err := mixedGroupAgrees(t, e, adm2, grp, topic, n, clients)
		if err != nil {
			return err
		}
		if d2.CoordinatorId == d.CoordinatorId {
			return fmt.Errorf("still coordinated by the killed broker %d", d.CoordinatorId)
		}
		for _, m := range d2.Members {
			if m.MemberId == mine.member {
				return nil
			}
		}
		return fmt.Errorf("franz-go member %s is not in the group any more: %v", mine.member, d2.Members)
	})
	t.Logf("two accepted commits of the franz-go member seen %v after the coordinator's SIGKILL (it commits every second)", took.Round(10*time.Millisecond))
}
