package main

import (
	"context"
	"fmt"
	"sort"
)

// list is `cluster topics list`: one topic name per line, sorted, internal
// topics (named __…) included.
func (c *topicsCommand) list(ctx context.Context, args []string) error {
	var t clusterTarget
	fs := commandFlags("topics list", "Prints every topic name, one per line, sorted; internal topics (__consumer_offsets) included.", c.stderr)
	t.addFlags(fs)
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return fmt.Errorf("%w: topics list takes no arguments, got %q", errUsage, pos)
	}
	md, err := t.metadata(ctx)
	if err != nil {
		return err
	}
	var names []string
	for _, tm := range md.GetTopics() {
		names = append(names, tm.GetName())
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintln(c.stdout, n)
	}
	return nil
}
