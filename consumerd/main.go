// Command consumerd is a consumer group member: it polls records of one
// topic, applies each one's effect to a SQLite sink, commits offsets
// before or after processing (or on a timer), and writes a history of
// everything it did. It is driven through a gRPC control endpoint (status,
// pause, resume, crash, stop) by the launcher, chaos and the dashboard.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/tapes-dev/tapes/internal/assign"
	"github.com/tapes-dev/tapes/internal/client"
	"github.com/tapes-dev/tapes/internal/clusterfile"
	"github.com/tapes-dev/tapes/internal/consumer"
	"github.com/tapes-dev/tapes/internal/sink"
)

// Exit codes.
const (
	exitFailed = 1
	exitUsage  = 2
	// exitCrashed: the process exited on purpose, mid-batch (crash from the
	// control endpoint or --crash-after-records).
	exitCrashed = 3
)

type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageError{fmt.Sprintf(format, args...)} }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	var ue *usageError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		os.Exit(0)
	case errors.As(err, &ue):
		fmt.Fprintf(os.Stderr, "consumerd: %v (see --help)\n", err)
		os.Exit(exitUsage)
	}
	fmt.Fprintf(os.Stderr, "consumerd: %v\n", err)
	os.Exit(exitFailed)
}

// options are consumerd's flags.
type options struct {
	bootstrap, dir     string
	group, topic, name string
	assignor           string
	recordsPerPoll     int
	commit             string
	autoCommitInterval time.Duration
	processTime        time.Duration
	sinkPath           string
	idempotentSink     bool
	resequenceSalted   bool
	windowStr          string
	window             sink.Window
	deadLetterTopic    string
	mirrorTo           string
	fetchMaxBytes      int
	maxBuffered        int
	from               string
	historyPath        string
	crashAfter         int64
	controlListen      string
	sessionTimeout     time.Duration
	heartbeatInterval  time.Duration
	maxPollInterval    time.Duration
	logLevel           string
	exitOnError        bool
	isolationStr       string
	isolation          consumer.IsolationLevel
	eos                bool
	outputTopic        string
	transactionalID    string
	transactionTimeout time.Duration
	smsURL             string
	txnHistoryPath     string
}

// How consumerd waits for a cluster or a topic that is not there.
const (
	// warnEvery is the least time between two warnings that it still waits.
	warnEvery = 30 * time.Second
	// unreachableAfter: with --exit-on-error, how long every broker address
	// may refuse connections before consumerd exits.
	unreachableAfter = 3 * time.Second
)

