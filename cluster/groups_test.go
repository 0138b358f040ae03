package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/tapes-dev/tapes/internal/assign"
	"github.com/tapes-dev/tapes/internal/client"
	"github.com/tapes-dev/tapes/internal/consumerproto"
	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/kerr"
	"github.com/tapes-dev/tapes/internal/testcluster"
)

// runGroups runs `cluster groups ARGS` (the caller adds --bootstrap-server
// or --dir).
func runGroups(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := (&groupsCommand{stdout: &out, stderr: &errOut}).Run(cmdCtx(t), args)
	return out.String(), errOut.String(), err
}

// startGroupsCluster builds brokerd (from the build cache, normally in a
// second or two) and starts a one-broker cluster of real processes.
func startGroupsCluster(t *testing.T) *testcluster.Env {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go tool to build brokerd")
	}
	bin := t.TempDir()
	if out, err := exec.Command("go", "build", "-o", filepath.Join(bin, "brokerd"), "github.com/tapes-dev/tapes/brokerd").CombinedOutput(); err != nil {
		t.Fatalf("go build brokerd: %v\n%s", err, out)
	}
	args := append(slices.Clone(testcluster.FastBrokerArgs), "--offsets-topic-partitions", "1", "--log-level", "warn")
	return testcluster.Start(t, bin, 1, args...)
}

// columnStarts returns where each column of a tabwriter table's header line
// starts (columns are separated by two or more spaces).
func columnStarts(header string) []int {
	var starts []int
	for i := 0; i < len(header); i++ {
		if header[i] != ' ' && (i == 0 || (i >= 2 && header[i-1] == ' ' && header[i-2] == ' ')) {
			starts = append(starts, i)
		}
	}
	return starts
}

// tableCells splits a table's lines into cells at the header's column
// starts, checking that every line is aligned with the header.
func tableCells(t *testing.T, out string, header string) [][]string {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if strings.Join(strings.Fields(lines[0]), " ") != header {
		t.Fatalf("header line %q, want the columns %q; output:\n%s", lines[0], header, out)
	}
	starts := columnStarts(lines[0])
	var rows [][]string
	for _, l := range lines[1:] {
		var cells []string
		for i, s := range starts {
			end := len(l)
			if i+1 < len(starts) {
				end = starts[i+1]
			}
			if s >= len(l) || end > len(l) || (s > 0 && l[s-1] != ' ') || (end < len(l) && l[end-1] != ' ') {
				t.Fatalf("line %q is not aligned with the header %q", l, lines[0])
			}
			cells = append(cells, strings.TrimSpace(l[s:end]))
		}
		rows = append(rows, cells)
	}
	return rows
}

// committedOffsets returns the group's committed offsets of topic by
// partition.
func committedOffsets(t *testing.T, cl *client.Client, group string) map[string]int64 {
	t.Helper()
	offs, err := cl.OffsetFetch(cmdCtx(t), group, nil)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, o := range offs {
		out[fmt.Sprintf("%s-%d", o.Topic, o.Partition)] = o.Offset
	}
	return out
}

