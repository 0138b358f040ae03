package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tapes-dev/tapes/internal/client"
	"github.com/tapes-dev/tapes/internal/clitext"
	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
)

// reassign is `cluster topics reassign NAME --partition P --replicas
// 1,2,4 [--throttle BYTES_PER_SEC]`, Kafka's kafka-reassign-partitions for
// one partition: it records the target (and the joining replicas' catch-up
// throttle), then (unless --no-wait) prints each Raft step the partition's
// leaders report to the controller (a joining replica's catch-up with its
// lag in entries) and, every progressEvery while a joining replica is not a
// voter yet, its progress as the leader sees it, until the replica set is
// the target.
func (c *topicsCommand) reassign(ctx context.Context, args []string) error {
	var (
		t        clusterTarget
		noWait   bool
		wait     time.Duration
		target   []int32
		throttle int64
	)
	fs := commandFlags("topics reassign NAME --partition P --replicas ID,ID,... [--throttle BYTES_PER_SEC] [--no-wait] [--wait-timeout D]",
		"Moves one partition to a new replica set (the first is the preferred leader): its Raft group adds each new\n"+
			"replica as a non-voter, promotes it once caught up with the leader's commit index, moves leadership off a\n"+
			"leaving broker and removes the leaving replicas, one at a time. Prints each step until it completes, and\n"+
			"every 2 s a joining replica's catch-up progress (lag, bytes/s and entries/s it received).", c.stderr)
	t.addFlags(fs)
	partition := partitionFlag(fs, "the partition to move (required)")
	fs.Func("replicas", "the target broker ids, comma separated, e.g. 1,2,4 (required)", func(v string) error {
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.ParseInt(strings.TrimSpace(f), 10, 32)
			if err != nil || n <= 0 {
				return fmt.Errorf("want positive broker ids separated by commas, got %q", v)
			}
			target = append(target, int32(n))
		}
		return nil
	})
	fs.Int64Var(&throttle, "throttle", 0, "limit the leader's traffic to each joining replica to this many bytes per second until\n"+
		"it is promoted to voter (0: unthrottled); with the target of a reassignment in progress, changes its throttle")
	fs.BoolVar(&noWait, "no-wait", false, "return once the target is recorded")
	fs.DurationVar(&wait, "wait-timeout", 5*time.Minute, "how long to wait for the reassignment to complete")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) != 1:
		return fmt.Errorf("%w: want exactly one topic NAME, got %d", errUsage, len(pos))
	case *partition < 0:
		return fmt.Errorf("%w: --partition is required", errUsage)
	case len(target) == 0:
		return fmt.Errorf("%w: --replicas is required", errUsage)
	}
	name, p := pos[0], int32(*partition)
	cl, err := t.client()
	if err != nil {
		return err
	}
	defer cl.Close()
	rctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	if _, err := partitionCount(rctx, cl, name, int(p)); err != nil {
		return err
	}
	before, err := partitionMetadata(rctx, cl, name, p)
	if err != nil {
		return err
	}
	if err := cl.ReassignPartitionThrottled(rctx, name, p, target, throttle); err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "Reassigning %s-%d from %s to %s", name, p, clitext.BrokerList(before.GetReplicas()), clitext.BrokerList(target))
	if throttle > 0 {
		fmt.Fprintf(c.stdout, ", joining replicas throttled to %d B/s", throttle)
	}
	fmt.Fprintln(c.stdout, ".")
	if noWait {
		return nil
	}
	wctx, wcancel := context.WithTimeout(ctx, wait)
	defer wcancel()
	printed := 0
	prog := catchUpProgress{last: map[int32]catchUpSample{}}
	for {
		pm, err := partitionMetadata(wctx, cl, name, p)
		if err == nil {
			prog.report(wctx, c.stdout, cl, name, pm)
			moving := len(pm.GetAddingReplicas())+len(pm.GetRemovingReplicas()) > 0
			done := !moving && slices.Equal(pm.GetReplicas(), target)
			if steps := pm.GetReassignmentSteps(); (moving || done) && len(steps) > printed {
				for _, st := range steps[printed:] {
					printed++
					fmt.Fprintf(c.stdout, "step %d: %s\n", printed, st)
				}
			}
			if done {
				fmt.Fprintf(c.stdout, "Reassignment of %s-%d complete: replicas %s, leader %d, ISR %s.\n",
					name, p, clitext.BrokerList(pm.GetReplicas()), pm.GetLeaderId(), clitext.BrokerList(pm.GetIsr()))
				return nil
			}
		}
		select {
		case <-wctx.Done():
			return fmt.Errorf("reassignment of %s-%d to %s not complete after %v (it goes on; see cluster topics describe %s)",
				name, p, clitext.BrokerList(target), wait, name)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// progressEvery is how often reassign prints a joining replica's progress.
const progressEvery = 2 * time.Second

// catchUpProgress prints, for each joining replica that is not a voter yet,
// a progress line every progressEvery: its lag behind the leader's commit
// index and the bytes and entries it received per second since the last
// reading, all as the partition's leader sees them (DescribeReplicas:
// match index and the bytes its transport sent that the follower answered
// for), with the throttle the leader applies to it.
type catchUpProgress struct {
	last map[int32]catchUpSample
}

// catchUpSample is one reading of a joining replica's progress.
type catchUpSample struct {
	at     time.Time
	leader int32
	match  uint64
	bytes  uint64
}

func (cp *catchUpProgress) report(ctx context.Context, w io.Writer, cl *client.Client, topic string, pm *tapesv1.PartitionMetadata) {
	var joining []int32
	for _, id := range pm.GetAddingReplicas() {
		if !slices.Contains(pm.GetRaftVoters(), id) {
			joining = append(joining, id)
		}
	}
	due := false
	now := time.Now()
	for _, id := range joining {
		if s, ok := cp.last[id]; !ok || now.Sub(s.at) >= progressEvery {
			due = true
		}
	}
	if !due || pm.GetLeaderId() < 0 {
		return
	}
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	dr, err := cl.DescribeReplicas(dctx, pm.GetLeaderId())
	if err != nil {
		return // the leader moved or is down: the next round asks the new one
	}
	for _, rs := range dr.GetReplicas() {
		if rs.GetTopic() != topic || rs.GetPartition() != pm.GetPartition() || rs.GetRaftState() != "Leader" {
			continue
		}
		for _, f := range rs.GetFollowers() {
			id := f.GetBrokerId()
			if !slices.Contains(joining, id) {
				continue
			}
			cur := catchUpSample{at: time.Now(), leader: pm.GetLeaderId(), match: f.GetMatchIndex(), bytes: f.GetBytesReceived()}
			prev, ok := cp.last[id]
			if ok && cur.at.Sub(prev.at) < progressEvery {
				continue
			}
			cp.last[id] = cur
			if !ok || prev.leader != cur.leader || cur.bytes < prev.bytes || cur.match < prev.match {
				continue // a first reading, or a new leader's counters
			}
			secs := cur.at.Sub(prev.at).Seconds()
			var lag uint64
			if c := rs.GetRaftCommitIndex(); c > cur.match {
				lag = c - cur.match
			}
			throttle := "unthrottled"
			if t := f.GetThrottleBytesPerSec(); t > 0 {
				throttle = fmt.Sprintf("throttle %d B/s", t)
			}
			fmt.Fprintf(w, "progress: catch-up %d: lag %d entries, received %.0f B/s and %.0f entries/s over %.1fs (%s)\n",
				id, lag, float64(cur.bytes-prev.bytes)/secs, float64(cur.match-prev.match)/secs, secs, throttle)
		}
	}
}

// partitionMetadata returns one partition's metadata (fresh, from any broker).
func partitionMetadata(ctx context.Context, cl *client.Client, topic string, p int32) (*tapesv1.PartitionMetadata, error) {
	md, err := cl.Metadata(ctx, []string{topic}, false)
	if err != nil {
		return nil, err
	}
	for _, tm := range md.GetTopics() {
		for _, pm := range tm.GetPartitions() {
			if tm.GetName() == topic && pm.GetPartition() == p {
				return pm, nil
			}
		}
	}
	return nil, fmt.Errorf("partition %s-%d not in the metadata", topic, p)
}
