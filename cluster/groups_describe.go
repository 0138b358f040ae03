package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/tapes-dev/tapes/internal/client"
	"github.com/tapes-dev/tapes/internal/clitext"
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
	return clitext.WriteGroupState(c.stdout, d, coordinator)
}

// writeGroupMembers prints the --members table, one line per member sorted
// by member id.
func (c *groupsCommand) writeGroupMembers(d *tapesv1.GroupDescription) error {
	if err := clitext.WriteGroupMembers(c.stdout, d); err != nil {
		return err
	}
	if len(d.GetMembers()) == 0 {
		fmt.Fprint(c.stderr, clitext.NoMembersNote(d.GetGroupId()))
	}
	return nil
}

// writeGroupOffsets prints the default table: one line per partition the
// group committed or a member owns, with its lag.
func (c *groupsCommand) writeGroupOffsets(ctx context.Context, cl *client.Client, d *tapesv1.GroupDescription) error {
	group := d.GetGroupId()
	committed, err := cl.OffsetFetch(ctx, group, nil)
	if err != nil {
		return err
	}
	g := clitext.NewGroupOffsets(d, committed)
	if names := g.Topics(); len(names) > 0 {
		md, err := cl.Metadata(ctx, names, true)
		if err != nil {
			return err
		}
		g.AddMetadata(md.GetTopics())
	}
	list := g.Rows()
	c.fillLagTimes(ctx, cl, list, time.Now())
	if err := clitext.WriteGroupOffsets(c.stdout, group, list); err != nil {
		return err
	}
	fmt.Fprint(c.stderr, clitext.GroupOffsetsNote(d))
	return nil
}

// lagTimeParallelism bounds the fetches fillLagTimes runs at once.
const lagTimeParallelism = 8

// fillLagTimes sets each row's LAG-TIME: "-" without a committed offset,
// "0s" without lag, else the age of the record at the committed offset (at
// the log start when retention removed it), read with one small fetch per
// partition. A fetch that fails shows "?" and is reported on stderr.
func (c *groupsCommand) fillLagTimes(ctx context.Context, cl *client.Client, rows []*clitext.GroupOffsetRow, now time.Time) {
	var (
		wg  sync.WaitGroup
		mu  sync.Mutex
		sem = make(chan struct{}, lagTimeParallelism)
	)
	for _, r := range rows {
		if cell, ok := r.LagTimeCell(); ok {
			r.LagTime = cell
			continue
		}
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			ts, err := oldestUnconsumedTimestamp(ctx, cl, r)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				r.LagTime = "?"
				fmt.Fprintf(c.stderr, "lag time of %s: %v\n", r.TP, err)
				return
			}
			r.LagTime = clitext.LagTime(now.Sub(time.UnixMilli(ts)))
		})
	}
	wg.Wait()
}

// oldestUnconsumedTimestamp returns the timestamp of the record at r's
// committed offset, or at the log start when that is later.
func oldestUnconsumedTimestamp(ctx context.Context, cl *client.Client, r *clitext.GroupOffsetRow) (int64, error) {
	off := r.OldestUnconsumed()
	resp, err := cl.Fetch(ctx, &tapesv1.FetchRequest{Topic: r.Topic, Partition: r.Partition, Offset: off, MaxBytes: 1})
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