// TestGroupsCommands runs list, describe, reset-offsets and sink stats
// --group against one real broker. The group demo has one member
// (consumer-1) owning orders-0, -1 and -3, and committed orders-0 at 2 and
// orders-1 at 3:
//
//	partition  records  committed  owned
//	0          5        2          yes   (lag 3; the record at 2 is two hours old)
//	1          3        3          yes   (lag 0)
//	2          2        -          no
//	3          0        -          yes
func TestGroupsCommands(t *testing.T) {
	e := startGroupsCluster(t)
	bootstrap := strings.Join(e.C.Bootstrap(), ",")
	cl := e.Client
	e.CreateTopic("orders", 4, 1, nil)
	base := time.Now().Add(-2 * time.Hour).Truncate(time.Second)
	produce := func(p int32, n int) {
		recs := make([]*tapesv1.Record, n)
		for i := range recs {
			recs[i] = &tapesv1.Record{TimestampMs: base.Add(time.Duration(i) * time.Second).UnixMilli(), Value: []byte(fmt.Sprint(i))}
		}
		if _, err := cl.Produce(cmdCtx(t), &tapesv1.ProduceRequest{Topic: "orders", Partition: p, Acks: -1, Records: recs}); err != nil {
			t.Fatal(err)
		}
	}
	produce(0, 5)
	produce(1, 3)
	produce(2, 2)

	ctx := cmdCtx(t)
	join := &tapesv1.JoinGroupRequest{GroupId: "demo", ClientId: "consumer-1", ProtocolType: "consumer",
		Protocols:        []*tapesv1.JoinGroupProtocol{{Name: "range", Metadata: consumerproto.EncodeSubscription(consumerproto.Subscription{Topics: []string{"orders"}, Generation: -1})}},
		SessionTimeoutMs: 120000, RebalanceTimeoutMs: 10000}
	_, err := cl.JoinGroup(ctx, join)
	member, ok := client.MemberIDFrom(err)
	if !ok {
		t.Fatalf("first join: %v; want MEMBER_ID_REQUIRED", err)
	}
	join.MemberId = member
	jr, err := cl.JoinGroup(ctx, join)
	if err != nil || jr.LeaderId != member {
		t.Fatalf("join: %+v %v", jr, err)
	}
	gen := jr.GenerationId
	if _, err := cl.SyncGroup(ctx, &tapesv1.SyncGroupRequest{GroupId: "demo", GenerationId: gen, MemberId: member,
		Assignments: []*tapesv1.MemberAssignment{{MemberId: member,
			Assignment: consumerproto.EncodeAssignment([]assign.TopicPartition{{Topic: "orders", Partition: 3}, {Topic: "orders", Partition: 0}, {Topic: "orders", Partition: 1}}, 3)}}}, time.Second); err != nil {
		t.Fatalf("sync: %v", err)
	}
	if err := cl.OffsetCommit(ctx, &tapesv1.OffsetCommitRequest{GroupId: "demo", GenerationId: gen, MemberId: member,
		Offsets: []*tapesv1.OffsetCommitPartition{{Topic: "orders", Partition: 0, Offset: 2}, {Topic: "orders", Partition: 1, Offset: 3}}}); err != nil {
		t.Fatalf("commit: %v", err)
	}
	d, err := cl.DescribeGroup(ctx, "demo")
	if err != nil || d.State != "Stable" || len(d.Members) != 1 {
		t.Fatalf("describe through the client: %+v, %v", d, err)
	}
	host := d.Members[0].Host

	t.Run("list", func(t *testing.T) {
		out, _, err := runGroups(t, "list", "--bootstrap-server", bootstrap)
		if want := "GROUP  STATE   COORDINATOR\ndemo   Stable  1\n"; err != nil || out != want {
			t.Fatalf("groups list =\n%s(err %v)\nwant\n%s", out, err, want)
		}
	})

	t.Run("describe", func(t *testing.T) {
		out, stderr, err := runGroups(t, "describe", "demo", "--dir", e.Dir)
		if err != nil {
			t.Fatalf("describe: %v\n%s", err, stderr)
		}
		t.Logf("groups describe demo:\n%s", out)
		rows := tableCells(t, out, "GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG CONSUMER-ID HOST CLIENT-ID LAG-TIME")
		want := [][]string{
			{"demo", "orders", "0", "2", "5", "3", member, host, "consumer-1", "?"},
			{"demo", "orders", "1", "3", "3", "0", member, host, "consumer-1", "0s"},
			{"demo", "orders", "2", "-", "2", "-", "-", "-", "-", "-"},
			{"demo", "orders", "3", "-", "0", "-", member, host, "consumer-1", "-"},
		}
		if len(rows) == 4 {
			// The record at orders-0's committed offset 2 was stamped
			// base+2s: two hours old, give or take the test's duration.
			age, err := time.ParseDuration(rows[0][9])
			if expect := time.Since(base.Add(2 * time.Second)); err != nil || age < expect-time.Minute || age > expect+time.Second {
				t.Fatalf("LAG-TIME of orders-0 = %q, want about %v", rows[0][9], expect)
			}
			want[0][9] = rows[0][9]
		}
		if !reflect.DeepEqual(rows, want) {
			t.Fatalf("describe rows:\n%q\nwant\n%q", rows, want)
		}
		if stderr != "" {
			t.Fatalf("describe of a stable group wrote to stderr: %q", stderr)
		}

		out, _, err = runGroups(t, "describe", "demo", "--members", "--bootstrap-server", bootstrap)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("groups describe demo --members:\n%s", out)
		rows = tableCells(t, out, "GROUP CONSUMER-ID HOST CLIENT-ID #PARTITIONS ASSIGNMENT")
		if want := [][]string{{"demo", member, host, "consumer-1", "3", "orders(0,1,3)"}}; !reflect.DeepEqual(rows, want) {
			t.Fatalf("describe --members rows %q, want %q", rows, want)
		}

		out, _, err = runGroups(t, "describe", "--state", "demo", "--bootstrap-server", bootstrap)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("groups describe demo --state:\n%s", out)
		rows = tableCells(t, out, "GROUP COORDINATOR (ID) ASSIGNMENT-STRATEGY STATE GENERATION #MEMBERS")
		if want := [][]string{{"demo", e.C.Bootstrap()[0] + " (1)", "range", "Stable", fmt.Sprint(gen), "1"}}; !reflect.DeepEqual(rows, want) {
			t.Fatalf("describe --state rows %q, want %q", rows, want)
		}
	})

	t.Run("describe missing group", func(t *testing.T) {
		for _, args := range [][]string{{"ghost"}, {"ghost", "--members"}, {"ghost", "--state"}} {
			out, _, err := runGroups(t, append([]string{"describe", "--bootstrap-server", bootstrap}, args...)...)
			if !kerr.Is(err, kerr.GroupIDNotFound) || !strings.Contains(err.Error(), "group ghost does not exist") || out != "" {
				t.Fatalf("describe %q = %q, %v; want GROUP_ID_NOT_FOUND: group ghost does not exist", args, out, err)
			}
		}
	})

	t.Run("sink stats with --group", func(t *testing.T) {
		db, _, _ := sinkFixture(t)
		out, err := runSink(t, "stats", db, "--group", "demo", "--topic", "orders", "--bootstrap-server", bootstrap)
		// Lag: 3 on orders-0, 0 on orders-1, 2 on orders-2 (nothing
		// committed: from the log start), 0 on orders-3.
		want := fmt.Sprintf("Delivered        5\nDuplicates       1\nNever processed  -\nOut of key order 1\n"+
			"Total lag        5\nActive consumers 1\nGeneration       %d\n", gen)
		if err != nil || out != want {
			t.Fatalf("sink stats --group =\n%s(err %v)\nwant\n%s", out, err, want)
		}
		out, err = runSink(t, "stats", db, "--group", "demo", "--topic", "orders", "--dir", e.Dir, "--json")
		for _, field := range []string{`"total_lag": 5`, `"active_consumers": 1`, fmt.Sprintf(`"generation": %d`, gen), `"group": "demo"`, `"delivered": 5`} {
			if err != nil || !strings.Contains(out, field) {
				t.Fatalf("sink stats --group --json lacks %s:\n%s(err %v)", field, out, err)
			}
		}
		if _, err := runSink(t, "stats", db, "--group", "ghost", "--topic", "orders", "--bootstrap-server", bootstrap); !kerr.Is(err, kerr.GroupIDNotFound) {
			t.Fatalf("sink stats of a missing group: %v", err)
		}
		if _, err := runSink(t, "stats", db, "--group", "demo", "--topic", "nope", "--bootstrap-server", bootstrap); !kerr.Is(err, kerr.UnknownTopicOrPartition) {
			t.Fatalf("sink stats of a missing topic: %v", err)
		}
	})

	reset := func(t *testing.T, args ...string) (string, error) {
		t.Helper()
		out, _, err := runGroups(t, append([]string{"reset-offsets", "demo", "--topic", "orders", "--bootstrap-server", bootstrap}, args...)...)
		return out, err
	}
	before := map[string]int64{"orders-0": 2, "orders-1": 3}

	t.Run("reset-offsets refused while the member is in", func(t *testing.T) {
		for _, args := range [][]string{{"--to-earliest"}, {"--to-earliest", "--execute"}} {
			out, err := reset(t, args...)
			if err == nil || out != "" || !strings.Contains(err.Error(), "group demo has 1 active member (state Stable): stop them first") {
				t.Fatalf("reset-offsets %q with a member = %q, %v", args, out, err)
			}
		}
		if got := committedOffsets(t, cl, "demo"); !reflect.DeepEqual(got, before) {
			t.Fatalf("offsets after a refused reset: %v, want %v", got, before)
		}
	})

	if err := cl.LeaveGroup(ctx, "demo", member); err != nil {
		t.Fatal(err)
	}
	e.WaitFor(10*time.Second, "the group to be empty", func() bool {
		d, err := cl.DescribeGroup(ctx, "demo")
		return err == nil && d.State == "Empty"
	})

	t.Run("describe empty group", func(t *testing.T) {
		out, stderr, err := runGroups(t, "describe", "demo", "--bootstrap-server", bootstrap)
		if err != nil {
			t.Fatal(err)
		}
		rows := tableCells(t, out, "GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG CONSUMER-ID HOST CLIENT-ID LAG-TIME")
		if len(rows) != 4 || rows[0][6] != "-" || rows[1][3] != "3" || rows[3][7] != "-" {
			t.Fatalf("describe of the empty group:\n%s", out)
		}
		if stderr != "Consumer group 'demo' has no active members.\n" {
			t.Fatalf("stderr = %q", stderr)
		}
		out, _, err = runGroups(t, "list", "--bootstrap-server", bootstrap)
		if want := "GROUP  STATE  COORDINATOR\ndemo   Empty  1\n"; err != nil || out != want {
			t.Fatalf("groups list =\n%s(err %v)\nwant\n%s", out, err, want)
		}
	})

	t.Run("reset-offsets", func(t *testing.T) {
		// A dry run prints and commits nothing.
		out, err := reset(t, "--to-earliest")
		want := "GROUP  TOPIC   PARTITION  NEW-OFFSET  CURRENT-OFFSET\n" +
			"demo   orders  0          0           2\n" +
			"demo   orders  1          0           3\n" +
			"demo   orders  2          0           -\n" +
			"demo   orders  3          0           -\n" +
			"\nDry run: nothing was committed. Run the same command with --execute to commit these offsets.\n"
		if err != nil || out != want {
			t.Fatalf("dry run =\n%s(err %v)\nwant\n%s", out, err, want)
		}
		if got := committedOffsets(t, cl, "demo"); !reflect.DeepEqual(got, before) {
			t.Fatalf("offsets after a dry run: %v, want %v", got, before)
		}

		steps := []struct {
			args []string
			want map[string]int64
		}{
			{[]string{"--to-earliest", "--execute"}, map[string]int64{"orders-0": 0, "orders-1": 0, "orders-2": 0, "orders-3": 0}},
			{[]string{"--to-latest", "--execute"}, map[string]int64{"orders-0": 5, "orders-1": 3, "orders-2": 2, "orders-3": 0}},
			{[]string{"--to-offset", "1", "--execute"}, map[string]int64{"orders-0": 1, "orders-1": 1, "orders-2": 1, "orders-3": 0}},
			// Clamped to the log end.
			{[]string{"--to-offset", "4", "--execute"}, map[string]int64{"orders-0": 4, "orders-1": 3, "orders-2": 2, "orders-3": 0}},
			// Clamped to the log start.
			{[]string{"--shift-by", "-3", "--execute"}, map[string]int64{"orders-0": 1, "orders-1": 0, "orders-2": 0, "orders-3": 0}},
			{[]string{"--shift-by", "2", "--execute"}, map[string]int64{"orders-0": 3, "orders-1": 2, "orders-2": 2, "orders-3": 0}},
			// Only the listed partitions.
			{[]string{"--to-offset", "0", "--execute", "--topic", "orders:0,2"}, map[string]int64{"orders-0": 0, "orders-1": 2, "orders-2": 0, "orders-3": 0}},
			// The first record stamped at or after base+2.5s is orders-0's
			// offset 3; the other partitions have none that recent: log end.
			{[]string{"--to-datetime", base.Add(2500 * time.Millisecond).UTC().Format(time.RFC3339Nano), "--execute"},
				map[string]int64{"orders-0": 3, "orders-1": 3, "orders-2": 2, "orders-3": 0}},
			{[]string{"--to-datetime", base.Add(time.Second).Format("2006-01-02T15:04:05.000"), "--execute"},
				map[string]int64{"orders-0": 1, "orders-1": 1, "orders-2": 1, "orders-3": 0}},
		}
		for _, s := range steps {
			out, err = reset(t, s.args...)
			if err != nil || strings.Contains(out, "Dry run") {
				t.Fatalf("reset-offsets %q = %q, %v", s.args, out, err)
			}
			if got := committedOffsets(t, cl, "demo"); !reflect.DeepEqual(got, s.want) {
				t.Fatalf("after reset-offsets %q: %v, want %v\n%s", s.args, got, s.want, out)
			}
		}
		t.Logf("last reset-offsets output:\n%s", out)

		// --shift-by needs a committed offset on every partition.
		_, _, err = runGroups(t, "reset-offsets", "fresh", "--topic", "orders", "--shift-by", "1", "--execute", "--bootstrap-server", bootstrap)
		if err == nil || !strings.Contains(err.Error(), "--shift-by 1: group fresh has no committed offset for orders-0, orders-1, orders-2, orders-3") {
			t.Fatalf("shift-by without commits: %v", err)
		}
		if _, err := cl.DescribeGroup(ctx, "fresh"); err != nil {
			t.Fatal(err)
		}
		// Into a group that does not exist yet: created with the offsets.
		if _, _, err := runGroups(t, "reset-offsets", "fresh", "--topic", "orders:1", "--to-latest", "--execute", "--bootstrap-server", bootstrap); err != nil {
			t.Fatal(err)
		}
		if got := committedOffsets(t, cl, "fresh"); !reflect.DeepEqual(got, map[string]int64{"orders-1": 3}) {
			t.Fatalf("fresh after reset: %v", got)
		}

		// Mistakes the cluster reveals commit nothing.
		committed := committedOffsets(t, cl, "demo")
		for _, c := range []struct {
			args []string
			code kerr.Code
			text string
		}{
			{[]string{"--to-earliest", "--execute", "--topic", "nope"}, kerr.UnknownTopicOrPartition, "nope"},
			{[]string{"--to-earliest", "--execute", "--topic", "orders:1,7,9"}, kerr.UnknownTopicOrPartition, "no partition 7, 9"},
		} {
			if _, err := reset(t, c.args...); !kerr.Is(err, c.code) || !strings.Contains(err.Error(), c.text) {
				t.Errorf("reset-offsets %q = %v, want %s naming %q", c.args, err, c.code, c.text)
			}
		}
		if got := committedOffsets(t, cl, "demo"); !reflect.DeepEqual(got, committed) {
			t.Fatalf("offsets changed by failed resets: %v, was %v", got, committed)
		}
	})
}

