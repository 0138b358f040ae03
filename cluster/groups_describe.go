package main

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/tapes-dev/tapes/internal/client"
	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
)

const groupsDescribeAbout = `Describes a consumer group in the shape of kafka-consumer-groups --describe. By default one
line per partition of every topic the group has committed offsets for or a member is assigned:
  CURRENT-OFFSET  the committed offset (the next record to consume), "-" when none is committed
  LOG-END-OFFSET  the partition's high watermark
  LAG             LOG-END-OFFSET - CURRENT-OFFSET ("-" when nothing is committed)
  CONSUMER-ID, HOST, CLIENT-ID  the member that owns the partition ("-" when none does)
  LAG-TIME        how old the oldest unconsumed record is: now - the timestamp of the record at
                  CURRENT-OFFSET; 0s when LAG is 0, "-" when nothing is committed
--members prints one line per member with its assignment; --state the group's coordinator,
assignor, state, generation and member count. A group the coordinator does not know fails
with GROUP_ID_NOT_FOUND.`

// describe is `cluster groups describe GROUP`.
func (c *groupsCommand) describe(ctx context.Context, args []string) error {
	var (
		t       clusterTarget
		members bool
		state   bool
	)
	fs := commandFlags("groups describe GROUP [--members | --state]", groupsDescribeAbout, c.stderr)
	t.addFlags(fs)
	fs.BoolVar(&members, "members", false, "print the members: GROUP CONSUMER-ID HOST CLIENT-ID #PARTITIONS ASSIGNMENT")
	fs.BoolVar(&state, "state", false, "print the group's state: GROUP COORDINATOR (ID) ASSIGNMENT-STRATEGY STATE GENERATION #MEMBERS")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return fmt.Errorf("%w: want exactly one GROUP, got %d arguments %q", errUsage, len(pos), pos)
	}
	if members && state {
		return fmt.Errorf("%w: --members and --state are exclusive: give one (or neither, for the offsets)", errUsage)
	}
	group := pos[0]
	cl, err := t.client()
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	d, err := describeExistingGroup(ctx, cl, group)
	if err != nil {
		return err
	}
	switch {
	case state:
		return c.writeGroupState(ctx, cl, d)
	case members:
		return c.writeGroupMembers(d)
	}
	return c.writeGroupOffsets(ctx, cl, d)
}

