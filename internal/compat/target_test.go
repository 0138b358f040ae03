//go:build compat

package compat

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tapes-dev/tapes/internal/clitext"
	"github.com/tapes-dev/tapes/internal/eventually"
	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/testcluster"
)

// target is the cluster the client programs run against: a fresh tapes
// cluster (env set), or the Kafka cluster COMPAT_BOOTSTRAP names (env
// nil), whose own answers (franz-go's kadm and kgo) stand in for tapes'
// CLI. Used from the suite's goroutine only.
type target struct {
	bootstrap string
	env       *testcluster.Env // nil against COMPAT_BOOTSTRAP
	binDir    string           // tapes' binaries (cluster), with env
	adm       *kadm.Client     // COMPAT_BOOTSTRAP only
	kcl       *kgo.Client      // COMPAT_BOOTSTRAP only
	// pids are COMPAT_BROKER_PIDS (ID=PID,...): the external brokers the
	// suite may SIGKILL; none known, no broker is killed.
	pids map[int32]int
}

func (tg *target) tapes() bool { return tg.env != nil }

func (tg *target) name() string {
	if tg.tapes() {
		return "tapes"
	}
	return "COMPAT_BOOTSTRAP " + tg.bootstrap
}

// externalTarget connects to COMPAT_BOOTSTRAP.
func externalTarget(t *testing.T, bootstrap string) *target {
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(bootstrap, ",")...), kgo.RequestRetries(20), kgo.RetryTimeout(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	tg := &target{bootstrap: bootstrap, adm: kadm.NewClient(cl), kcl: cl, pids: map[int32]int{}}
	for _, kv := range strings.FieldsFunc(os.Getenv("COMPAT_BROKER_PIDS"), func(r rune) bool { return r == ',' }) {
		id, pid, ok := strings.Cut(kv, "=")
		i, err1 := strconv.Atoi(id)
		p, err2 := strconv.Atoi(pid)
		if !ok || err1 != nil || err2 != nil {
			t.Fatalf("COMPAT_BROKER_PIDS: %q is not ID=PID", kv)
		}
		tg.pids[int32(i)] = p
	}
	return tg
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// createTopic creates topic with RF 3 and min.insync.replicas=2 and waits
// until every partition has a leader.
func (tg *target) createTopic(t *testing.T, topic string, partitions int32) {
	t.Helper()
	cfg := map[string]string{"min.insync.replicas": "2"}
	if tg.tapes() {
		tg.env.CreateTopic(topic, partitions, 3, cfg)
		return
	}
	ctx := ctxFor(t, 60*time.Second)
	v := "2"
	if _, err := tg.adm.CreateTopic(ctx, partitions, 3, map[string]*string{"min.insync.replicas": &v}, topic); err != nil {
		failf(t, "create topic %s: %v", topic, err)
	}
	eventually.Nil(t, 60*time.Second, "leaders of "+topic, func() error {
		parts, err := tg.describeTopic(t, topic)
		if err != nil {
			return err
		}
		if len(parts) != int(partitions) {
			return fmt.Errorf("%d partitions", len(parts))
		}
		for p, row := range parts {
			if row.Leader == "none" || row.Leader == "-1" {
				return fmt.Errorf("partition %d has no leader", p)
			}
		}
		return nil
	})
}

// cli runs tapes' `cluster` against the suite's cluster.
func (tg *target) cli(t *testing.T, args ...string) []byte {
	t.Helper()
	cmd := exec.CommandContext(ctxFor(t, 2*time.Minute), filepath.Join(tg.binDir, "cluster"), append(args, "--dir", tg.env.Dir)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		failf(t, "cluster %s: %v: %s", strings.Join(args, " "), err, tail(errb.Bytes()))
	}
	return out.Bytes()
}

// readBack returns every record of topic from its log start to its end:
// tapes' own reading (`cluster consume --format json`), or franz-go's.
func (tg *target) readBack(t *testing.T, topic string) []Record {
	t.Helper()
	if tg.tapes() {
		out := tg.cli(t, "consume", "--topic", topic, "--from-beginning", "--until-end", "--format", "json")
		var recs []Record
		sc := bufio.NewScanner(bytes.NewReader(out))
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			var l struct {
				Partition int32   `json:"partition"`
				Offset    int64   `json:"offset"`
				Key       *string `json:"key"`
				Value     *string `json:"value"`
			}
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				failf(t, "cluster consume printed %q: %v", sc.Text(), err)
			}
			r := Record{Partition: l.Partition, Offset: l.Offset}
			if l.Key != nil {
				r.Key = *l.Key
			}
			if l.Value != nil {
				r.Value = *l.Value
			}
			recs = append(recs, r)
		}
		return recs
	}
	ctx := ctxFor(t, 2*time.Minute)
	ends, err := tg.adm.ListEndOffsets(ctx, topic)
	if err != nil || ends.Error() != nil {
		failf(t, "end offsets of %s: %v %v", topic, err, ends.Error())
	}
	starts, err := tg.adm.ListStartOffsets(ctx, topic)
	if err != nil || starts.Error() != nil {
		failf(t, "start offsets of %s: %v %v", topic, err, starts.Error())
	}
	parts := map[int32]kgo.Offset{}
	left := 0
	starts.Each(func(o kadm.ListedOffset) {
		end, _ := ends.Lookup(topic, o.Partition)
		if end.Offset > o.Offset {
			parts[o.Partition] = kgo.NewOffset().At(o.Offset)
			left += int(end.Offset - o.Offset)
		}
	})
	var recs []Record
	if left == 0 {
		return recs
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(tg.bootstrap, ",")...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: parts}))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for left > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			failf(t, "reading %s back: %d records short: %v", topic, left, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if end, _ := ends.Lookup(topic, r.Partition); r.Offset < end.Offset {
				recs = append(recs, Record{Partition: r.Partition, Offset: r.Offset, Key: string(r.Key), Value: string(r.Value)})
				left--
			}
		})
	}
	return recs
}

