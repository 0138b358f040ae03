//go:build compat

package compat

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/tapes-dev/tapes/internal/clitext"
	"github.com/tapes-dev/tapes/internal/eventually"
	"github.com/tapes-dev/tapes/internal/testcluster"
)

// binDir holds tapes' binaries, built once (not against COMPAT_BOOTSTRAP).
var binDir string

func TestMain(m *testing.M) {
	if os.Getenv("COMPAT_BOOTSTRAP") == "" {
		dir, cleanup, err := testcluster.Build()
		if err != nil {
			fmt.Fprintf(os.Stderr, "compat: %v\n", err)
			os.Exit(1)
		}
		binDir = dir
		code := m.Run()
		cleanup()
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// reasons holds each client subtest's first failure or skip message, for
// its result line. Written by failf and skipf on the subtest's goroutine.
var reasons sync.Map // *testing.T -> string

// failf fails t now, keeping msg as the reason its result line gives.
func failf(t *testing.T, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	reasons.LoadOrStore(t, msg)
	t.Fatal(msg)
}

func skipf(t *testing.T, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	reasons.LoadOrStore(t, msg)
	t.Skip(msg)
}

// waitFor polls cond until it returns "" and fails t with what and cond's
// last answer (how far it got) when d passes first.
func waitFor(t *testing.T, d time.Duration, what string, cond func() string) {
	t.Helper()
	last := ""
	err := eventually.WaitEvery(d, 200*time.Millisecond, func() error {
		if last = cond(); last != "" {
			return errors.New(last)
		}
		return nil
	})
	if err != nil {
		failf(t, "no %s within %v: %s", what, d, last)
	}
}

// suite runs the clients one after the other on one cluster and counts
// their results.
type suite struct {
	tg                      *target
	suffix                  string // of every topic and group name
	kcatFilled              bool   // kcatReadTopic's topic is there
	passed, failed, skipped int
}

// client runs fn as subtest name and prints its result line.
func (s *suite) client(t *testing.T, name string, fn func(t *testing.T)) {
	var sub *testing.T
	t.Run(name, func(t *testing.T) {
		sub = t
		fn(t)
	})
	if sub == nil {
		return // not selected by -run
	}
	reason := "see the log above"
	if r, ok := reasons.Load(sub); ok {
		reason = r.(string)
	}
	reason = strings.ReplaceAll(reason, "\n", " | ")
	switch {
	case sub.Skipped():
		s.skipped++
		fmt.Printf("compat: %s skip (%s)\n", name, reason)
	case sub.Failed():
		s.failed++
		fmt.Printf("compat: %s FAIL (%s)\n", name, reason)
	default:
		s.passed++
		fmt.Printf("compat: %s ok\n", name)
	}
}

// TestCompat is the suite: every client against one fresh three-broker
// tapes cluster (or COMPAT_BOOTSTRAP), one result line each.
func TestCompat(t *testing.T) {
	var tg *target
	if b := os.Getenv("COMPAT_BOOTSTRAP"); b != "" {
		tg = externalTarget(t, b)
	} else {
		env := testcluster.Start(t, binDir, 3, testcluster.FastBrokerArgs...)
		tg = &target{bootstrap: strings.Join(env.KafkaBootstrap(), ","), env: env, binDir: binDir}
	}
	fmt.Printf("compat: against %s (Kafka bootstrap %s)\n", tg.name(), tg.bootstrap)
	s := &suite{tg: tg}
	if !tg.tapes() {
		s.suffix = fmt.Sprintf("-%d", time.Now().Unix())
	}

	s.client(t, "kcat -L", s.kcatMetadata)
	s.client(t, "kafka-topics --describe", s.kafkaTopicsDescribe)
	s.client(t, "kcat -P -X acks=all", s.kcatProduce)
	s.client(t, "kcat -C -e", s.kcatConsume)
	s.client(t, "kcat -G", s.kcatGroup)
	s.client(t, "kafka-console-producer/kafka-console-consumer", s.console)
	s.client(t, "kafka-consumer-groups --describe", s.kafkaConsumerGroups)
	s.client(t, "kafka-producer-perf-test", s.perfTest)
	s.client(t, "confluent-kafka (Debian, librdkafka 2.0.2)", func(t *testing.T) {
		need(t, "Debian's python3-confluent-kafka", haveCommand(debianPython, "-c", "import confluent_kafka"))
		s.python(t, debianPython, "confluent", s.name("confluent-debian"))
	})
	s.client(t, "confluent-kafka (PyPI, current librdkafka)", func(t *testing.T) {
		need(t, "confluent-kafka from PyPI", haveCommand(venvPython(), "-c", "import confluent_kafka"))
		s.python(t, venvPython(), "confluent", s.name("confluent-pypi"))
	})
	s.client(t, "kafka-python", func(t *testing.T) {
		need(t, "kafka-python from PyPI", haveCommand(venvPython(), "-c", "import kafka"))
		s.python(t, venvPython(), "kafka-python", s.name("kafka-python"))
	})
	s.client(t, "KafkaJS 2.2.4", s.kafkajs)
	s.client(t, "KafkaJS 2.2.4 admin", s.kafkajsAdmin)
	// Last: against COMPAT_BOOTSTRAP the killed brokers stay down.
	s.client(t, "Java idempotent producer (acks=all) through a leader's SIGKILL", s.javaProducer)
	s.client(t, "Java consumer group (CooperativeStickyAssignor) through a leader's SIGKILL", s.javaGroup)
	s.client(t, "Java transactions (sendOffsetsToTransaction, read_committed) through a leader's SIGKILL; kafka-transactions list/describe", s.javaTransactions)

	fmt.Printf("compat: %d passed, %d failed, %d skipped\n", s.passed, s.failed, s.skipped)
}

// Topics, one per client program, so that a failure leaves nothing in
// another client's way.
const kcatRecords = 300

// name is the topic or group of a client program: "compat-WHAT", and
// against COMPAT_BOOTSTRAP also the run's start time, so that a second
// run on the same Kafka starts from fresh topics too.
func (s *suite) name(what string) string { return "compat-" + what + s.suffix }

func needKcat(t *testing.T) { need(t, "kcat", haveCommand("kcat", "-V")) }

// keyedLines is n lines "KEY:VALUE" as record i of every client program
// has them (key k<i%keys>, value KEY-<i, 6 digits>).
func keyedLines(n, keys int) (string, []Record) {
	var b strings.Builder
	recs := make([]Record, n)
	for i := range n {
		k := fmt.Sprintf("k%d", i%keys)
		recs[i] = Record{Partition: -1, Offset: -1, Key: k, Value: fmt.Sprintf("%s-%06d", k, i)}
		fmt.Fprintf(&b, "%s:%s\n", k, recs[i].Value)
	}
	return b.String(), recs
}

// storedAtLeast reads topic back and fails t unless it holds n records:
// what a consumer step needs from the producer step before it.
func (s *suite) storedAtLeast(t *testing.T, topic string, n int) []Record {
	t.Helper()
	stored := s.tg.readBack(t, topic)
	if len(stored) < n {
		failf(t, "%s holds %d records, want the %d its producer step writes (did it fail?)", topic, len(stored), n)
	}
	return stored
}

func (s *suite) kcatMetadata(t *testing.T) {
	needKcat(t)
	s.tg.createTopic(t, s.name("kcat"), 3)
	s.sameAsDescribe(t, "kcat -L", s.name("kcat"), func() map[int32]partRow { return s.kcatView(t) })
}

// kcatView is kcat -L -J's view of the kcat topic; it fails t when kcat
// does not list every broker's Kafka listener.
func (s *suite) kcatView(t *testing.T) map[int32]partRow {
	t.Helper()
	out := run(t, time.Minute, "", nil, "kcat", "-L", "-J", "-b", s.tg.bootstrap, "-t", s.name("kcat"))
	var md struct {
		Brokers []struct {
			ID   int32  `json:"id"`
			Name string `json:"name"`
		} `json:"brokers"`
		Topics []struct {
			Topic      string `json:"topic"`
			Err        any    `json:"error"`
			Partitions []struct {
				Partition int32 `json:"partition"`
				Leader    int32 `json:"leader"`
				Replicas  []struct {
					ID int32 `json:"id"`
				} `json:"replicas"`
				Isrs []struct {
					ID int32 `json:"id"`
				} `json:"isrs"`
			} `json:"partitions"`
		} `json:"topics"`
	}
	if err := json.Unmarshal(out, &md); err != nil {
		failf(t, "kcat -L -J printed %q: %v", tail(out), err)
	}
	var addrs []string
	for _, b := range md.Brokers {
		addrs = append(addrs, b.Name)
	}
	slices.Sort(addrs)
	if s.tg.tapes() {
		want := slices.Clone(s.tg.env.KafkaBootstrap())
		slices.Sort(want)
		if !slices.Equal(addrs, want) {
			failf(t, "kcat -L lists brokers %v, want every broker's Kafka listener %v", addrs, want)
		}
	} else if len(addrs) == 0 {
		failf(t, "kcat -L lists no broker")
	}
	if len(md.Topics) != 1 || md.Topics[0].Topic != s.name("kcat") {
		failf(t, "kcat -L -t %s lists topics %s", s.name("kcat"), tail(out))
	}
	got := map[int32]partRow{}
	for _, p := range md.Topics[0].Partitions {
		var r, i []int32
		for _, x := range p.Replicas {
			r = append(r, x.ID)
		}
		for _, x := range p.Isrs {
			i = append(i, x.ID)
		}
		got[p.Partition] = partRow{strconv.Itoa(int(p.Leader)), clitext.BrokerList(r), clitext.BrokerList(i)}
	}
	return got
}

// sameAsDescribe fails t unless a client's view of topic's partitions
// (view, run again on each try: right after a topic is created, the
// broker answering may not know its ISR yet, in Kafka too) equals the
// target's own description; ISR as sets (clients list it in Metadata's
// order). Each differing try is logged.
func (s *suite) sameAsDescribe(t *testing.T, who, topic string, view func() map[int32]partRow) {
	t.Helper()
	err := eventually.Wait(30*time.Second, func() error {
		want, err := s.tg.describeTopic(t, topic)
		if err != nil {
			return err
		}
		rows := view()
		if len(rows) != len(want) {
			return fmt.Errorf("%d partitions, want %d", len(rows), len(want))
		}
		for p, w := range want {
			g := rows[p]
			if g.Leader != w.Leader || g.Replicas != w.Replicas || sortedIDs(g.Isr) != sortedIDs(w.Isr) {
				err := fmt.Errorf("partition %d: leader %s replicas %s isr %s, want leader %s replicas %s isr %s",
					p, g.Leader, g.Replicas, g.Isr, w.Leader, w.Replicas, w.Isr)
				t.Logf("%s: %v", who, err)
				return err
			}
		}
		return nil
	})
	if err != nil {
		failf(t, "%s differs from the cluster's own description of %s: %v", who, topic, err)
	}
}

func sortedIDs(s string) string {
	f := strings.Split(s, ",")
	slices.Sort(f)
	return strings.Join(f, ",")
}

func (s *suite) kafkaTopicsDescribe(t *testing.T) {
	needJava(t)
	s.tg.createTopic(t, s.name("topics"), 3)
	name, args := JavaCmd("", topicCommand, "--bootstrap-server", s.tg.bootstrap, "--describe", "--topic", s.name("topics"))
	s.sameAsDescribe(t, "kafka-topics --describe", s.name("topics"), func() map[int32]partRow {
		return parseTopicDescribe(run(t, 2*time.Minute, "", nil, name, args...))
	})
}

func (s *suite) kcatProduce(t *testing.T) {
	needKcat(t)
	input, sent := keyedLines(kcatRecords, 6)
	_, errb, err := runErr(t, 2*time.Minute, input, nil, "kcat", "-P", "-b", s.tg.bootstrap, "-t", s.name("kcat"), "-K:", "-X", "acks=all",
		// A record not delivered within a minute fails kcat (exit 1) rather
		// than waiting for librdkafka's default five.
		"-X", "message.timeout.ms=60000")
	if err != nil || strings.Contains(string(errb), "ERROR") || strings.Contains(string(errb), "failed") {
		failf(t, "kcat -P: %v: %s", err, tail(errb))
	}
	// kcat exits 0 only once every record is delivered: all acknowledged.
	if err := CheckProduced(sent, s.tg.readBack(t, s.name("kcat"))); err != nil {
		failf(t, "%v", err)
	}
}

// kcatFormat prints each record as the REC lines CheckConsumed reads.
const kcatFormat = `REC %p %o %k %s\n`

// kcatReadTopic is the topic kcat -C and -G read: written by the
// target's own producer (fill), so that they do not hang on kcat -P.
func (s *suite) kcatReadTopic(t *testing.T) (string, []Record) {
	t.Helper()
	topic := s.name("kcat-read")
	if !s.kcatFilled {
		s.tg.createTopic(t, topic, 3)
		s.tg.fill(t, topic, 3, kcatRecords, 6)
		s.kcatFilled = true
	}
	return topic, s.storedAtLeast(t, topic, kcatRecords)
}

func (s *suite) kcatConsume(t *testing.T) {
	needKcat(t)
	topic, stored := s.kcatReadTopic(t)
	out := run(t, 2*time.Minute, "", nil, "kcat", "-C", "-b", s.tg.bootstrap, "-t", topic, "-o", "beginning", "-e", "-q", "-f", kcatFormat)
	handled, err := ParseLines(out, "REC")
	if err == nil {
		err = CheckConsumed(stored, handled)
	}
	if err != nil {
		failf(t, "%v", err)
	}
}

func (s *suite) kcatGroup(t *testing.T) {
	needKcat(t)
	topic, stored := s.kcatReadTopic(t)
	group := s.name("kcat-group")
	out := run(t, 2*time.Minute, "", nil, "kcat", "-b", s.tg.bootstrap, "-G", group, "-X", "auto.offset.reset=earliest", "-e", "-q", "-f", kcatFormat, topic)
	handled, err := ParseLines(out, "REC")
	if err == nil {
		err = CheckConsumed(stored, handled)
	}
	if err != nil {
		failf(t, "%v", err)
	}
	s.tg.requireCaughtUp(t, group, topic)
}

// consoleLine is a record as kafka-console-consumer prints it with
// print.partition, print.offset and print.key.
var consoleLine = regexp.MustCompile(`^Partition:(\d+)\s+Offset:(\d+)\s+(\S+)\s+(\S+)$`)

func (s *suite) console(t *testing.T) {
	needJava(t)
	s.tg.createTopic(t, s.name("console"), 3)
	n := 200
	input, sent := keyedLines(n, 5)
	name, args := JavaCmd("", consoleProducer, "--bootstrap-server", s.tg.bootstrap, "--topic", s.name("console"),
		"--command-property", "acks=all", "--reader-property", "parse.key=true", "--reader-property", "key.separator=:")
	_, errb, err := runErr(t, 2*time.Minute, input, nil, name, args...)
	if err != nil || strings.Contains(string(errb), "ERROR") {
		failf(t, "kafka-console-producer: %v: %s", err, tail(errb))
	}
	stored := s.tg.readBack(t, s.name("console"))
	if err := CheckProduced(sent, stored); err != nil {
		failf(t, "kafka-console-producer: %v", err)
	}
	if len(stored) != n {
		failf(t, "kafka-console-producer: %d records stored of %d", len(stored), n)
	}
	name, args = JavaCmd("", consoleConsumer, "--bootstrap-server", s.tg.bootstrap, "--topic", s.name("console"),
		"--group", s.name("console-group"), "--from-beginning", "--max-messages", strconv.Itoa(n), "--timeout-ms", "60000",
		"--formatter-property", "print.partition=true", "--formatter-property", "print.offset=true", "--formatter-property", "print.key=true")
	out := run(t, 2*time.Minute, "", nil, name, args...)
	var handled []Record
	for _, l := range strings.Split(string(out), "\n") {
		if m := consoleLine.FindStringSubmatch(l); m != nil {
			p, _ := strconv.Atoi(m[1])
			o, _ := strconv.ParseInt(m[2], 10, 64)
			handled = append(handled, Record{Partition: int32(p), Offset: o, Key: m[3], Value: m[4]})
		}
	}
	if err := CheckConsumed(stored, handled); err != nil {
		failf(t, "kafka-console-consumer: %v", err)
	}
}

func (s *suite) kafkaConsumerGroups(t *testing.T) {
	needJava(t)
	s.storedAtLeast(t, s.name("console"), 1)
	name, args := JavaCmd("", consumerGroups, "--bootstrap-server", s.tg.bootstrap, "--describe", "--group", s.name("console-group"))
	var got, want map[string]groupRow
	err := eventually.Wait(30*time.Second, func() error {
		got = parseGroupDescribe(run(t, 2*time.Minute, "", nil, name, args...))
		var err error
		if want, err = s.tg.describeGroup(t, s.name("console-group"), s.name("console")); err != nil {
			return err
		}
		if len(got) == 0 || fmtRows(got) != fmtRows(want) {
			return fmt.Errorf("differs")
		}
		return nil
	})
	if err != nil {
		failf(t, "kafka-consumer-groups --describe: %s; the cluster's own: %s", fmtRows(got), fmtRows(want))
	}
	s.tg.requireCaughtUp(t, s.name("console-group"), s.name("console"))
}

var perfSummary = regexp.MustCompile(`(\d+) records sent, [\d.]+ records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency`)

func (s *suite) perfTest(t *testing.T) {
	needJava(t)
	topic, n := s.name("perf"), 20000
	s.tg.createTopic(t, topic, 6)
	name, args := JavaCmd("", ProducerPerformance, "--topic", topic, "--num-records", strconv.Itoa(n), "--record-size", "100",
		"--throughput", "-1", "--command-property", "acks=all", "enable.idempotence=true", "bootstrap.servers="+s.tg.bootstrap)
	out := run(t, 5*time.Minute, "", nil, name, args...)
	m := perfSummary.FindAllStringSubmatch(string(out), -1)
	if len(m) == 0 || m[len(m)-1][1] != strconv.Itoa(n) {
		failf(t, "kafka-producer-perf-test printed no summary of %d records: %s", n, tail(out))
	}
	t.Logf("kafka-producer-perf-test: %s", m[len(m)-1][0])
	if got := s.tg.recordCount(t, topic); got != int64(n) {
		failf(t, "kafka-producer-perf-test sent %d records (acks=all, idempotent); the topic holds %d", n, got)
	}
}

// recordCount is the sum over topic's partitions of log end minus log
// start: `cluster topics describe`'s HighWatermark and LogStart, or kadm's.
func (tg *target) recordCount(t *testing.T, topic string) int64 {
	t.Helper()
	if tg.tapes() {
		re := regexp.MustCompile(`LogStart:\s*(-?\d+)\s+HighWatermark:\s*(-?\d+)`)
		var n int64
		for _, m := range re.FindAllStringSubmatch(string(tg.cli(t, "topics", "describe", topic)), -1) {
			start, _ := strconv.ParseInt(m[1], 10, 64)
			end, _ := strconv.ParseInt(m[2], 10, 64)
			n += end - start
		}
		return n
	}
	ctx := ctxFor(t, 30*time.Second)
	ends, err1 := tg.adm.ListEndOffsets(ctx, topic)
	starts, err2 := tg.adm.ListStartOffsets(ctx, topic)
	if err1 != nil || err2 != nil {
		failf(t, "offsets of %s: %v %v", topic, err1, err2)
	}
	var n int64
	ends.Each(func(o kadm.ListedOffset) {
		st, _ := starts.Lookup(topic, o.Partition)
		n += o.Offset - st.Offset
	})
	return n
}

func (s *suite) javaProducer(t *testing.T) {
	needJava(t)
	topic, n := s.name("java-producer"), 3000
	s.tg.createTopic(t, topic, 3)
	name, args := JavaCmd(javaPrograms(t), "IdempotentProducer", s.tg.bootstrap, topic, strconv.Itoa(n), "12", "20")
	p := startProc(t, nil, name, args...)
	// The kill lands mid-run: after a third of the records were
	// acknowledged, while the rest are still being sent.
	waitFor(t, 2*time.Minute, "a third of the records acknowledged", func() string {
		if p.lines("ACK") >= n/3 || p.exited() {
			return ""
		}
		return fmt.Sprintf("%d acknowledged", p.lines("ACK"))
	})
	if p.exited() {
		failf(t, "the producer exited after %d acknowledgements: %v: %s", p.lines("ACK"), p.err, why(p.errb.Bytes()))
	}
	restart := s.tg.killLeader(t, topic, 0)
	err := p.wait(4 * time.Minute)
	restart()
	acked, perr := ParseLines(p.output(), "ACK")
	if err != nil || perr != nil {
		failf(t, "the producer: %v %v (%d of %d acknowledged): %s", err, perr, len(acked), n, tail(p.errb.Bytes()))
	}
	if len(acked) != n {
		failf(t, "%d of %d records acknowledged", len(acked), n)
	}
	if err := CheckProduced(acked, s.tg.readBack(t, topic)); err != nil {
		failf(t, "%v", err)
	}
}

func (s *suite) javaGroup(t *testing.T) {
	needJava(t)
	topic, group, n := s.name("java-group"), s.name("java-group"), 1200
	s.tg.createTopic(t, topic, 6)
	// Both members join the empty topic first, so that the group has
	// settled on two members with partitions each when records flow.
	var members []*proc
	for _, m := range []string{"a", "b"} {
		name, args := JavaCmd(javaPrograms(t), "CooperativeConsumer", s.tg.bootstrap, topic, group, m, "10")
		members = append(members, startProc(t, nil, name, args...))
	}
	waitFor(t, 2*time.Minute, "both members with partitions", func() string {
		for i, m := range members {
			if owned(m.output()) == 0 {
				return fmt.Sprintf("member %d owns no partition", i)
			}
		}
		return ""
	})
	// The target's own producer fills the topic: the group needs Fetch
	// and the group APIs, not Kafka's Produce.
	s.tg.fill(t, topic, 6, n, 12)
	stored := s.storedAtLeast(t, topic, n)
	handled := func() int {
		c := 0
		for _, m := range members {
			c += m.lines("REC")
		}
		return c
	}
	progress := func(want int) func() string {
		return func() string {
			if h := handled(); h < want {
				return fmt.Sprintf("%d of %d handled", h, len(stored))
			}
			return ""
		}
	}
	waitFor(t, 2*time.Minute, "a quarter of the records handled", progress(n/4))
	restart := s.tg.killLeader(t, topic, 0)
	waitFor(t, 4*time.Minute, "every record handled", progress(len(stored)))
	restart()
	for _, m := range members {
		m.stdin.Close()
	}
	var per [][]Record
	for _, m := range members {
		if err := m.wait(time.Minute); err != nil {
			failf(t, "a member: %v: %s", err, tail(m.errb.Bytes()))
		}
		recs, err := ParseLines(m.output(), "REC")
		if err != nil {
			failf(t, "%v", err)
		}
		t.Logf("member handled %d records", len(recs))
		per = append(per, recs)
	}
	if err := CheckConsumed(stored, per...); err != nil {
		failf(t, "%v", err)
	}
	s.tg.requireCaughtUp(t, group, topic)
}

// owned is how many partitions a CooperativeConsumer owns after the lines
// it printed: ASSIGNED [t-0, t-1] adds (cooperative rebalances print only
// what changes), REVOKED and LOST remove.
func owned(out []byte) int {
	set := map[string]bool{}
	for _, l := range strings.Split(string(out), "\n") {
		word, list, ok := strings.Cut(l, " ")
		if !ok || !strings.HasPrefix(list, "[") {
			continue
		}
		for _, tp := range strings.Split(strings.Trim(list, "[]"), ",") {
			if tp = strings.TrimSpace(tp); tp == "" {
				continue
			}
			switch word {
			case "ASSIGNED":
				set[tp] = true
			case "REVOKED", "LOST":
				delete(set, tp)
			}
		}
	}
	return len(set)
}

// produceThenConsume is the check of the script clients: produce records
// (the script prints ACK lines), compare with the topic as read back, then
// a group member handles and commits them all.
func (s *suite) produceThenConsume(t *testing.T, topic string, n int, env []string, produce, consume []string) {
	t.Helper()
	s.tg.createTopic(t, topic, 3)
	out, errb, err := runErr(t, 3*time.Minute, "", env, produce[0], produce[1:]...)
	acked, perr := ParseLines(out, "ACK")
	if err != nil || perr != nil {
		failf(t, "producing: %v %v (%d of %d acknowledged): %s", err, perr, len(acked), n, why(errb))
	}
	if len(acked) != n {
		failf(t, "producing: %d of %d acknowledged", len(acked), n)
	}
	stored := s.tg.readBack(t, topic)
	if err := CheckProduced(acked, stored); err != nil {
		failf(t, "producing: %v", err)
	}
	out, errb, err = runErr(t, 3*time.Minute, "", env, consume[0], consume[1:]...)
	handled, perr := ParseLines(out, "REC")
	if err != nil || perr != nil {
		failf(t, "consuming: %v %v: %s", err, perr, tail(errb))
	}
	if err := CheckConsumed(stored, handled); err != nil {
		failf(t, "consuming: %v", err)
	}
	s.tg.requireCaughtUp(t, topic+"-group", topic)
}

func (s *suite) python(t *testing.T, python, lib, topic string) {
	n := 300
	script := filepath.Join("testdata", "python", "client.py")
	s.produceThenConsume(t, topic, n, nil,
		[]string{python, script, "--lib", lib, "produce", s.tg.bootstrap, topic, strconv.Itoa(n), "6"},
		[]string{python, script, "--lib", lib, "consume", s.tg.bootstrap, topic, topic + "-group", strconv.Itoa(n)})
}

func (s *suite) kafkajs(t *testing.T) {
	need(t, "node", haveCommand("node", "--version"))
	need(t, "kafkajs 2.2.4 from npm", haveFile(filepath.Join(nodePath(), "kafkajs", "package.json")))
	n, topic := 300, s.name("kafkajs")
	script := filepath.Join("testdata", "js", "client.js")
	s.produceThenConsume(t, topic, n, []string{"NODE_PATH=" + nodePath()},
		[]string{"node", script, "produce", s.tg.bootstrap, topic, strconv.Itoa(n), "6"},
		[]string{"node", script, "consume", s.tg.bootstrap, topic, topic + "-group", strconv.Itoa(n)})
}

// kafkajsAdmin runs KafkaJS's admin steps on the topic and group that
// the KafkaJS client left, then checks what deleteTopicRecords did:
// partition 0 starts at offset 1.
func (s *suite) kafkajsAdmin(t *testing.T) {
	need(t, "node", haveCommand("node", "--version"))
	need(t, "kafkajs 2.2.4 from npm", haveFile(filepath.Join(nodePath(), "kafkajs", "package.json")))
	topic := s.name("kafkajs")
	before := s.tg.recordCount(t, topic)
	if before == 0 {
		failf(t, "%s holds no records (did the KafkaJS client fail?)", topic)
	}
	out, errb, err := runErr(t, 3*time.Minute, "", []string{"NODE_PATH=" + nodePath()},
		"node", filepath.Join("testdata", "js", "client.js"), "admin", s.tg.bootstrap, topic, topic+"-group")
	for _, l := range strings.Split(string(out), "\n") {
		if f := strings.Fields(l); len(f) >= 3 && f[0] == "ADMIN" && f[2] != "ok" {
			failf(t, "%s", l)
		}
	}
	if err != nil {
		failf(t, "%v: %s", err, tail(errb))
	}
	if after := s.tg.recordCount(t, topic); after != before-1 {
		failf(t, "deleteTopicRecords up to offset 1 of partition 0: %d records before, %d after", before, after)
	}
}