// TestGroupsCommandLineMistakes: every case fails before dialing.
func TestGroupsCommandLineMistakes(t *testing.T) {
	const nowhere = "127.0.0.1:1"
	cases := []struct {
		args []string
		text string // the error names this
	}{
		{[]string{}, "missing action"},
		{[]string{"frobnicate"}, "frobnicate"},
		{[]string{"list", "extra"}, "extra"},
		{[]string{"describe"}, "GROUP"},
		{[]string{"describe", "a", "b"}, "GROUP"},
		{[]string{"describe", "a", "--members", "--state"}, "--members and --state"},
		{[]string{"reset-offsets", "--topic", "t", "--to-earliest"}, "GROUP"},
		{[]string{"reset-offsets", "g", "--to-earliest"}, "--topic"},
		{[]string{"reset-offsets", "g", "--topic", "t"}, "--to-earliest"},
		{[]string{"reset-offsets", "g", "--topic", "t", "--to-earliest", "--to-latest"}, "only one"},
		{[]string{"reset-offsets", "g", "--topic", "t", "--to-offset", "1", "--shift-by", "1"}, "only one"},
		{[]string{"reset-offsets", "g", "--topic", "t", "--to-offset", "-1"}, "--to-offset -1"},
		{[]string{"reset-offsets", "g", "--topic", "t", "--to-offset", "x"}, "to-offset"},
		{[]string{"reset-offsets", "g", "--topic", "t", "--shift-by", "1.5"}, "shift-by"},
		{[]string{"reset-offsets", "g", "--topic", "t", "--to-datetime", "yesterday"}, `--to-datetime "yesterday"`},
		{[]string{"reset-offsets", "g", "--topic", "t", "--to-datetime", "2026-11-29 12:00:00"}, `--to-datetime "2026-11-29 12:00:00"`},
		{[]string{"reset-offsets", "g", "--topic", "t", "--to-datetime", "1969-12-31T00:00:00Z"}, "1970"},
		{[]string{"reset-offsets", "g", "--topic", "t:x", "--to-earliest"}, `"x"`},
		{[]string{"reset-offsets", "g", "--topic", ":1", "--to-earliest"}, "no topic name"},
		{[]string{"reset-offsets", "g", "--topic", "t", "--to-earliest", "--execute", "--dry-run"}, "--dry-run"},
	}
	for _, c := range cases {
		args := c.args
		if len(args) > 0 {
			args = append(args, "--bootstrap-server", nowhere)
		}
		out, _, err := runGroups(t, args...)
		if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), c.text) || out != "" {
			t.Errorf("groups %q = %q, %v; want a usage error naming %q", c.args, out, err, c.text)
		}
	}
	var errOut bytes.Buffer
	err := (&groupsCommand{stdout: &bytes.Buffer{}, stderr: &errOut}).Run(context.Background(), []string{"reset-offsets", "--help"})
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("reset-offsets --help = %v", err)
	}
	for _, f := range []string{"-topic", "-to-earliest", "-to-latest", "-to-offset", "-shift-by", "-to-datetime", "-execute", "-dir", "-bootstrap-server"} {
		if !strings.Contains(errOut.String(), f) {
			t.Errorf("reset-offsets --help does not explain %s", f)
		}
	}
}

