package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tapes-dev/tapes/internal/check"
	"github.com/tapes-dev/tapes/internal/client"
	"github.com/tapes-dev/tapes/internal/clusterfile"
	"github.com/tapes-dev/tapes/internal/experiment"
)

// checkCommand is `chaos check`: runs the checker (package check) on the
// histories of an experiment and prints its verdict.
type checkCommand struct {
	stdout, stderr io.Writer
}

func init() {
	register("check", "check producer and consumer histories for anomalies (lost writes, duplicates, skips, ...)",
		(&checkCommand{stdout: os.Stdout, stderr: os.Stderr}).Run)
}

// errNotMet: the check ran and the expectation does not hold (exit 1).
var errNotMet = errors.New("expectation not met")

const checkSynopsis = "check --producer-history F[,F...] [--consumer-history F[,F...]] [--sink FILE.db]\n" +
	"              [--topic T [--dir DIR | --bootstrap-server ADDR]] [--txn-history F[,F...]]\n" +
	"              [--expect safe|exactly-once|none] [--json]\n" +
	"       chaos check --dir RUN_DIR [flags]"

const checkAbout = `Reads what the producers sent and what the consumers processed (their --history files),
optionally a full read of the topic from the cluster and the group's sink, and names every anomaly:
  lost-write            acknowledged, never read, though a later offset of its partition was read
  unseen                acknowledged, never read (every lost-write is also unseen)
  duplicate             one event_id at several offsets
  inconsistent-offsets  different records seen at one partition and offset
  nonmonotonic-poll     a consumer went back (or stayed) within one ownership of a partition
  poll-skip             a consumer jumped over offsets that exist within one ownership
  nonmonotonic-send     a producer's later send acknowledged at a lower offset (reported only)
  aborted-read          a record read although its send definitely failed
  indeterminate-read    a record read whose send failed with an unknown outcome (reported only)
  duplicate-effect, never-processed, out-of-key-order   from the sink (--sink)
Acknowledged records deleted by retention (below the log start, or in a consumer's gap) are
counted apart, not as anomalies.
With --txn-history (transactional histories: begin, send, end, read, step, lso and effect lines),
also Jepsen's anomalies for Kafka's transactions:
  aborted-read          a read_committed reader saw a write of an aborted transaction
  G1a                   a committed transaction consumed a write of an aborted one
  lost-write, duplicate within the committed output of read-process-write steps
  G1c                   a cycle of write-read dependencies between committed transactions
  zombie-commit         a transaction of an epoch committed after its successor's InitProducerId
  hung-lso              a read_committed reader stuck at one LSO past the threshold (reported)
  external-duplicate    an effect outside the log applied more than once for one input (reported)

--expect safe (the default: a check fails unless told otherwise) requires zero lost-write, unseen,
duplicate, inconsistent-offsets, nonmonotonic-poll, poll-skip, aborted-read, duplicate-effect and
never-processed: the profile of acks=all, an idempotent producer, commit after processing and an
idempotent sink. Kinds not checked (the sink's, without --sink) do not count. --expect exactly-once
(for --txn-history) requires zero aborted-read, G1a, lost-write, duplicate, G1c and zombie-commit.
--expect none only reports.
--dir RUN_DIR (a chaos run --out directory, which holds events.jsonl) checks that run again: its
producer-*, consumer-* and txn-*.jsonl histories and sink.db, its experiment's expectation and the
full read of its topic recorded in check-input.json (flags given explicitly win; --topic reads the
topic again from the run's cluster, RUN_DIR/cluster, which must then be running). The experiment's
own extra verdict (chaos run's) is not re-run.
Exit status: 0 when the expectation holds, 1 when it does not (or the check could not run), 2 on a
usage error.`

// checkShow is how many anomalies of each kind the table is followed by.
const checkShow = 5

