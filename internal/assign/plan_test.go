package assign

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
)

// planCost is what plan minimises, computed directly from an assignment: the
// sum of squared member totals, then the sum of squared (member, topic) counts
// and the number of validly owned partitions given to another member, these
// two in the order costs gives them.
func planCost(target map[TopicPartition]MemberID, owner map[TopicPartition]MemberID, same bool) cost {
	total := map[MemberID]int64{}
	perTopic := map[string]map[MemberID]int64{}
	var c cost
	for tp, m := range target {
		total[m]++
		if perTopic[tp.Topic] == nil {
			perTopic[tp.Topic] = map[MemberID]int64{}
		}
		perTopic[tp.Topic][m]++
		if o, ok := owner[tp]; ok && o != m {
			c[moveRank(same)]++
		}
	}
	for _, n := range total {
		c[0] += n * n
	}
	for _, counts := range perTopic {
		for _, n := range counts {
			c[3-moveRank(same)] += n * n
		}
	}
	return c
}

// moveRank is the rank of the moves among the costs.
func moveRank(same bool) int {
	if same {
		return 2
	}
	return 1
}

// countVector lists the (member, topic) counts in plan's tie-break order.
func countVector(target map[TopicPartition]MemberID, members []MemberID, eligible map[MemberID]map[string]bool) []int {
	var v []int
	for _, m := range members {
		for _, t := range slices.Sorted(maps.Keys(eligible[m])) {
			n := 0
			for tp, o := range target {
				if o == m && tp.Topic == t {
					n++
				}
			}
			v = append(v, n)
		}
	}
	return v
}

// TestPlanOptimal checks plan against every possible assignment of small
// random groups: its target has the least cost, and among the assignments of
// least cost, the lexicographically largest counts.
func TestPlanOptimal(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 11))
	for i := range 400 {
		partitions := map[string]int32{}
		for k := range 1 + r.IntN(3) {
			partitions[fmt.Sprintf("t%d", k)] = int32(r.IntN(4))
		}
		var members []MemberID
		eligible := map[MemberID]map[string]bool{}
		for k := range 1 + r.IntN(3) {
			m := MemberID(fmt.Sprintf("m%d", k))
			members = append(members, m)
			eligible[m] = map[string]bool{}
			for tn := range partitions {
				if r.IntN(3) > 0 {
					eligible[m][tn] = true
				}
			}
		}
		var all []TopicPartition
		choices := map[TopicPartition][]MemberID{}
		owner := map[TopicPartition]MemberID{}
		for _, tn := range sortedTopics(partitions) {
			for p := range partitions[tn] {
				tp := TopicPartition{tn, p}
				for _, m := range members {
					if eligible[m][tn] {
						choices[tp] = append(choices[tp], m)
					}
				}
				if len(choices[tp]) == 0 {
					continue
				}
				all = append(all, tp)
				if r.IntN(2) == 0 {
					owner[tp] = choices[tp][r.IntN(len(choices[tp]))]
				}
			}
		}
		same := true
		for _, m := range members {
			for tn := range partitions {
				same = same && (eligible[m][tn] == eligible[members[0]][tn] || len(choices[TopicPartition{tn, 0}]) == 0)
			}
		}
		ctx := fmt.Sprintf("case %d: partitions %v eligible %v owner %v", i, partitions, eligible, owner)
		got, err := plan(partitions, members, eligible, owner)
		if err != nil {
			t.Fatalf("%s: %v", ctx, err)
		}
		if len(got) != len(all) {
			t.Fatalf("%s: %d partitions placed, want %d: %v", ctx, len(got), len(all), got)
		}
		for tp, m := range got {
			if !slices.Contains(choices[tp], m) {
				t.Fatalf("%s: %v given to %s, not subscribed", ctx, tp, m)
			}
		}

		// Every assignment, by odometer over each partition's choices.
		var best cost
		var bestCounts []int
		found := false
		idx := make([]int, len(all))
		for {
			a := map[TopicPartition]MemberID{}
			for j, tp := range all {
				a[tp] = choices[tp][idx[j]]
			}
			c, v := planCost(a, owner, same), countVector(a, members, eligible)
			if cmp := c.compare(best); !found || cmp < 0 || cmp == 0 && slices.Compare(v, bestCounts) > 0 {
				best, bestCounts, found = c, v, true
			}
			j := 0
			for ; j < len(all); j++ {
				if idx[j]++; idx[j] < len(choices[all[j]]) {
					break
				}
				idx[j] = 0
			}
			if j == len(all) {
				break
			}
		}
		if c := planCost(got, owner, same); c != best {
			t.Fatalf("%s: plan costs %v, the best assignment %v: %v", ctx, c, best, got)
		}
		if v := countVector(got, members, eligible); !slices.Equal(v, bestCounts) {
			t.Fatalf("%s: plan counts %v, the largest of least cost are %v: %v", ctx, v, bestCounts, got)
		}
	}
}
