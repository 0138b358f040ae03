package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/tapes-dev/tapes/internal/clitext"
	"github.com/tapes-dev/tapes/internal/offsetreset"
)

const groupsResetAbout = `Computes new committed offsets for a group's partitions of one topic (all of them, or those
listed after a colon: --topic orders:0,2) with exactly one strategy:
  --to-earliest       the log start offset
  --to-latest         the log end offset (high watermark): skip everything not yet consumed
  --to-offset N       offset N
  --shift-by N        the committed offset plus N (N may be negative); every partition needs one
  --to-datetime TS    the first record at or after TS (RFC 3339, 2026-11-29T12:00:00Z, or local
                      time 2026-11-29T12:00:00.000); the log end when no record is that recent
New offsets are clamped to [log start, log end], as Kafka does. Without --execute this is a dry
run: the table GROUP TOPIC PARTITION NEW-OFFSET CURRENT-OFFSET is printed and nothing is
committed. With --execute the offsets are committed as an admin commit (generation -1, no
member), which the coordinator accepts only while the group has no members: stop its
consumers first. A group that does not exist yet is created with these offsets.`

// resetOffsets is `cluster groups reset-offsets GROUP --topic T STRATEGY`.
func (c *groupsCommand) resetOffsets(ctx context.Context, args []string) error {
	var (
		t           clusterTarget
		topicFlag   string
		toEarliest  bool
		toLatest    bool
		toOffset    int64
		shiftBy     int64
		toDatetime  string
		execute     bool
		dryRun      bool
		strategyNum int
	)
	fs := commandFlags("groups reset-offsets GROUP --topic TOPIC[:P,P...] (--to-earliest | --to-latest | --to-offset N | --shift-by N | --to-datetime TS) [--execute]",
		groupsResetAbout, c.stderr)
	t.addFlags(fs)
	fs.StringVar(&topicFlag, "topic", "", "`TOPIC` whose offsets to reset, optionally with partitions: orders:0,2 (required)")
	fs.BoolVar(&toEarliest, "to-earliest", false, "reset to the log start offset")
	fs.BoolVar(&toLatest, "to-latest", false, "reset to the log end offset")
	fs.Int64Var(&toOffset, "to-offset", 0, "reset to offset `N` (clamped to the log's bounds)")
	fs.Int64Var(&shiftBy, "shift-by", 0, "move the committed offset by `N`, negative to go back (clamped)")
	fs.StringVar(&toDatetime, "to-datetime", "", "reset to the first record at or after `TS` (RFC 3339, or YYYY-MM-DDTHH:MM:SS.sss in local time)")
	fs.BoolVar(&execute, "execute", false, "commit the new offsets (default: a dry run that only prints them)")
	fs.BoolVar(&dryRun, "dry-run", false, "only print the new offsets (the default)")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return fmt.Errorf("%w: want exactly one GROUP, got %d arguments %q", errUsage, len(pos), pos)
	}
	group := pos[0]
	var strategy offsetreset.Strategy
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "to-earliest", "to-latest", "to-offset", "shift-by", "to-datetime":
			strategyNum++
			strategy.Name = f.Name
		}
	})
	switch {
	case strategyNum == 0:
		return fmt.Errorf("%w: give one of --to-earliest, --to-latest, --to-offset N, --shift-by N, --to-datetime TS", errUsage)
	case strategyNum > 1:
		return fmt.Errorf("%w: give only one of --to-earliest, --to-latest, --to-offset, --shift-by, --to-datetime", errUsage)
	case execute && dryRun:
		return fmt.Errorf("%w: --execute and --dry-run are exclusive", errUsage)
	}
	switch strategy.Name {
	case "to-earliest":
		if !toEarliest {
			return fmt.Errorf("%w: --to-earliest=false: leave the flag out instead", errUsage)
		}
	case "to-latest":
		if !toLatest {
			return fmt.Errorf("%w: --to-latest=false: leave the flag out instead", errUsage)
		}
	case "to-offset":
		if toOffset < 0 {
			return fmt.Errorf("%w: --to-offset %d: offsets are 0 or more", errUsage, toOffset)
		}
		strategy.Offset = toOffset
	case "shift-by":
		strategy.Offset = shiftBy
	case "to-datetime":
		ts, err := parseResetDatetime(toDatetime)
		if err != nil {
			return fmt.Errorf("%w: --to-datetime %q: %v", errUsage, toDatetime, err)
		}
		strategy.Datetime = ts
	}
	topic, partitions, err := parseResetTopic(topicFlag)
	if err != nil {
		return err
	}

	cl, err := t.client()
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()

	if err := offsetreset.CheckEmpty(ctx, cl, group); err != nil {
		return err
	}
	plan, err := offsetreset.Compute(ctx, cl, group, topic, partitions, strategy)
	if err != nil {
		return err
	}
	if execute {
		if err := offsetreset.Commit(ctx, cl, group, topic, plan); err != nil {
			return err
		}
	}
	tw := clitext.NewTable(c.stdout)
	clitext.Row(tw, "GROUP", "TOPIC", "PARTITION", "NEW-OFFSET", "CURRENT-OFFSET")
	for _, p := range plan {
		clitext.Row(tw, group, topic, strconv.Itoa(int(p.Partition)), strconv.FormatInt(p.Next, 10), clitext.OffsetCell(p.Current))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if !execute {
		fmt.Fprintf(c.stdout, "\nDry run: nothing was committed. Run the same command with --execute to commit these offsets.\n")
	}
	return nil
}

// parseResetDatetime accepts RFC 3339 (with a zone) or
// YYYY-MM-DDTHH:MM:SS[.sss] in local time, as kafka-consumer-groups does.
func parseResetDatetime(s string) (time.Time, error) {
	var ts time.Time
	var err error
	if ts, err = time.Parse(time.RFC3339Nano, s); err != nil {
		// Fractional seconds are accepted after the seconds field.
		if ts, err = time.ParseInLocation("2006-01-02T15:04:05", s, time.Local); err != nil {
			return time.Time{}, errors.New("want RFC 3339 (2026-11-29T12:00:00Z) or local time YYYY-MM-DDTHH:MM:SS.sss")
		}
	}
	if ts.UnixMilli() < 0 {
		return time.Time{}, errors.New("before 1970-01-01T00:00:00Z")
	}
	return ts, nil
}

// parseResetTopic parses --topic TOPIC or TOPIC:P,P... (nil partitions:
// every partition).
func parseResetTopic(s string) (string, []int32, error) {
	if s == "" {
		return "", nil, fmt.Errorf("%w: --topic TOPIC is required", errUsage)
	}
	name, list, hasList := strings.Cut(s, ":")
	if name == "" {
		return "", nil, fmt.Errorf("%w: --topic %q: no topic name", errUsage, s)
	}
	if !hasList {
		return name, nil, nil
	}
	seen := map[int32]bool{}
	var out []int32
	for _, f := range strings.Split(list, ",") {
		p, err := strconv.ParseInt(strings.TrimSpace(f), 10, 32)
		if err != nil || p < 0 {
			return "", nil, fmt.Errorf("%w: --topic %q: partition %q is not a number 0 or more", errUsage, s, f)
		}
		if !seen[int32(p)] {
			seen[int32(p)] = true
			out = append(out, int32(p))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return name, out, nil
}
