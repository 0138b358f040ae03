package main

import (
	"context"
	"fmt"
	"strconv"

	"github.com/tapes-dev/tapes/internal/clitext"
)

// list is `cluster groups list`: one line per group with its state and
// coordinator, sorted by group id (kafka-consumer-groups --list --state).
func (c *groupsCommand) list(ctx context.Context, args []string) error {
	var t clusterTarget
	fs := commandFlags("groups list",
		"Prints every consumer group the brokers coordinate, sorted, under a header line:\n"+
			"GROUP, STATE (Empty, PreparingRebalance, CompletingRebalance, Stable, Dead) and\n"+
			"COORDINATOR (the id of the broker coordinating it). Every live broker is asked; one\n"+
			"that does not answer makes the command fail after printing what the others listed.", c.stderr)
	t.addFlags(fs)
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return fmt.Errorf("%w: groups list takes no arguments, got %q", errUsage, pos)
	}
	cl, err := t.client()
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	groups, listErr := cl.ListGroups(ctx)
	if listErr != nil && len(groups) == 0 {
		return listErr
	}
	tw := clitext.NewTable(c.stdout)
	clitext.Row(tw, "GROUP", "STATE", "COORDINATOR")
	seen := map[string]bool{}
	for _, g := range groups { // sorted by the client
		if seen[g.GetGroupId()] { // two brokers during a coordinator move
			continue
		}
		seen[g.GetGroupId()] = true
		clitext.Row(tw, g.GetGroupId(), g.GetState(), strconv.Itoa(int(g.GetCoordinatorId())))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return listErr
}
