// Package offsetreset resets a consumer group's committed offsets as
// kafka-consumer-groups --reset-offsets does: new offsets by a strategy,
// clamped to the log's bounds, committed as an admin commit (generation -1,
// no member) that the coordinator accepts only while the group has no
// members. `cluster groups reset-offsets` and the live page share it.
package offsetreset

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tapes-dev/tapes/internal/client"
	"github.com/tapes-dev/tapes/internal/clitext"
	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/kerr"
)

// Strategy is how the new offsets are chosen, and its argument.
type Strategy struct {
	// Name is the CLI's flag: "to-earliest", "to-latest", "to-offset",
	// "shift-by" or "to-datetime".
	Name     string
	Offset   int64 // to-offset, shift-by
	Datetime time.Time
}

// String names the strategy and its value for error messages.
func (s Strategy) String() string {
	switch s.Name {
	case "to-offset", "shift-by":
		return fmt.Sprintf("--%s %d", s.Name, s.Offset)
	case "to-datetime":
		return "--to-datetime " + s.Datetime.Format(time.RFC3339Nano)
	}
	return "--" + s.Name
}

// ActiveError refuses a reset because the group has members.
type ActiveError struct {
	Group string
	// Members describes them: "2 active members (state Stable)".
	Members string
	// Err is the coordinator's refusal of the commit, when the members
	// joined after the check.
	Err error
}

func (e *ActiveError) Error() string {
	s := fmt.Sprintf("reset-offsets: group %s has %s: stop them first", e.Group, e.Members)
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *ActiveError) Unwrap() error { return e.Err }

// CheckEmpty describes group and refuses (*ActiveError) when it has
// members; a group that does not exist yet is fine.
func CheckEmpty(ctx context.Context, cl *client.Client, group string) error {
	d, err := cl.DescribeGroup(ctx, group)
	if err != nil {
		return err
	}
	if st := d.GetState(); st != clitext.GroupEmpty && st != clitext.GroupDead {
		return &ActiveError{Group: group, Members: clitext.MembersSummary(d)}
	}
	return nil
}

// Commit commits the plan's new offsets of topic for group as an admin
// commit. Members that joined since CheckEmpty make it fail with an
// *ActiveError wrapping the coordinator's UNKNOWN_MEMBER_ID.
func Commit(ctx context.Context, cl *client.Client, group, topic string, plan []Plan) error {
	req := &tapesv1.OffsetCommitRequest{GroupId: group, GenerationId: -1}
	for _, p := range plan {
		req.Offsets = append(req.Offsets, &tapesv1.OffsetCommitPartition{Topic: topic, Partition: p.Partition, Offset: p.Next})
	}
	err := cl.OffsetCommit(ctx, req)
	if err != nil && kerr.Is(err, kerr.UnknownMemberID) { // members joined since the check
		if d, derr := cl.DescribeGroup(ctx, group); derr == nil && len(d.GetMembers()) > 0 {
			return &ActiveError{Group: group, Members: clitext.MembersSummary(d), Err: err}
		}
		return &ActiveError{Group: group, Members: "active members", Err: err}
	}
	return err
}

// Plan is the new offset of one partition.
type Plan struct {
	Partition int32
	Current   int64 // -1: nothing committed
	Next      int64
}

// Compute computes the new offset of each partition of topic (or of the
// listed ones, nil: all), clamped to [log start, log end]. It commits
// nothing. Its errors name the CLI's --topic flag.
func Compute(ctx context.Context, cl *client.Client, group, topic string, partitions []int32, s Strategy) ([]Plan, error) {
	md, err := cl.Metadata(ctx, []string{topic}, false)
	if err != nil {
		return nil, err
	}
	var tm *tapesv1.TopicMetadata
	for _, m := range md.GetTopics() {
		if m.GetName() == topic {
			tm = m
		}
	}
	if tm == nil {
		return nil, kerr.New(kerr.UnknownTopicOrPartition, "--topic %s: topic does not exist", topic)
	}
	if err := kerr.FromDetail(tm.GetError()); err != nil && len(tm.GetPartitions()) == 0 {
		return nil, fmt.Errorf("--topic %s: %w", topic, err)
	}
	exists := map[int32]bool{}
	for _, pm := range tm.GetPartitions() {
		exists[pm.GetPartition()] = true
	}
	if partitions == nil {
		for p := range exists {
			partitions = append(partitions, p)
		}
		sort.Slice(partitions, func(i, j int) bool { return partitions[i] < partitions[j] })
	}
	var missing []string
	for _, p := range partitions {
		if !exists[p] {
			missing = append(missing, strconv.Itoa(int(p)))
		}
	}
	if len(missing) > 0 {
		return nil, kerr.New(kerr.UnknownTopicOrPartition, "--topic %s: topic %s has %d partitions; no partition %s",
			topic, topic, len(exists), strings.Join(missing, ", "))
	}
	if len(partitions) == 0 {
		return nil, fmt.Errorf("--topic %s: the topic has no partitions", topic)
	}

	req := []*tapesv1.TopicPartitions{{Topic: topic, Partitions: partitions}}
	committed, err := cl.OffsetFetch(ctx, group, req)
	if err != nil {
		return nil, err
	}
	current := map[int32]int64{}
	for _, co := range committed {
		if co.GetTopic() == topic {
			current[co.GetPartition()] = co.GetOffset()
		}
	}
	plan := make([]Plan, len(partitions))
	var uncommitted []string
	for i, p := range partitions {
		cur, ok := current[p]
		if !ok || cur < 0 {
			cur = -1
			uncommitted = append(uncommitted, fmt.Sprintf("%s-%d", topic, p))
		}
		plan[i] = Plan{Partition: p, Current: cur}
	}
	if s.Name == "shift-by" && len(uncommitted) > 0 {
		return nil, fmt.Errorf("%v: group %s has no committed offset for %s to shift; reset those with another strategy (--topic %s:P,...)",
			s, group, strings.Join(uncommitted, ", "), topic)
	}

	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for i := range plan {
		wg.Go(func() {
			next, err := newOffset(ctx, cl, topic, &plan[i], s)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("%s-%d: %w", topic, plan[i].Partition, err))
				return
			}
			plan[i].Next = next
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		sort.Slice(errs, func(i, j int) bool { return errs[i].Error() < errs[j].Error() })
		return nil, errors.Join(errs...)
	}
	return plan, nil
}

// newOffset computes one partition's new offset from its leader's
// log bounds.
func newOffset(ctx context.Context, cl *client.Client, topic string, p *Plan, s Strategy) (int64, error) {
	start, err := cl.ListOffsets(ctx, topic, p.Partition, client.EarliestOffset)
	if err != nil {
		return 0, err
	}
	end, err := cl.ListOffsets(ctx, topic, p.Partition, client.LatestOffset)
	if err != nil {
		return 0, err
	}
	lo, hi := start.GetOffset(), end.GetOffset()
	var next int64
	switch s.Name {
	case "to-earliest":
		next = lo
	case "to-latest":
		next = hi
	case "to-offset":
		next = s.Offset
	case "shift-by":
		next = p.Current + s.Offset
		if s.Offset > 0 && next < p.Current { // overflow
			next = hi
		}
	case "to-datetime":
		at, err := cl.ListOffsets(ctx, topic, p.Partition, s.Datetime.UnixMilli())
		if err != nil {
			return 0, err
		}
		next = at.GetOffset()
		if next < 0 { // no record that recent
			next = hi
		}
	default:
		return 0, fmt.Errorf("unknown strategy %q", s.Name)
	}
	return min(max(next, lo), hi), nil
}