// joiningGroups is a GroupService whose group is Empty when first
// described and gains a member before the commit: the race between
// reset-offsets' check and its admin commit.
type joiningGroups struct {
	tapesv1.UnimplementedGroupServiceServer
	addr string

	mu        sync.Mutex
	describes int
	commits   int
}

func (g *joiningGroups) FindCoordinator(context.Context, *tapesv1.FindCoordinatorRequest) (*tapesv1.FindCoordinatorResponse, error) {
	return &tapesv1.FindCoordinatorResponse{NodeId: 1, Address: g.addr}, nil
}

func (g *joiningGroups) DescribeGroups(_ context.Context, req *tapesv1.DescribeGroupsRequest) (*tapesv1.DescribeGroupsResponse, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.describes++
	d := &tapesv1.GroupDescription{GroupId: req.GroupIds[0], State: "Empty", CoordinatorId: 1}
	if g.describes > 1 {
		d.State, d.GenerationId = "PreparingRebalance", 2
		d.Members = []*tapesv1.GroupMember{{MemberId: "consumer-1-ab", ClientId: "consumer-1"}}
	}
	return &tapesv1.DescribeGroupsResponse{Groups: []*tapesv1.GroupDescription{d}}, nil
}

func (g *joiningGroups) OffsetFetch(_ context.Context, req *tapesv1.OffsetFetchRequest) (*tapesv1.OffsetFetchResponse, error) {
	resp := &tapesv1.OffsetFetchResponse{}
	for _, tp := range req.Partitions {
		for _, p := range tp.Partitions {
			resp.Offsets = append(resp.Offsets, &tapesv1.CommittedOffset{Topic: tp.Topic, Partition: p, Offset: -1})
		}
	}
	return resp, nil
}