// writeGroupState prints the --state table.
func (c *groupsCommand) writeGroupState(ctx context.Context, cl *client.Client, d *tapesv1.GroupDescription) error {
	coordinator := fmt.Sprintf("(%d)", d.GetCoordinatorId())
	if fc, err := cl.FindCoordinator(ctx, d.GetGroupId()); err == nil && fc.GetNodeId() == d.GetCoordinatorId() {
		coordinator = fmt.Sprintf("%s (%d)", fc.GetAddress(), fc.GetNodeId())
	}
	tw := newGroupsTable(c.stdout)
	groupsRow(tw, "GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "GENERATION", "#MEMBERS")
	groupsRow(tw, d.GetGroupId(), coordinator, groupsCell(d.GetProtocol()), d.GetState(),
		strconv.Itoa(int(d.GetGenerationId())), strconv.Itoa(len(d.GetMembers())))
	return tw.Flush()
}

// writeGroupMembers prints the --members table, one line per member sorted
// by member id.
func (c *groupsCommand) writeGroupMembers(d *tapesv1.GroupDescription) error {
	ms := append([]*tapesv1.GroupMember(nil), d.GetMembers()...)
	sort.Slice(ms, func(i, j int) bool { return ms[i].GetMemberId() < ms[j].GetMemberId() })
	tw := newGroupsTable(c.stdout)
	groupsRow(tw, "GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT")
	for _, m := range ms {
		groupsRow(tw, d.GetGroupId(), m.GetMemberId(), groupsCell(m.GetHost()), groupsCell(m.GetClientId()),
			strconv.Itoa(countGroupPartitions(m.GetAssignment())), formatGroupAssignment(m.GetAssignment()))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(ms) == 0 {
		fmt.Fprintf(c.stderr, "Consumer group '%s' has no active members.\n", d.GetGroupId())
	}
	return nil
}

// groupTP names one partition.
type groupTP struct {
	topic     string
	partition int32
}

func (tp groupTP) String() string { return fmt.Sprintf("%s-%d", tp.topic, tp.partition) }

// groupOffsetRow is one line of the default describe table.
type groupOffsetRow struct {
	groupTP
	current  int64 // -1: nothing committed
	logEnd   int64 // -1: unknown
	logStart int64 // -1: unknown
	owner    *tapesv1.GroupMember
	lagTime  string
}

func (r *groupOffsetRow) lag() int64 {
	if r.current < 0 || r.logEnd < 0 {
		return -1
	}
	return max(0, r.logEnd-r.current)
}

// writeGroupOffsets prints the default table: one line per partition the
// group committed or a member owns, with its lag.
func (c *groupsCommand) writeGroupOffsets(ctx context.Context, cl *client.Client, d *tapesv1.GroupDescription) error {
	group := d.GetGroupId()
	committed, err := cl.OffsetFetch(ctx, group, nil)
	if err != nil {
		return err
	}
	rows := map[groupTP]*groupOffsetRow{}
	get := func(tp groupTP) *groupOffsetRow {
		r := rows[tp]
		if r == nil {
			r = &groupOffsetRow{groupTP: tp, current: -1, logEnd: -1, logStart: -1}
			rows[tp] = r
		}
		return r
	}
	topics := map[string]bool{}
	for _, co := range committed {
		if co.GetOffset() < 0 {
			continue
		}
		get(groupTP{co.GetTopic(), co.GetPartition()}).current = co.GetOffset()
		topics[co.GetTopic()] = true
	}
	for _, m := range d.GetMembers() {
		for _, tps := range m.GetAssignment() {
			for _, p := range tps.GetPartitions() {
				get(groupTP{tps.GetTopic(), p}).owner = m
				topics[tps.GetTopic()] = true
			}
		}
	}
	if len(topics) > 0 {
		names := make([]string, 0, len(topics))
		for t := range topics {
			names = append(names, t)
		}
		sort.Strings(names)
		md, err := cl.Metadata(ctx, names, true)
		if err != nil {
			return err
		}
		for _, tm := range md.GetTopics() {
			if !topics[tm.GetName()] {
				continue
			}
			// A deleted topic keeps only the rows of its committed or
			// assigned partitions, with an unknown log end.
			for _, pm := range tm.GetPartitions() {
				r := get(groupTP{tm.GetName(), pm.GetPartition()})
				r.logEnd, r.logStart = pm.GetHighWatermark(), pm.GetLogStartOffset()
			}
		}
	}
	list := make([]*groupOffsetRow, 0, len(rows))
	for _, r := range rows {
		list = append(list, r)
	}
	sort.Slice(list, func(i, j int) bool {
		if list[i].topic != list[j].topic {
			return list[i].topic < list[j].topic
		}
		return list[i].partition < list[j].partition
	})
	c.fillLagTimes(ctx, cl, list, time.Now())

	tw := newGroupsTable(c.stdout)
	groupsRow(tw, "GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID", "LAG-TIME")
	for _, r := range list {
		consumer, host, clientID := "-", "-", "-"
		if m := r.owner; m != nil {
			consumer, host, clientID = groupsCell(m.GetMemberId()), groupsCell(m.GetHost()), groupsCell(m.GetClientId())
		}
		groupsRow(tw, group, r.topic, strconv.Itoa(int(r.partition)), groupsOffsetCell(r.current),
			groupsOffsetCell(r.logEnd), groupsOffsetCell(r.lag()), consumer, host, clientID, r.lagTime)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	switch d.GetState() {
	case groupEmpty:
		fmt.Fprintf(c.stderr, "Consumer group '%s' has no active members.\n", group)
	case "PreparingRebalance", "CompletingRebalance":
		fmt.Fprintf(c.stderr, "Warning: consumer group '%s' is rebalancing (%s).\n", group, d.GetState())
	}
	return nil
}

// lagTimeParallelism bounds the fetches fillLagTimes runs at once.
const lagTimeParallelism = 8

// fillLagTimes sets each row's LAG-TIME: "-" without a committed offset,
// "0s" without lag, else the age of the record at the committed offset (at
// the log start when retention removed it), read with one small fetch per
// partition. A fetch that fails shows "?" and is reported on stderr.
func (c *groupsCommand) fillLagTimes(ctx context.Context, cl *client.Client, rows []*groupOffsetRow, now time.Time) {
	var (
		wg  sync.WaitGroup
		mu  sync.Mutex
		sem = make(chan struct{}, lagTimeParallelism)
	)
	for _, r := range rows {
		switch lag := r.lag(); {
		case r.current < 0:
			r.lagTime = "-"
			continue
		case lag < 0:
			r.lagTime = "?" // log end unknown
			continue
		case lag == 0:
			r.lagTime = "0s"
			continue
		}
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			ts, err := oldestUnconsumedTimestamp(ctx, cl, r)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				r.lagTime = "?"
				fmt.Fprintf(c.stderr, "lag time of %s: %v\n", r.groupTP, err)
				return
			}
			r.lagTime = formatLagTime(now.Sub(time.UnixMilli(ts)))
		})
	}
	wg.Wait()
}

// oldestUnconsumedTimestamp returns the timestamp of the record at r's
// committed offset, or at the log start when that is later.
func oldestUnconsumedTimestamp(ctx context.Context, cl *client.Client, r *groupOffsetRow) (int64, error) {
	off := max(r.current, r.logStart)
	resp, err := cl.Fetch(ctx, &tapesv1.FetchRequest{Topic: r.topic, Partition: r.partition, Offset: off, MaxBytes: 1})
	if err != nil {
		return 0, err
	}
	for _, rec := range resp.GetRecords() {
		if rec.GetOffset() >= off {
			return rec.GetTimestampMs(), nil
		}
	}
	return 0, fmt.Errorf("no record at offset %d (high watermark %d)", off, resp.GetHighWatermark())
}

// formatLagTime prints an age: milliseconds under a second, tenths of a
// second under a minute, whole seconds above ("350ms", "12.3s", "1h2m5s");
// a negative age (clock skew) is "0s".
func formatLagTime(d time.Duration) string {
	switch {
	case d <= 0:
		return "0s"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}
