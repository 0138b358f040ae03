package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/tapes-dev/tapes/internal/sink"
)

// sinkCommand is `cluster sink ACTION`: inspect the SQLite database that a
// consumer group's consumers write their effects to (package sink).
type sinkCommand struct {
	stdout, stderr io.Writer
}

func init() {
	register("sink", "inspect a consumer group's SQLite sink: stats", (&sinkCommand{stdout: os.Stdout, stderr: os.Stderr}).Run)
}

// sinkActions maps each action to its run function.
var sinkActions = map[string]func(c *sinkCommand, ctx context.Context, args []string) error{
	"stats": (*sinkCommand).stats,
}

const sinkUsage = `Usage:
  cluster sink stats FILE.db [--history PRODUCER-HISTORY[,...]] [--group GROUP --topic TOPIC] [--json]

Run ` + "`cluster sink ACTION --help`" + ` for its flags.
`

// Run dispatches to the action named by args[0].
func (c *sinkCommand) Run(ctx context.Context, args []string) error {
	if len(args) == 0 {
		fmt.Fprint(c.stderr, sinkUsage)
		return fmt.Errorf("%w: missing action (stats)", errUsage)
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		fmt.Fprint(c.stderr, sinkUsage)
		return nil
	}
	action, ok := sinkActions[args[0]]
	if !ok {
		fmt.Fprint(c.stderr, sinkUsage)
		return fmt.Errorf("%w: unknown action %q (want stats)", errUsage, args[0])
	}
	return action(c, ctx, args[1:])
}

const sinkStatsAbout = `Prints the counters of a sink file, one per line:
  Delivered         distinct event_ids with at least one effect
  Duplicates        effects beyond the first of their event_id (at-least-once redeliveries)
  Never processed   records a producer history shows acknowledged that have no effect
                    ("-" without --history)
  Out of key order  effects applied after a later record of the same producer and key
                    (event ids PRODUCER-HEX-N, N the send sequence; keyless effects excluded)
  Total lag         with --group and --topic, from the cluster: the sum over the topic's
                    partitions of log end - committed offset (from the log start where the
                    group committed nothing)
  Active consumers  the group's members
  Generation        the group's generation
The last three are "-" without --group and --topic. The file is only read (never created), and
may be in use by consumers. --json prints every counter and the first event ids of each kind
(-1 for what is unknown).`

// stats is `cluster sink stats FILE.db`.
func (c *sinkCommand) stats(ctx context.Context, args []string) error {
	var (
		histories    multiFlag
		asJSON       bool
		group, topic string
		t            clusterTarget
	)
	fs := commandFlags("sink stats FILE.db [--history PRODUCER-HISTORY[,...]] [--group GROUP --topic TOPIC] [--json]", sinkStatsAbout, c.stderr)
	fs.Var(&histories, "history", "producerd --history `files`, comma-separated or repeated; needed for Never processed")
	fs.BoolVar(&asJSON, "json", false, "print the stats as one JSON object")
	fs.StringVar(&group, "group", "", "consumer `GROUP` whose lag, members and generation to show (with --topic)")
	fs.StringVar(&topic, "topic", "", "`TOPIC` the group consumes, for Total lag (with --group)")
	t.addFlags(fs)
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return fmt.Errorf("%w: sink stats takes one sink file, got %d arguments %q", errUsage, len(pos), pos)
	}
	if (group == "") != (topic == "") {
		return fmt.Errorf("%w: --group and --topic go together (got --group %q, --topic %q)", errUsage, group, topic)
	}
	var files []string
	for _, h := range histories {
		for _, f := range strings.Split(h, ",") {
			if f = strings.TrimSpace(f); f != "" {
				files = append(files, f)
			}
		}
	}
	st, err := sink.ComputeStats(ctx, pos[0], files)
	if err != nil {
		return err
	}
	out := sinkStatsOutput{Stats: st, TotalLag: sink.Unknown, ActiveConsumers: sink.Unknown, Generation: sink.Unknown}
	if group != "" {
		gs, err := groupTopicStats(ctx, t, group, topic)
		if err != nil {
			return err
		}
		out.Group, out.Topic = group, topic
		out.TotalLag, out.ActiveConsumers, out.Generation = gs.totalLag, gs.members, gs.generation
	}
	if asJSON {
		enc := json.NewEncoder(c.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	printAligned(c.stdout, sinkStatsLines(out))
	return nil
}

// sinkStatsOutput is what `sink stats` prints: the sink's counters and,
// with --group and --topic, the group's (sink.Unknown otherwise).
type sinkStatsOutput struct {
	sink.Stats
	Group           string `json:"group,omitempty"`
	Topic           string `json:"topic,omitempty"`
	TotalLag        int64  `json:"total_lag"`
	ActiveConsumers int64  `json:"active_consumers"`
	Generation      int64  `json:"generation"`
}

// sinkStatsLines are the label and value lines of `sink stats`.
func sinkStatsLines(st sinkStatsOutput) [][2]string {
	return [][2]string{
		{"Delivered", strconv.FormatInt(st.Delivered, 10)},
		{"Duplicates", strconv.FormatInt(st.Duplicates, 10)},
		{"Never processed", countOrUnknown(st.NeverProcessed)},
		{"Out of key order", strconv.FormatInt(st.OutOfKeyOrder, 10)},
		{"Total lag", countOrUnknown(st.TotalLag)},
		{"Active consumers", countOrUnknown(st.ActiveConsumers)},
		{"Generation", countOrUnknown(st.Generation)},
	}
}

// countOrUnknown prints n, or "-" for sink.Unknown.
func countOrUnknown(n int64) string {
	if n == sink.Unknown {
		return "-"
	}
	return strconv.FormatInt(n, 10)
}

// printAligned prints one "label value" line per pair, the values aligned
// one space after the longest label.
func printAligned(w io.Writer, lines [][2]string) {
	width := 0
	for _, l := range lines {
		width = max(width, len(l[0]))
	}
	for _, l := range lines {
		fmt.Fprintf(w, "%-*s %s\n", width, l[0], l[1])
	}
}