func (g *joiningGroups) OffsetCommit(_ context.Context, req *tapesv1.OffsetCommitRequest) (*tapesv1.OffsetCommitResponse, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.commits++
	return nil, kerr.ToStatus(kerr.New(kerr.UnknownMemberID, "group %s has 1 active members (PreparingRebalance): only they may commit", req.GroupId))
}

// TestGroupsResetOffsetsLosesTheRace: a member joins between the state
// check and the commit; the commit's UNKNOWN_MEMBER_ID is reported as a
// refusal, and nothing is printed.
func TestGroupsResetOffsetsLosesTheRace(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &memBroker{addr: lis.Addr().String(), topics: map[string]*memTopic{}}
	g := &joiningGroups{addr: b.addr}
	srv := grpc.NewServer()
	tapesv1.RegisterBrokerServiceServer(srv, b)
	tapesv1.RegisterGroupServiceServer(srv, g)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	b.addTopic("orders", 2, 1, nil)
	b.append("orders", 0, &tapesv1.Record{Value: []byte("x")})

	out, _, err := runGroups(t, "reset-offsets", "demo", "--topic", "orders", "--to-latest", "--execute", "--bootstrap-server", b.addr)
	if !kerr.Is(err, kerr.UnknownMemberID) || out != "" ||
		!strings.Contains(err.Error(), "reset-offsets: group demo has 1 active member (state PreparingRebalance): stop them first") {
		t.Fatalf("reset-offsets losing the race = %q, %v", out, err)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.commits != 1 {
		t.Fatalf("%d commits, want 1", g.commits)
	}
}
