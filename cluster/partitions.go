package main

import (
	"context"
	"flag"
	"fmt"
	"strconv"

	"github.com/tapes-dev/tapes/internal/client"
	"github.com/tapes-dev/tapes/internal/kerr"
)

// partitionCount returns how many partitions topic has; with partition >= 0
// it also checks that partition exists. An unknown topic or partition is
// UNKNOWN_TOPIC_OR_PARTITION at once, not something to retry.
func partitionCount(ctx context.Context, cl *client.Client, topic string, partition int) (int, error) {
	n, err := cl.Partitions(ctx, topic)
	if err != nil {
		return 0, err
	}
	if partition >= n {
		return 0, kerr.New(kerr.UnknownTopicOrPartition, "partition %d does not exist: topic %q has %d partitions", partition, topic, n)
	}
	return n, nil
}

// partitionFlag registers --partition on fs (usage says what it is for)
// and returns where it lands: -1 until given, a partition number >= 0 after.
func partitionFlag(fs *flag.FlagSet, usage string) *int64 {
	partition := int64(-1)
	fs.Func("partition", usage, func(v string) error {
		n, err := strconv.ParseInt(v, 10, 32)
		if err != nil || n < 0 {
			return fmt.Errorf("want a partition number >= 0, got %q", v)
		}
		partition = n
		return nil
	})
	return &partition
}