// Run is `chaos check`.
func (c *checkCommand) Run(ctx context.Context, args []string) error {
	var (
		producers, consumers  listFlag
		txns                  listFlag
		sinkDB, topic, expect string
		dir, bootstrap        string
		asJSON                bool
		timeout               time.Duration
	)
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	fs.SetOutput(c.stderr)
	fs.Usage = func() {
		fmt.Fprintf(c.stderr, "Usage:\n  chaos %s\n\n%s\n\nFlags:\n", checkSynopsis, checkAbout)
		fs.PrintDefaults()
	}
	fs.Var(&producers, "producer-history", "producerd --history `files`, comma-separated or repeated (required unless --txn-history is given)")
	fs.Var(&txns, "txn-history", "transactional history `files` (check.TxnLine), comma-separated or repeated: the transactional anomalies")
	fs.Var(&consumers, "consumer-history", "consumerd --history `files`, comma-separated or repeated (required unless --topic gives a full read)")
	fs.StringVar(&sinkDB, "sink", "", "the consumer group's SQLite sink `FILE.db`, to check its effects (duplicate-effect, never-processed, out-of-key-order)")
	fs.StringVar(&topic, "topic", "", "`TOPIC` to read in full from the cluster, every partition from its log start to its high watermark, as one more reader")
	fs.StringVar(&dir, "dir", clusterfile.DefaultDir(), "cluster `directory` whose cluster.json lists the brokers, for the full read of --topic; or an experiment's run directory (chaos run --out), to check that run again")
	fs.StringVar(&bootstrap, "bootstrap-server", "", "comma-separated broker `addresses` for the full read of --topic; wins over --dir")
	fs.DurationVar(&timeout, "timeout", 2*time.Minute, "how long the full read of --topic may take")
	fs.StringVar(&expect, "expect", check.Safe.Name, "`profile` the result must meet: safe (exit 1 unless every kind of the safe profile is zero), exactly-once (the transactional profile) or none (only report)")
	fs.BoolVar(&asJSON, "json", false, "print the checker's result as one JSON object (counts, anomalies, counters, verdict)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	e, known := check.Expectations[expect]
	switch {
	case fs.NArg() != 0:
		return fmt.Errorf("%w: check takes no arguments, got %q", errUsage, fs.Args())
	case !known:
		return fmt.Errorf("%w: --expect %q: want safe, exactly-once or none", errUsage, expect)
	case timeout <= 0:
		return fmt.Errorf("%w: --timeout %v: want more than 0", errUsage, timeout)
	}
	in := check.Input{ProducerHistories: producers, ConsumerHistories: consumers, TxnHistories: txns, SinkDB: sinkDB, Expect: e}
	readTopic := topic // the topic of in.Log, read now or recorded by the run
	var run *checkRun
	if set["dir"] && experiment.IsRunDir(dir) {
		var err error
		if run, err = checkRunInput(dir, set, &in); err != nil {
			return err
		}
		if topic == "" && run.rec != nil {
			readTopic = run.rec.Topic
		}
		dir = filepath.Join(dir, "cluster") // the run's cluster, for --topic
	}
	switch {
	case run != nil && len(in.ProducerHistories) == 0 && len(in.TxnHistories) == 0:
		return fmt.Errorf("run directory %s: no producer-*.jsonl or txn-*.jsonl history to check", run.dir)
	case run != nil && len(in.ConsumerHistories) == 0 && in.Log == nil && topic == "" && len(in.TxnHistories) == 0:
		return fmt.Errorf("run directory %s: nothing read: no consumer-*.jsonl history, and no full read recorded (%s, written by chaos run); give --topic T with the run's cluster (%s) running", run.dir, experiment.CheckInputFile, dir)
	case len(in.ProducerHistories) == 0 && len(in.TxnHistories) == 0:
		return fmt.Errorf("%w: --producer-history is required (or --txn-history for transactional histories, or --dir RUN_DIR for an experiment's run)", errUsage)
	case len(in.ConsumerHistories) == 0 && in.Log == nil && topic == "" && len(in.TxnHistories) == 0:
		return fmt.Errorf("%w: nothing read: give --consumer-history, or --topic for a full read", errUsage)
	case run == nil && set["dir"] && topic == "":
		return fmt.Errorf("%w: --dir %s is not an experiment's run directory (no %s: chaos run --out writes one); a cluster directory serves the full read of --topic, which is missing", errUsage, dir, experiment.EventsFile)
	case (set["bootstrap-server"] || set["timeout"]) && topic == "":
		return fmt.Errorf("%w: --bootstrap-server and --timeout serve the full read: they need --topic", errUsage)
	}

	if topic != "" {
		var err error
		if in.Log, in.LogStart, err = checkFullRead(ctx, dir, bootstrap, topic, timeout); err != nil {
			return err
		}
	}
	e = in.Expect
	res, err := check.Check(ctx, in)
	if err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(c.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(res); err != nil {
			return fmt.Errorf("write output: %w", err)
		}
	} else {
		if run != nil {
			run.print(c.stdout)
		}
		printCheck(c.stdout, in, readTopic, res, e)
	}
	if !res.Valid {
		return fmt.Errorf("%w (%s): %s", errNotMet, e.Name, strings.Join(res.Why, "; "))
	}
	return nil
}

// checkRun is the experiment run `chaos check --dir RUN_DIR` checks again.
type checkRun struct {
	dir string
	rec *experiment.RecordedCheck // nil: the run recorded no check-input.json
	// expectFrom says where the expectation came from.
	expectFrom string
}

// checkRunInput fills in, for the flags not set, what the run in dir
// recorded: its histories, sink, expectation and full read.
func checkRunInput(dir string, set map[string]bool, in *check.Input) (*checkRun, error) {
	rin, rec, err := experiment.RunInput(dir)
	if err != nil {
		return nil, fmt.Errorf("run directory %s: %w", dir, err)
	}
	if !set["producer-history"] {
		in.ProducerHistories = rin.ProducerHistories
	}
	if !set["consumer-history"] {
		in.ConsumerHistories = rin.ConsumerHistories
	}
	if !set["txn-history"] {
		in.TxnHistories = rin.TxnHistories
	}
	if !set["sink"] {
		in.SinkDB = rin.SinkDB
	}
	in.HungLSOAfter = rin.HungLSOAfter
	run := &checkRun{dir: dir, rec: rec, expectFrom: "--expect"}
	switch {
	case set["expect"]:
	case rec != nil:
		in.Expect, run.expectFrom = rec.Expect, "the experiment's, recorded in "+experiment.CheckInputFile
	default:
		run.expectFrom = "the default (no " + experiment.CheckInputFile + " in the run)"
	}
	if !set["topic"] && rec != nil && rec.Topic != "" {
		in.Log, in.LogStart = rec.Log, rec.LogStart
	}
	return run, nil
}

// print says which run is checked and with what expectation.
func (r *checkRun) print(w io.Writer) {
	name := "an experiment"
	if r.rec != nil {
		name = r.rec.Experiment
	}
	fmt.Fprintf(w, "Run:       %s (%s); expectation %s\n", r.dir, name, r.expectFrom)
}

// checkFullRead reads topic from the cluster named by bootstrap or dir.
func checkFullRead(ctx context.Context, dir, bootstrap, topic string, timeout time.Duration) (map[int32][]check.LogRecord, map[int32]int64, error) {
	addrs, err := clusterfile.Bootstrap(bootstrap, dir)
	if err != nil {
		return nil, nil, fmt.Errorf("full read of %s: %w", topic, err)
	}
	cl, err := client.New(client.Config{Bootstrap: addrs})
	if err != nil {
		return nil, nil, fmt.Errorf("full read of %s: client: %w", topic, err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return check.ReadTopic(ctx, cl, topic)
}

// printCheck prints the inputs, the verdict table, the first anomalies of
// each kind and the verdict.
func printCheck(w io.Writer, in check.Input, topic string, res check.Result, e check.Expectation) {
	fmt.Fprintf(w, "Producers: %d sent, %d acknowledged, %d failed (%s)\n", res.Sent, res.Acked, res.Failed, plural(len(in.ProducerHistories), "history", "histories"))
	fmt.Fprintf(w, "Consumers: %d records processed (%s)\n", res.Processed, plural(len(in.ConsumerHistories), "history", "histories"))
	if res.LogRecords >= 0 {
		fmt.Fprintf(w, "Full read: %d records of %s, log start %s\n", res.LogRecords, topic, logStarts(in.LogStart))
	}
	if res.Sink != nil {
		fmt.Fprintf(w, "Sink:      %d effects, %d event ids delivered (%s)\n", res.Sink.Effects, res.Sink.Delivered, in.SinkDB)
	}
	if x := res.Txn; x != nil {
		fmt.Fprintf(w, "Txns:      %d transactions (%d committed, %d aborted, %d unknown), %d read-process-write steps (%s)\n",
			x.Transactions, x.Committed, x.Aborted, x.Unknown, x.Steps, plural(len(in.TxnHistories), "history", "histories"))
		fmt.Fprintf(w, "           reads: %d read_committed, %d read_uncommitted (%d of them of aborted transactions); %d external effects, %d duplicated\n",
			x.ReadCommitted, x.ReadUncommitted, x.AbortedSeenUncommitted, x.Effects, x.ExternalDuplicates)
		if h := x.LongestLSOHang; h != nil {
			fmt.Fprintf(w, "           longest stretch at one LSO: %s (hung-lso after %.0f s)\n", lsoHang(h), x.HungLSOAfter)
		}
	}
	fmt.Fprintf(w, "Read:      %d distinct records; %d acknowledged records deleted by retention before anyone read them\n\n", res.Read, res.DeletedByRetention)

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KIND\tCOUNT\tVERDICT")
	for _, k := range check.Kinds {
		n, checked := res.Counts[k]
		switch {
		case !checked && slices.Contains(check.TxnKinds, k):
			continue // no transactional histories: not this check's business
		case !checked:
			fmt.Fprintf(tw, "%s\t-\tnot checked (no --sink)\n", k)
		case slices.Contains(e.MustBeZero, k) && n != 0:
			fmt.Fprintf(tw, "%s\t%d\tFAIL (must be 0)\n", k, n)
		case slices.Contains(e.MustBePositive, k) && n == 0:
			fmt.Fprintf(tw, "%s\t%d\tFAIL (must be positive)\n", k, n)
		case slices.Contains(e.MustBeZero, k) || slices.Contains(e.MustBePositive, k):
			fmt.Fprintf(tw, "%s\t%d\tok\n", k, n)
		default:
			fmt.Fprintf(tw, "%s\t%d\treported\n", k, n)
		}
	}
	tw.Flush()

	for _, k := range check.Kinds {
		n := res.Counts[k]
		if n == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s (%d):\n", k, n)
		shown := 0
		for _, a := range res.Anomalies {
			if a.Kind == k && shown < checkShow {
				fmt.Fprintf(w, "  %s\n", a)
				shown++
			}
		}
		if n > shown {
			fmt.Fprintf(w, "  ... and %d more (--json lists up to %d of each kind)\n", n-shown, check.MaxPerKind)
		}
	}

	fmt.Fprintln(w)
	if res.Valid {
		fmt.Fprintf(w, "Expectation %s: met\n", e.Name)
	} else {
		fmt.Fprintf(w, "Expectation %s: NOT met: %s\n", e.Name, strings.Join(res.Why, "; "))
	}
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// logStarts prints partition:start pairs in partition order.
func logStarts(m map[int32]int64) string {
	ps := slices.Sorted(maps.Keys(m))
	parts := make([]string, len(ps))
	for i, p := range ps {
		parts[i] = fmt.Sprintf("%d:%d", p, m[p])
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, " ")
}

// listFlag collects a flag given as comma-separated values, repeated or
// not, skipping empty ones.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*l = append(*l, s)
		}
	}
	return nil
}

// lsoHang prints one stretch of a read_committed reader at one LSO.
func lsoHang(h *check.LSOHang) string {
	end := "the LSO then moved"
	switch {
	case !h.Moved:
		end = "still there at its last observation"
	case h.Caught:
		end = "until nothing was above it"
	}
	return fmt.Sprintf("%.1f s, reader %s at %s-%d offset %d (high watermark up to %d), %s", h.Seconds, h.Reader, h.Topic, h.Partition, h.LSO, h.MaxHW, end)
}
