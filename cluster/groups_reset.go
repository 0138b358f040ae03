package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tapes-dev/tapes/internal/client"
	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/kerr"
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

// resetStrategy is the chosen reset strategy and its argument.
type resetStrategy struct {
	name     string // the flag, e.g. "to-offset"
	offset   int64  // --to-offset, --shift-by
	datetime time.Time
}

// String names the strategy and its value for error messages.
func (s resetStrategy) String() string {
	switch s.name {
	case "to-offset", "shift-by":
		return fmt.Sprintf("--%s %d", s.name, s.offset)
	case "to-datetime":
		return "--to-datetime " + s.datetime.Format(time.RFC3339Nano)
	}
	return "--" + s.name
}

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
	var strategy resetStrategy
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "to-earliest", "to-latest", "to-offset", "shift-by", "to-datetime":
			strategyNum++
			strategy.name = f.Name
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
	switch strategy.name {
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
		strategy.offset = toOffset
	case "shift-by":
		strategy.offset = shiftBy
	case "to-datetime":
		ts, err := parseResetDatetime(toDatetime)
		if err != nil {
			return fmt.Errorf("%w: --to-datetime %q: %v", errUsage, toDatetime, err)
		}
		strategy.datetime = ts
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

	d, err := cl.DescribeGroup(ctx, group)
	if err != nil {
		return err
	}
	if st := d.GetState(); st != groupEmpty && st != groupDead {
		return fmt.Errorf("reset-offsets: group %s has %s: stop them first", group, groupMembersSummary(d))
	}
	plan, err := planReset(ctx, cl, group, topic, partitions, strategy)
	if err != nil {
		return err
	}
	if execute {
		req := &tapesv1.OffsetCommitRequest{GroupId: group, GenerationId: -1}
		for _, p := range plan {
			req.Offsets = append(req.Offsets, &tapesv1.OffsetCommitPartition{Topic: topic, Partition: p.partition, Offset: p.next})
		}
		if err := cl.OffsetCommit(ctx, req); err != nil {
			if kerr.Is(err, kerr.UnknownMemberID) { // members joined since the check
				if d, derr := cl.DescribeGroup(ctx, group); derr == nil && len(d.GetMembers()) > 0 {
					return fmt.Errorf("reset-offsets: group %s has %s: stop them first: %w", group, groupMembersSummary(d), err)
				}
				return fmt.Errorf("reset-offsets: group %s has active members: stop them first: %w", group, err)
			}
			return err
		}
	}
	tw := newGroupsTable(c.stdout)
	groupsRow(tw, "GROUP", "TOPIC", "PARTITION", "NEW-OFFSET", "CURRENT-OFFSET")
	for _, p := range plan {
		groupsRow(tw, group, topic, strconv.Itoa(int(p.partition)), strconv.FormatInt(p.next, 10), groupsOffsetCell(p.current))
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

// resetPlan is the new offset of one partition.
type resetPlan struct {
	partition int32
	current   int64 // -1: nothing committed
	next      int64
}

// planReset computes the new offset of each partition of topic (or of the
// listed ones), clamped to [log start, log end].
func planReset(ctx context.Context, cl *client.Client, group, topic string, partitions []int32, s resetStrategy) ([]resetPlan, error) {
	md, err := cl.Metadata(ctx, []string{topic}, false)
	if err != nil {
		return nil, err
	}
	var tm *tapesv1.TopicMetadata
	for _, m := range md.GetTopics() {
		if m.GetName() == topic {
			tm = m
		}
	}
	if tm == nil {
		return nil, kerr.New(kerr.UnknownTopicOrPartition, "--topic %s: topic does not exist", topic)
	}
	if err := kerr.FromDetail(tm.GetError()); err != nil && len(tm.GetPartitions()) == 0 {
		return nil, fmt.Errorf("--topic %s: %w", topic, err)
	}
	exists := map[int32]bool{}
	for _, pm := range tm.GetPartitions() {
		exists[pm.GetPartition()] = true
	}
	if partitions == nil {
		for p := range exists {
			partitions = append(partitions, p)
		}
		sort.Slice(partitions, func(i, j int) bool { return partitions[i] < partitions[j] })
	}
	var missing []string
	for _, p := range partitions {
		if !exists[p] {
			missing = append(missing, strconv.Itoa(int(p)))
		}
	}
	if len(missing) > 0 {
		return nil, kerr.New(kerr.UnknownTopicOrPartition, "--topic %s: topic %s has %d partitions; no partition %s",
			topic, topic, len(exists), strings.Join(missing, ", "))
	}
	if len(partitions) == 0 {
		return nil, fmt.Errorf("--topic %s: the topic has no partitions", topic)
	}

	req := []*tapesv1.TopicPartitions{{Topic: topic, Partitions: partitions}}
	committed, err := cl.OffsetFetch(ctx, group, req)
	if err != nil {
		return nil, err
	}
	current := map[int32]int64{}
	for _, co := range committed {
		if co.GetTopic() == topic {
			current[co.GetPartition()] = co.GetOffset()
		}
	}
	plan := make([]resetPlan, len(partitions))
	var uncommitted []string
	for i, p := range partitions {
		cur, ok := current[p]
		if !ok || cur < 0 {
			cur = -1
			uncommitted = append(uncommitted, fmt.Sprintf("%s-%d", topic, p))
		}
		plan[i] = resetPlan{partition: p, current: cur}
	}
	if s.name == "shift-by" && len(uncommitted) > 0 {
		return nil, fmt.Errorf("%v: group %s has no committed offset for %s to shift; reset those with another strategy (--topic %s:P,...)",
			s, group, strings.Join(uncommitted, ", "), topic)
	}

	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for i := range plan {
		wg.Go(func() {
			next, err := newResetOffset(ctx, cl, topic, &plan[i], s)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("%s-%d: %w", topic, plan[i].partition, err))
				return
			}
			plan[i].next = next
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		sort.Slice(errs, func(i, j int) bool { return errs[i].Error() < errs[j].Error() })
		return nil, errors.Join(errs...)
	}
	return plan, nil
}

// newResetOffset computes one partition's new offset from its leader's
// log bounds.
func newResetOffset(ctx context.Context, cl *client.Client, topic string, p *resetPlan, s resetStrategy) (int64, error) {
	start, err := cl.ListOffsets(ctx, topic, p.partition, client.EarliestOffset)
	if err != nil {
		return 0, err
	}
	end, err := cl.ListOffsets(ctx, topic, p.partition, client.LatestOffset)
	if err != nil {
		return 0, err
	}
	lo, hi := start.GetOffset(), end.GetOffset()
	var next int64
	switch s.name {
	case "to-earliest":
		next = lo
	case "to-latest":
		next = hi
	case "to-offset":
		next = s.offset
	case "shift-by":
		next = p.current + s.offset
		if s.offset > 0 && next < p.current { // overflow
			next = hi
		}
	case "to-datetime":
		at, err := cl.ListOffsets(ctx, topic, p.partition, s.datetime.UnixMilli())
		if err != nil {
			return 0, err
		}
		next = at.GetOffset()
		if next < 0 { // no record that recent
			next = hi
		}
	default:
		return 0, fmt.Errorf("unknown strategy %q", s.name)
	}
	return min(max(next, lo), hi), nil
}