const about = `consumerd joins consumer group --group on --topic and runs the loop of a Kafka application:
poll (at most --records-per-poll records), process each record (wait --process-time, then apply
its effect to the SQLite --sink), and commit, in the order --commit says:
  after   process, then commit: a crash repeats work (at-least-once; duplicates)
  before  commit, then process: a crash loses work (at-most-once; never processed)
  auto    commit the positions on a timer (--auto-commit-interval), as the Java client does
With --idempotent-sink the effect and the record's event_id are written in one transaction
with a unique constraint, so a redelivered record changes nothing (effectively once).
The effect's key is the record's entity header (its logical key), else its key.

--resequence-salted restores the order of a salted hot key (producerd --salt-hot-key): a record
with the headers salt and key_seq is held back until the records before it of its producer
run and entity have had their effect, so that the key's effects follow key_seq although its
records came from several partitions; commits stay below the records held back. It needs every
partition the key reaches read by this consumer, from the key's first record on (one consumer
per group); its record lines are written when a record is read, its effect follows in order.

--idempotent-sink-window N|D keeps only the last N event ids (or those applied less than D ago):
a redelivery from further back than the window is applied again. The ids that leave the window
are deleted in the transaction of the effect that pushes them out.

Every record's value is decoded by its schema_version header (versions 1 and 2; none: 1). A
record of a version this consumer does not know, or whose value does not match its version,
has no effect: it is written, with its key, value and headers and the header dead_letter_reason,
to the dead-letter topic (--dead-letter-topic, default TOPIC.dlq, created on first use with
one partition), acknowledged before the offsets are committed, and its history line says so.
--mirror-to ARCHIVE copies every record as it is (any version) to the topic ARCHIVE (created
with the same partition count when missing), also acknowledged before the commit.

--history writes one JSON line per record processed
  {"type":"record","consumer","generation","topic","partition","offset","event_id","key","value","at"}
(a dead-lettered record's line has "dead_letter":TOPIC and "reason") and one per commit,
assignment change (assigned, revoked, lost) and retention gap.

--eos --output-topic T is Kafka's exactly-once read-process-write: each poll is one transaction of
the transactional id --transactional-id (default GROUP-NAME), in which every input record's result
goes to T and the input offsets are committed (TxnOffsetCommit with the group's generation and
member id, so a member fenced by a rebalance cannot commit); input is read read_committed. A crash
mid-poll leaves an open transaction that the restarted consumer (same id) aborts at once, and the
inputs are processed again: T read read_committed has each input once, read_uncommitted also the
aborted attempts. --sms-url URL also POSTs an "SMS" per input while processing it: the
transaction does not cover that, so a crash repeats it (receivers must dedupe by event_id).
--txn-history writes begin, step, send and end lines for chaos check --txn-history.

A control endpoint (--control-listen) serves tapes.v1.ConsumerControlService: status, pause and
resume (fetching stops, heartbeats go on), crash (exit at once, mid-batch, without committing
or leaving) and stop (revoke, commit, leave). SIGINT/SIGTERM stop the same way.`

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("consumerd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage:\n  consumerd (--bootstrap-server ADDR | --dir DIR) --group demo --topic orders [flags]\n\n%s\n\nFlags:\n", about)
		fs.PrintDefaults()
	}
	fs.StringVar(&o.bootstrap, "bootstrap-server", "", "comma-separated broker `addresses` (host:port,...) to start from; wins over --dir")
	fs.StringVar(&o.dir, "dir", clusterfile.DefaultDir(), "cluster `directory` of `cluster up`, whose cluster.json lists the brokers ($TAPES_DIR overrides the default)")
	fs.StringVar(&o.group, "group", "", "consumer group to join (required)")
	fs.StringVar(&o.topic, "topic", "", "topic to consume (required)")
	fs.StringVar(&o.name, "name", "consumer-1", "this consumer's name: its client id, and its name in histories and the sink")
	fs.StringVar(&o.assignor, "assignor", assign.CooperativeStickyName, "partition assignor: cooperative-sticky (incremental, KIP-429) or range (eager: everything revoked at every rebalance)")
	fs.IntVar(&o.recordsPerPoll, "records-per-poll", 100, "most records one poll returns (max.poll.records)")
	fs.StringVar(&o.commit, "commit", "after", "when offsets are committed: after (processing), before (processing) or auto (on a timer)")
	fs.DurationVar(&o.autoCommitInterval, "auto-commit-interval", 5*time.Second, "with --commit auto: how often the positions are committed (auto.commit.interval.ms)")
	fs.DurationVar(&o.processTime, "process-time", 0, "time spent processing each record before its effect is applied")
	fs.StringVar(&o.sinkPath, "sink", "", "SQLite `file` the effects are applied to, shared by the group's consumers (none when empty)")
	fs.BoolVar(&o.idempotentSink, "idempotent-sink", false, "apply each event_id at most once (effect and event_id in one transaction with a unique constraint)")
	fs.BoolVar(&o.resequenceSalted, "resequence-salted", false, "apply the records of a salted key (headers salt, key_seq) in key_seq order: hold each back until its predecessors have had their effect")
	fs.StringVar(&o.windowStr, "idempotent-sink-window", "", "with --idempotent-sink: keep only the last `N|D` event ids, a count (1000) or an age (30s); none: keep all")
	fs.StringVar(&o.deadLetterTopic, "dead-letter-topic", "", "topic that records this consumer cannot decode go to, with the reason (default: TOPIC.dlq, created on first use)")
	fs.StringVar(&o.mirrorTo, "mirror-to", "", "copy every record to this `topic` (an archive; created when missing) before committing its offset")
	fs.IntVar(&o.fetchMaxBytes, "max-partition-fetch-bytes", 1<<20, "most bytes one fetch of a partition returns (max.partition.fetch.bytes; a first batch larger than it still comes)")
	fs.IntVar(&o.maxBuffered, "max-buffered-records", 2000, "most records of a partition fetched ahead of processing: with --max-partition-fetch-bytes, how far a slow consumer reads ahead (and so what retention cannot take from it)")
	fs.StringVar(&o.isolationStr, "isolation-level", "", "which records are read (isolation.level): read_uncommitted (up to the high watermark, records of open and aborted transactions included; Kafka's default, and consumerd's without --eos) or read_committed (below the last stable offset, aborted transactions dropped; the default with --eos)")
	fs.BoolVar(&o.eos, "eos", false, "read-process-write in transactions: per poll, the results go to --output-topic and the input offsets are committed in ONE transaction (reads read_committed)")
	fs.StringVar(&o.outputTopic, "output-topic", "", "with --eos: the `topic` the results are written to (one record per input: its key, value, event_id and the headers in-partition and in-offset)")
	fs.StringVar(&o.transactionalID, "transactional-id", "", "with --eos: the transactional id (default GROUP-NAME: a restarted consumer of the same --name fences its predecessor and aborts its open transaction)")
	fs.DurationVar(&o.transactionTimeout, "transaction-timeout", 10*time.Second, "with --eos: the coordinator aborts a transaction left open this long (transaction.timeout.ms)")
	fs.StringVar(&o.smsURL, "sms-url", "", "with --eos: POST each input's SMS ({\"event_id\",\"to\",\"text\"} JSON) to this `URL` while processing it: an effect outside the log, which the transaction does not cover")
	fs.StringVar(&o.txnHistoryPath, "txn-history", "", "with --eos: append the transactional history (begin, step, send and end lines, chaos check --txn-history) to this `file`")
	fs.StringVar(&o.from, "from", "earliest", "where to start without a committed offset, or after retention deleted it (auto.offset.reset): earliest or latest (the high watermark; read_committed the last stable offset)")
	fs.StringVar(&o.historyPath, "history", "", "append one JSON line per record processed, commit and assignment change to this `file` (created if missing; a restarted consumer continues it)")
	fs.Int64Var(&o.crashAfter, "crash-after-records", 0, "exit at once (code 3) after processing this many records, mid-batch, without committing or leaving (0: never)")
	fs.StringVar(&o.controlListen, "control-listen", "127.0.0.1:0", "address of the gRPC control endpoint (port 0: any free port; empty: none)")
	fs.DurationVar(&o.sessionTimeout, "session-timeout", 6*time.Second, "the group removes this member when it has not heard from it for this long (session.timeout.ms)")
	fs.DurationVar(&o.heartbeatInterval, "heartbeat-interval", 0, "how often to heartbeat (default: a third of the session timeout)")
	fs.DurationVar(&o.maxPollInterval, "max-poll-interval", 5*time.Minute, "leave the group when the loop does not poll for this long; also the rebalance timeout (max.poll.interval.ms)")
	fs.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.BoolVar(&o.exitOnError, "exit-on-error", false, "exit with status 1 when no broker answers (after a few seconds) or --topic does not exist; without it consumerd warns at once, then every 30 s, and keeps retrying with backoff")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, err
		}
		return nil, &usageError{err.Error()}
	}
	switch {
	case fs.NArg() > 0:
		return nil, usagef("unexpected argument %q", fs.Arg(0))
	case o.group == "":
		return nil, usagef("--group is required")
	case o.topic == "":
		return nil, usagef("--topic is required")
	case o.recordsPerPoll <= 0:
		return nil, usagef("--records-per-poll %d: want at least 1", o.recordsPerPoll)
	case o.commit != "after" && o.commit != "before" && o.commit != "auto":
		return nil, usagef("--commit %q: want after, before or auto", o.commit)
	case o.autoCommitInterval <= 0:
		return nil, usagef("--auto-commit-interval %v: want a positive duration", o.autoCommitInterval)
	case o.processTime < 0:
		return nil, usagef("--process-time %v: cannot be negative", o.processTime)
	case o.idempotentSink && o.sinkPath == "":
		return nil, usagef("--idempotent-sink needs --sink FILE.db")
	case o.fetchMaxBytes <= 0:
		return nil, usagef("--max-partition-fetch-bytes %d: want at least 1", o.fetchMaxBytes)
	case o.maxBuffered <= 0:
		return nil, usagef("--max-buffered-records %d: want at least 1", o.maxBuffered)
	case o.windowStr != "" && !o.idempotentSink:
		return nil, usagef("--idempotent-sink-window %s needs --idempotent-sink", o.windowStr)
	case o.mirrorTo != "" && o.mirrorTo == o.topic:
		return nil, usagef("--mirror-to %s: cannot be --topic itself", o.mirrorTo)
	case o.deadLetterTopic != "" && o.deadLetterTopic == o.topic:
		return nil, usagef("--dead-letter-topic %s: cannot be --topic itself", o.deadLetterTopic)
	case o.from != "earliest" && o.from != "latest":
		return nil, usagef("--from %q: want earliest or latest", o.from)
	case o.crashAfter < 0:
		return nil, usagef("--crash-after-records %d: cannot be negative", o.crashAfter)
	case o.sessionTimeout <= 0:
		return nil, usagef("--session-timeout %v: want a positive duration", o.sessionTimeout)
	case !o.eos && (o.outputTopic != "" || o.transactionalID != "" || o.smsURL != "" || o.txnHistoryPath != ""):
		return nil, usagef("--output-topic, --transactional-id, --sms-url and --txn-history need --eos")
	case o.eos && o.outputTopic == "":
		return nil, usagef("--eos needs --output-topic T")
	case o.eos && o.outputTopic == o.topic:
		return nil, usagef("--output-topic %s: cannot be --topic itself", o.outputTopic)
	case o.eos && o.commit != "after":
		return nil, usagef("--eos --commit %s: with --eos the offsets are committed in each poll's transaction", o.commit)
	case o.eos && o.isolationStr == "read_uncommitted":
		return nil, usagef("--eos --isolation-level read_uncommitted: a transactional processor reads read_committed (else it processes aborted input)")
	case o.eos && o.transactionTimeout <= 0:
		return nil, usagef("--transaction-timeout %v: want a positive duration", o.transactionTimeout)
	case o.eos && (o.sinkPath != "" || o.mirrorTo != "" || o.resequenceSalted):
		return nil, usagef("--eos writes its results to --output-topic: --sink, --mirror-to and --resequence-salted are not for it")
	case o.heartbeatInterval < 0 || (o.heartbeatInterval > 0 && o.heartbeatInterval >= o.sessionTimeout):
		return nil, usagef("--heartbeat-interval %v: want a positive duration below --session-timeout %v", o.heartbeatInterval, o.sessionTimeout)
	}
	if o.eos && o.isolationStr == "" {
		o.isolationStr = "read_committed"
	}
	if o.isolationStr == "" {
		o.isolationStr = "read_uncommitted"
	}
	if o.eos && o.transactionalID == "" {
		o.transactionalID = o.group + "-" + o.name
	}
	iso, err := consumer.ParseIsolationLevel(o.isolationStr)
	if err != nil {
		return nil, usagef("--isolation-level %q: want read_committed or read_uncommitted", o.isolationStr)
	}
	o.isolation = iso
	if o.windowStr != "" {
		w, err := sink.ParseWindow(o.windowStr)
		if err != nil {
			return nil, usagef("--idempotent-sink-window %q: want a positive count of event ids (1000) or a positive duration (30s)", o.windowStr)
		}
		o.window = w
	}
	if o.deadLetterTopic == "" {
		o.deadLetterTopic = o.topic + ".dlq"
	}
	if _, err := assign.ByName(o.assignor); err != nil {
		return nil, usagef("--assignor %q: want cooperative-sticky or range", o.assignor)
	}
	return o, nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(o.logLevel)); err != nil {
		return usagef("--log-level %q: use debug, info, warn or error", o.logLevel)
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})).With("consumer", o.name)
	addrs, err := clusterfile.Bootstrap(o.bootstrap, o.dir)
	if err != nil {
		return err
	}
	hint := clusterfile.UnreachableHint(o.bootstrap, o.dir)
	cfg := client.Config{Bootstrap: addrs, Logger: logger, UnreachableHint: hint,
		OnRetry: client.WarnUnreachable(logger, warnEvery, hint)}
	if o.exitOnError {
		cfg.UnreachableAfter = unreachableAfter
	}
	cl, err := client.New(cfg)
	if err != nil {
		return err
	}
	defer cl.Close()
	d, err := newDaemon(o, cl, logger, stdout)
	if err != nil {
		return err
	}
	return d.run(ctx)
}
