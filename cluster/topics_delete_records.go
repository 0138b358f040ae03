package main

import (
	"context"
	"fmt"
	"strconv"
)

// deleteRecords is `cluster topics delete-records NAME --partition P
// --offset O`, Kafka's kafka-delete-records for one partition.
func (c *topicsCommand) deleteRecords(ctx context.Context, args []string) error {
	var t clusterTarget
	fs := commandFlags("topics delete-records NAME --partition P --offset O",
		"Moves the log start offset of one partition to O on every replica (Kafka's DeleteRecords): records below it\n"+
			"can no longer be fetched (OFFSET_OUT_OF_RANGE) and segments wholly below it are deleted. -1 deletes\n"+
			"everything up to the high watermark. Prints \"partition: NAME-P\tlow_watermark: N\" as kafka-delete-records does.", c.stderr)
	t.addFlags(fs)
	offset := int64(-2) // unset
	partition := partitionFlag(fs, "the partition whose records are deleted (required)")
	fs.Func("offset", "the new log start offset; -1 for the high watermark (required)", func(v string) error {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < -1 {
			return fmt.Errorf("want an offset >= 0, or -1 for the high watermark, got %q", v)
		}
		offset = n
		return nil
	})
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) != 1:
		return fmt.Errorf("%w: want exactly one topic NAME, got %d", errUsage, len(pos))
	case *partition < 0:
		return fmt.Errorf("%w: --partition is required", errUsage)
	case offset < -1:
		return fmt.Errorf("%w: --offset is required", errUsage)
	}
	cl, err := t.client()
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	if _, err := partitionCount(ctx, cl, pos[0], int(*partition)); err != nil {
		return err
	}
	low, err := cl.DeleteRecords(ctx, pos[0], int32(*partition), offset)
	if err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "partition: %s-%d\tlow_watermark: %d\n", pos[0], *partition, low)
	return nil
}
