package clitext

import (
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"

	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/kerr"
)

// WriteTopics prints topics sorted by name, each as WriteTopic does. A
// topic whose answer is an error without partitions is not printed; its
// error is in the returned (joined) error.
func WriteTopics(w io.Writer, topics []*tapesv1.TopicMetadata) error {
	topics = append([]*tapesv1.TopicMetadata(nil), topics...)
	sort.Slice(topics, func(i, j int) bool { return topics[i].GetName() < topics[j].GetName() })
	var errs []error
	for _, tm := range topics {
		if err := kerr.FromDetail(tm.GetError()); err != nil && len(tm.GetPartitions()) == 0 {
			errs = append(errs, fmt.Errorf("describe topic %q: %w", tm.GetName(), err))
			continue
		}
		WriteTopic(w, tm)
	}
	return errors.Join(errs...)
}

// WriteTopic prints one topic as kafka-topics --describe does (with two
// spaces between columns instead of tabs).
func WriteTopic(w io.Writer, tm *tapesv1.TopicMetadata) {
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
			tm.GetName(), p.GetPartition(), leader, BrokerList(p.GetReplicas()), BrokerList(p.GetIsr()),
			p.GetLeaderEpoch(), p.GetLogStartOffset(), p.GetHighWatermark())
		if len(p.GetAddingReplicas())+len(p.GetRemovingReplicas()) > 0 {
			// During a reassignment, as kafka-topics --describe shows it,
			// with the Raft configuration its leader last reported.
			fmt.Fprintf(w, "  Adding Replicas: %s  Removing Replicas: %s  Voters: %s  NonVoters: %s",
				BrokerList(p.GetAddingReplicas()), BrokerList(p.GetRemovingReplicas()), BrokerList(p.GetRaftVoters()), BrokerList(p.GetRaftLearners()))
			if th := p.GetThrottleBytesPerSec(); th > 0 {
				// The joining replicas' catch-up limit, until each is a voter.
				fmt.Fprintf(w, "  Throttle: %d B/s", th)
			}
		}
		if code := p.GetError().GetCode(); code != "" {
			fmt.Fprintf(w, "  Error: %s", code)
		}
		fmt.Fprintln(w)
	}
}

// BrokerList prints broker ids as kafka-topics does ("1,2,3"), or "none".
func BrokerList(ids []int32) string {
	if len(ids) == 0 {
		return "none"
	}
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = strconv.Itoa(int(id))
	}
	return strings.Join(s, ",")
}
