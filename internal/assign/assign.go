package assign

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// MemberID identifies a member of a consumer group.
type MemberID string

// TopicPartition names one partition of a topic.
type TopicPartition struct {
	Topic     string
	Partition int32
}

func (tp TopicPartition) String() string { return fmt.Sprintf("%s/%d", tp.Topic, tp.Partition) }

// Compare orders partitions by topic, then partition number.
func (tp TopicPartition) Compare(o TopicPartition) int {
	if c := strings.Compare(tp.Topic, o.Topic); c != 0 {
		return c
	}
	return cmp.Compare(tp.Partition, o.Partition)
}

// SortPartitions sorts tps in place by topic, then partition.
func SortPartitions(tps []TopicPartition) {
	slices.SortFunc(tps, TopicPartition.Compare)
}

// Subscription is what a member sends when it joins: the topics it wants, the
// partitions it currently owns (KIP-429) and the generation in which it was
// given them (-1 when it owns nothing yet).
type Subscription struct {
	Member     MemberID
	Topics     []string
	Owned      []TopicPartition
	Generation int32
}

// Assignment maps every member of the group to the partitions it gets, sorted.
// Every member passed to Assign has an entry, possibly empty.
type Assignment map[MemberID][]TopicPartition

// Assignor computes an assignment from the partition counts of the topics
// (topic -> number of partitions) and the members' subscriptions.
type Assignor interface {
	Name() string
	Assign(partitions map[string]int32, subs []Subscription) (Assignment, error)
}

// Names of the assignors, as used on the wire and on command lines.
const (
	RangeName             = "range"
	CooperativeStickyName = "cooperative-sticky"
)

// ByName returns the assignor called name.
func ByName(name string) (Assignor, error) {
	switch name {
	case RangeName:
		return Range{}, nil
	case CooperativeStickyName:
		return CooperativeSticky{}, nil
	}
	return nil, fmt.Errorf("assign: unknown assignor %q", name)
}

// Cooperative reports whether a uses the incremental cooperative protocol
// (members keep what they own across a rebalance) rather than the eager one.
func Cooperative(a Assignor) bool { return a.Name() == CooperativeStickyName }

// ErrInvalid wraps every input validation error.
var ErrInvalid = errors.New("assign: invalid input")

func validate(partitions map[string]int32, subs []Subscription) error {
	for t, n := range partitions {
		if n < 0 {
			return fmt.Errorf("%w: topic %q has %d partitions", ErrInvalid, t, n)
		}
	}
	seen := make(map[MemberID]bool, len(subs))
	for _, s := range subs {
		if s.Member == "" {
			return fmt.Errorf("%w: empty member id", ErrInvalid)
		}
		if seen[s.Member] {
			return fmt.Errorf("%w: member %q subscribes twice", ErrInvalid, s.Member)
		}
		seen[s.Member] = true
	}
	return nil
}

// sortedSubs returns subs sorted by member id (a copy).
func sortedSubs(subs []Subscription) []Subscription {
	out := slices.Clone(subs)
	slices.SortFunc(out, func(a, b Subscription) int { return strings.Compare(string(a.Member), string(b.Member)) })
	return out
}

func sortedTopics(partitions map[string]int32) []string {
	ts := make([]string, 0, len(partitions))
	for t := range partitions {
		ts = append(ts, t)
	}
	slices.Sort(ts)
	return ts
}

func emptyAssignment(subs []Subscription) Assignment {
	a := make(Assignment, len(subs))
	for _, s := range subs {
		a[s.Member] = []TopicPartition{}
	}
	return a
}

// Range is Kafka's RangeAssignor (eager). For each topic, the members
// subscribed to it, sorted by id, get contiguous ranges of its partitions; when
// the count does not divide evenly the first members get one more. Owned
// partitions and generations are ignored.
type Range struct{}

// Name returns "range".
func (Range) Name() string { return RangeName }

// Assign implements Assignor.
func (Range) Assign(partitions map[string]int32, subs []Subscription) (Assignment, error) {
	if err := validate(partitions, subs); err != nil {
		return nil, err
	}
	subs = sortedSubs(subs)
	out := emptyAssignment(subs)
	for _, t := range sortedTopics(partitions) {
		var members []MemberID
		for _, s := range subs {
			if slices.Contains(s.Topics, t) {
				members = append(members, s.Member)
			}
		}
		if len(members) == 0 {
			continue
		}
		n := partitions[t]
		k := int32(len(members))
		per, extra := n/k, n%k
		var start int32
		for i, m := range members {
			cnt := per
			if int32(i) < extra {
				cnt++
			}
			for p := start; p < start+cnt; p++ {
				out[m] = append(out[m], TopicPartition{t, p})
			}
			start += cnt
		}
	}
	for m := range out {
		SortPartitions(out[m])
	}
	return out, nil
}
