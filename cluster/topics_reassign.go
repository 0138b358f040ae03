package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tapes-dev/tapes/internal/client"
	"github.com/tapes-dev/tapes/internal/clitext"
	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
)

// reassign is `cluster topics reassign NAME --partition P --replicas
// 1,2,4`, Kafka's kafka-reassign-partitions for one partition: it records
// the target, then (unless --no-wait) prints each Raft step the partition's
// leaders report to the controller (a joining replica's catch-up with its
// lag in entries), until the replica set is the target.
func (c *topicsCommand) reassign(ctx context.Context, args []string) error {
	var (
		t      clusterTarget
		noWait bool
		wait   time.Duration
		target []int32
	)
	fs := commandFlags("topics reassign NAME --partition P --replicas ID,ID,... [--no-wait] [--wait-timeout D]",
		"Moves one partition to a new replica set (the first is the preferred leader): its Raft group adds each new\n"+
			"replica as a non-voter, promotes it once caught up with the leader's commit index, moves leadership off a\n"+
			"leaving broker and removes the leaving replicas, one at a time. Prints each step until it completes.", c.stderr)
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
	if err := cl.ReassignPartition(rctx, name, p, target); err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "Reassigning %s-%d from %s to %s.\n", name, p, clitext.BrokerList(before.GetReplicas()), clitext.BrokerList(target))
	if noWait {
		return nil
	}
	wctx, wcancel := context.WithTimeout(ctx, wait)
	defer wcancel()
	printed := 0
	for {
		pm, err := partitionMetadata(wctx, cl, name, p)
		if err == nil {
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
