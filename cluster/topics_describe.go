package main

import (
	"context"

	"github.com/tapes-dev/tapes/internal/clitext"
)

// describe is `cluster topics describe [NAME...]`, in the shape of
// `kafka-topics --describe`.
func (c *topicsCommand) describe(ctx context.Context, args []string) error {
	var t clusterTarget
	fs := commandFlags("topics describe [NAME ...]",
		"Prints each topic (all when no NAME is given) in the shape of kafka-topics --describe: a line per topic,\n"+
			"then per partition its leader, replicas, ISR, leader epoch, log start offset and high watermark\n"+
			"(none or -1 where unknown).", c.stderr)
	t.addFlags(fs)
	names, err := parseFlags(fs, args)
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
	md, err := cl.Metadata(ctx, names, true)
	if err != nil {
		return err
	}
	return clitext.WriteTopics(c.stdout, md.GetTopics())
}