// fill writes n records (record i: key k<i%keys>, value KEY-<i, 6
// digits>, partition i%partitions) with the target's own producer: tapes'
// gRPC Produce, or franz-go's against COMPAT_BOOTSTRAP. So a consumer's
// check needs no Kafka producer, and a record written by tapes' own path
// is read by the Kafka clients.
func (tg *target) fill(t *testing.T, topic string, partitions int32, n, keys int) {
	t.Helper()
	ctx := ctxFor(t, 2*time.Minute)
	_, recs := keyedLines(n, keys)
	if tg.tapes() {
		byPart := map[int32][]*tapesv1.Record{}
		for i, r := range recs {
			p := int32(i) % partitions
			byPart[p] = append(byPart[p], &tapesv1.Record{Key: []byte(r.Key), Value: []byte(r.Value)})
		}
		for p, rs := range byPart {
			for len(rs) > 0 {
				k := min(len(rs), 100)
				if _, err := tg.env.Client.Produce(ctx, &tapesv1.ProduceRequest{Topic: topic, Partition: p, Acks: -1, Records: rs[:k]}); err != nil {
					failf(t, "filling %s-%d through gRPC: %v", topic, p, err)
				}
				rs = rs[k:]
			}
		}
		return
	}
	var krs []*kgo.Record
	for i, r := range recs {
		krs = append(krs, &kgo.Record{Topic: topic, Partition: int32(i) % partitions, Key: []byte(r.Key), Value: []byte(r.Value)})
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(tg.bootstrap, ",")...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(ctx, krs...).FirstErr(); err != nil {
		failf(t, "filling %s through franz-go: %v", topic, err)
	}
}

// partRow is one partition of a topic description, as kafka-topics
// --describe and `cluster topics describe` print it.
type partRow struct{ Leader, Replicas, Isr string }

var partLine = regexp.MustCompile(`Partition:\s*(\d+)\s+Leader:\s*(\S+)\s+Replicas:\s*(\S+)\s+Isr:\s*(\S*)`)

// parseTopicDescribe reads the partition lines of kafka-topics --describe
// or `cluster topics describe`.
func parseTopicDescribe(out []byte) map[int32]partRow {
	rows := map[int32]partRow{}
	for _, m := range partLine.FindAllSubmatch(out, -1) {
		p, _ := strconv.Atoi(string(m[1]))
		rows[int32(p)] = partRow{string(m[2]), string(m[3]), string(m[4])}
	}
	return rows
}

// describeTopic is the target's own description of topic: `cluster topics
// describe`, or kadm's Metadata.
func (tg *target) describeTopic(t *testing.T, topic string) (map[int32]partRow, error) {
	t.Helper()
	if tg.tapes() {
		return parseTopicDescribe(tg.cli(t, "topics", "describe", topic)), nil
	}
	md, err := tg.adm.Metadata(ctxFor(t, 30*time.Second), topic)
	if err != nil {
		return nil, err
	}
	td, ok := md.Topics[topic]
	if !ok || td.Err != nil {
		return nil, fmt.Errorf("topic %s: %v", topic, td.Err)
	}
	rows := map[int32]partRow{}
	for p, pd := range td.Partitions {
		leader := "none"
		if pd.Leader >= 0 {
			leader = strconv.Itoa(int(pd.Leader))
		}
		rows[p] = partRow{leader, clitext.BrokerList(pd.Replicas), clitext.BrokerList(pd.ISR)}
	}
	return rows, nil
}

// groupRow is one partition of a group's offsets, as kafka-consumer-groups
// --describe and `cluster groups describe` print them.
type groupRow struct{ Current, LogEnd, Lag string }

// parseGroupDescribe reads a table whose header names GROUP TOPIC
// PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG, keyed "TOPIC-PARTITION".
func parseGroupDescribe(out []byte) map[string]groupRow {
	rows := map[string]groupRow{}
	var col map[string]int
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if f[0] == "GROUP" {
			col = map[string]int{}
			for i, h := range f {
				col[h] = i
			}
			continue
		}
		if col == nil || len(f) <= col["LAG"] {
			continue
		}
		rows[f[col["TOPIC"]]+"-"+f[col["PARTITION"]]] = groupRow{f[col["CURRENT-OFFSET"]], f[col["LOG-END-OFFSET"]], f[col["LAG"]]}
	}
	return rows
}

