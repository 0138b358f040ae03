package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"

	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/kerr"
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
	topics := md.GetTopics()
	sort.Slice(topics, func(i, j int) bool { return topics[i].GetName() < topics[j].GetName() })
	var errs []error
	for _, tm := range topics {
		if err := kerr.FromDetail(tm.GetError()); err != nil && len(tm.GetPartitions()) == 0 {
			errs = append(errs, fmt.Errorf("describe topic %q: %w", tm.GetName(), err))
			continue
		}
		writeTopic(c.stdout, tm)
	}
	return errors.Join(errs...)
}

// writeTopic prints one topic as kafka-topics --describe does (with two
// spaces between columns instead of tabs).
func writeTopic(w io.Writer, tm *tapesv1.TopicMetadata) {
	parts := append([]*tapesv1.PartitionMetadata(nil), tm.GetPartitions()...)
	sort.Slice(parts, func(i, j int) bool { return parts[i].GetPartition() < parts[j].GetPartition() })
	rf := 0
	for _, p := range parts {
		rf = max(rf, len(p.GetReplicas()))
	}
	keys := make([]string, 0, len(tm.GetConfigs()))
	for k := range tm.GetConfigs() {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	cfgs := make([]string, len(keys))
	for i, k := range keys {
		cfgs[i] = k + "=" + tm.GetConfigs()[k]
	}
	fmt.Fprintf(w, "Topic: %s  TopicId: %d  PartitionCount: %d  ReplicationFactor: %d  Configs: %s\n",
		tm.GetName(), tm.GetTopicId(), len(parts), rf, strings.Join(cfgs, ","))
	for _, p := range parts {
		leader := "none"
		if p.GetLeaderId() >= 0 {
			leader = strconv.Itoa(int(p.GetLeaderId()))
		}
		fmt.Fprintf(w, "  Topic: %s  Partition: %d  Leader: %s  Replicas: %s  Isr: %s  Epoch: %d  LogStart: %d  HighWatermark: %d",
			tm.GetName(), p.GetPartition(), leader, brokerList(p.GetReplicas()), brokerList(p.GetIsr()),
			p.GetLeaderEpoch(), p.GetLogStartOffset(), p.GetHighWatermark())
		if code := p.GetError().GetCode(); code != "" {
			fmt.Fprintf(w, "  Error: %s", code)
		}
		fmt.Fprintln(w)
	}
}

// brokerList prints broker ids as kafka-topics does ("1,2,3"), or "none".
func brokerList(ids []int32) string {
	if len(ids) == 0 {
		return "none"
	}
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = strconv.Itoa(int(id))
	}
	return strings.Join(s, ",")
}
