package main

import (
	"context"
	"fmt"

	"github.com/tapes-dev/tapes/internal/client"
	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/kerr"
)

// groupStats is what `cluster sink stats --group G --topic T` shows of a
// group.
type groupStats struct {
	// totalLag is the sum over the topic's partitions of high watermark -
	// committed offset (log start where nothing is committed; never
	// negative per partition).
	totalLag   int64
	members    int64
	generation int64
}

// groupTopicStats asks the cluster t names for group's lag on topic, its
// member count and generation. A group the coordinator does not know fails
// with GROUP_ID_NOT_FOUND.
func groupTopicStats(ctx context.Context, t clusterTarget, group, topic string) (groupStats, error) {
	cl, err := t.client()
	if err != nil {
		return groupStats{}, err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	d, err := describeExistingGroup(ctx, cl, group)
	if err != nil {
		return groupStats{}, err
	}
	lag, err := groupTopicLag(ctx, cl, group, topic)
	if err != nil {
		return groupStats{}, err
	}
	return groupStats{totalLag: lag, members: int64(len(d.GetMembers())), generation: int64(d.GetGenerationId())}, nil
}

// groupTopicLag sums the lag of group over every partition of topic.
func groupTopicLag(ctx context.Context, cl *client.Client, group, topic string) (int64, error) {
	md, err := cl.Metadata(ctx, []string{topic}, true)
	if err != nil {
		return 0, err
	}
	var tm *tapesv1.TopicMetadata
	for _, m := range md.GetTopics() {
		if m.GetName() == topic {
			tm = m
		}
	}
	if tm == nil {
		return 0, kerr.New(kerr.UnknownTopicOrPartition, "topic %s does not exist", topic)
	}
	if err := kerr.FromDetail(tm.GetError()); err != nil && len(tm.GetPartitions()) == 0 {
		return 0, fmt.Errorf("topic %s: %w", topic, err)
	}
	req := &tapesv1.TopicPartitions{Topic: topic}
	for _, pm := range tm.GetPartitions() {
		req.Partitions = append(req.Partitions, pm.GetPartition())
	}
	if len(req.Partitions) == 0 {
		return 0, nil
	}
	committed, err := cl.OffsetFetch(ctx, group, []*tapesv1.TopicPartitions{req})
	if err != nil {
		return 0, err
	}
	current := map[int32]int64{}
	for _, co := range committed {
		if co.GetTopic() == topic {
			current[co.GetPartition()] = co.GetOffset()
		}
	}
	var total int64
	for _, pm := range tm.GetPartitions() {
		end, start := pm.GetHighWatermark(), pm.GetLogStartOffset()
		if end < 0 || start < 0 {
			return 0, fmt.Errorf("lag of %s-%d: its leader did not report its offsets (leader %d)", topic, pm.GetPartition(), pm.GetLeaderId())
		}
		from := start
		if c, ok := current[pm.GetPartition()]; ok && c >= 0 {
			from = c
		}
		total += max(0, end-from)
	}
	return total, nil
}
