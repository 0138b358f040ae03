package assign

import (
	"fmt"
	"testing"
)

// benchGroup returns the subscriptions of a group of members that subscribe
// to every topic, own a balanced assignment, and a new member that just
// joined (so the assignor has to move partitions).
func benchGroup(b *testing.B, members, topics, partitions int) (map[string]int32, []Subscription) {
	parts := map[string]int32{}
	var names []string
	for t := range topics {
		n := fmt.Sprintf("topic%03d", t)
		parts[n] = int32(partitions)
		names = append(names, n)
	}
	var subs []Subscription
	for m := range members {
		subs = append(subs, Subscription{Member: MemberID(fmt.Sprintf("m%04d", m)), Topics: names, Generation: 1})
	}
	res, err := CooperativeSticky{}.Assign(parts, subs)
	if err != nil {
		b.Fatal(err)
	}
	for i := range subs {
		subs[i].Owned = res[subs[i].Member]
	}
	subs = append(subs, Subscription{Member: "new", Topics: names, Generation: -1})
	return parts, subs
}

func benchmarkAssign(b *testing.B, a Assignor, members, topics, partitions int) {
	parts, subs := benchGroup(b, members, topics, partitions)
	b.ResetTimer()
	for b.Loop() {
		if _, err := a.Assign(parts, subs); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCooperativeSticky(b *testing.B) {
	for _, c := range []struct{ members, topics, partitions int }{{10, 3, 12}, {100, 10, 100}} {
		b.Run(fmt.Sprintf("members=%d/topics=%d/partitions=%d", c.members, c.topics, c.partitions), func(b *testing.B) {
			benchmarkAssign(b, CooperativeSticky{}, c.members, c.topics, c.partitions)
		})
	}
}