// describeGroup is the target's own view of group's offsets on topic:
// `cluster groups describe`, or kadm's committed and end offsets (an
// error from those is returned, for the caller to retry).
func (tg *target) describeGroup(t *testing.T, group, topic string) (map[string]groupRow, error) {
	t.Helper()
	if tg.tapes() {
		return parseGroupDescribe(tg.cli(t, "groups", "describe", group)), nil
	}
	ctx := ctxFor(t, 30*time.Second)
	committed, err := tg.adm.FetchOffsets(ctx, group)
	if err == nil {
		err = committed.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("committed offsets of %s: %w", group, err)
	}
	ends, err := tg.adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("end offsets of %s: %w", topic, err)
	}
	rows := map[string]groupRow{}
	ends.Each(func(o kadm.ListedOffset) {
		row := groupRow{"-", strconv.FormatInt(o.Offset, 10), "-"}
		if c, ok := committed.Lookup(topic, o.Partition); ok && c.At >= 0 {
			row.Current, row.Lag = strconv.FormatInt(c.At, 10), strconv.FormatInt(o.Offset-c.At, 10)
		}
		rows[fmt.Sprintf("%s-%d", topic, o.Partition)] = row
	})
	return rows, nil
}

// requireCaughtUp fails unless group has committed the log end of every
// partition of topic that has records.
func (tg *target) requireCaughtUp(t *testing.T, group, topic string) {
	t.Helper()
	var last map[string]groupRow
	err := eventually.Wait(60*time.Second, func() error {
		var err error
		if last, err = tg.describeGroup(t, group, topic); err != nil {
			return err
		}
		for tp, r := range last {
			if r.LogEnd != "0" && r.Lag != "0" {
				return fmt.Errorf("%s: %+v", tp, r)
			}
		}
		return nil
	})
	if err != nil {
		failf(t, "group %s did not commit the log end of %s: %v (%s)", group, topic, err, fmtRows(last))
	}
}

