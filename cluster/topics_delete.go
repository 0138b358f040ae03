package main

import (
	"context"
	"errors"
	"fmt"
)

// delete is `cluster topics delete NAME...`.
func (c *topicsCommand) delete(ctx context.Context, args []string) error {
	var t clusterTarget
	fs := commandFlags("topics delete NAME [NAME ...]", "Deletes topics and, on every replica, their data; prints \"Deleted topic NAME.\" for each.", c.stderr)
	t.addFlags(fs)
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return fmt.Errorf("%w: want at least one topic NAME", errUsage)
	}
	cl, err := t.client()
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	// One request per topic, so that each is reported on its own.
	var errs []error
	for _, n := range pos {
		if err := cl.DeleteTopics(ctx, []string{n}); err != nil {
			errs = append(errs, err)
			continue
		}
		fmt.Fprintf(c.stdout, "Deleted topic %s.\n", n)
	}
	return errors.Join(errs...)
}