func fmtRows(rows map[string]groupRow) string {
	var s []string
	for tp, r := range rows {
		s = append(s, fmt.Sprintf("%s current %s end %s lag %s", tp, r.Current, r.LogEnd, r.Lag))
	}
	sort.Strings(s)
	return strings.Join(s, "; ")
}

// leader is the current leader of topic/p.
func (tg *target) leader(t *testing.T, topic string, p int32) int32 {
	t.Helper()
	rows, err := tg.describeTopic(t, topic)
	if err != nil {
		failf(t, "describe %s: %v", topic, err)
	}
	id, err := strconv.Atoi(rows[p].Leader)
	if err != nil {
		failf(t, "%s-%d has no leader (%q)", topic, p, rows[p].Leader)
	}
	return int32(id)
}

// killLeader SIGKILLs the leader of topic/p and returns a function that
// brings it back (tapes: the same broker restarted, its partitions
// settled; COMPAT_BOOTSTRAP: COMPAT_BROKER_RESTART, see restartExternal).
// Against COMPAT_BOOTSTRAP without the leader's PID in COMPAT_BROKER_PIDS
// nothing is killed.
func (tg *target) killLeader(t *testing.T, topic string, p int32) (restart func()) {
	t.Helper()
	id := tg.leader(t, topic, p)
	if tg.tapes() {
		name := testcluster.BrokerName(id)
		if err := tg.env.C.Kill(name); err != nil {
			failf(t, "SIGKILL %s: %v", name, err)
		}
		t.Logf("SIGKILLed broker %d, the leader of %s-%d", id, topic, p)
		return func() {
			if err := tg.env.C.Restart(name); err != nil {
				failf(t, "restart %s: %v", name, err)
			}
			tg.env.WaitSettled(topic, 90*time.Second)
		}
	}
	pid, ok := tg.pids[id]
	if !ok {
		t.Logf("no PID for broker %d in COMPAT_BROKER_PIDS: the leader of %s-%d is not killed", id, topic, p)
		return func() {}
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		failf(t, "SIGKILL broker %d (pid %d): %v", id, pid, err)
	}
	delete(tg.pids, id)
	t.Logf("SIGKILLed broker %d (pid %d), the leader of %s-%d", id, pid, topic, p)
	return func() { tg.restartExternal(t, id) }
}

// restartExternal runs COMPAT_BROKER_RESTART with {id} replaced by id
// (sh -c; its last line of output is the new PID) and waits until the
// broker is back in Metadata. Without it the broker stays down.
func (tg *target) restartExternal(t *testing.T, id int32) {
	t.Helper()
	tmpl := os.Getenv("COMPAT_BROKER_RESTART")
	if tmpl == "" {
		t.Logf("no COMPAT_BROKER_RESTART: broker %d stays down", id)
		return
	}
	out := run(t, time.Minute, "", nil, "sh", "-c", strings.ReplaceAll(tmpl, "{id}", strconv.Itoa(int(id))))
	f := strings.Fields(string(out))
	if len(f) == 0 {
		failf(t, "COMPAT_BROKER_RESTART printed nothing, not a PID")
	}
	pid, err := strconv.Atoi(f[len(f)-1])
	if err != nil {
		failf(t, "COMPAT_BROKER_RESTART printed %q, not a PID last", out)
	}
	tg.pids[id] = pid
	// Kafka lists a killed broker until its session times out, so being
	// listed is not enough: its Kafka port must accept again.
	eventually.Nil(t, 3*time.Minute, fmt.Sprintf("broker %d back", id), func() error {
		bs, err := tg.adm.ListBrokers(ctxFor(t, 10*time.Second))
		if err != nil {
			return err
		}
		for _, b := range bs {
			if b.NodeID == id {
				c, err := net.DialTimeout("tcp", net.JoinHostPort(b.Host, strconv.Itoa(int(b.Port))), 2*time.Second)
				if err != nil {
					return err
				}
				return c.Close()
			}
		}
		return fmt.Errorf("not listed")
	})
	t.Logf("broker %d restarted (pid %d)", id, pid)
}
