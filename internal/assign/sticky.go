package assign

import (
	"slices"
	"strings"
)

// CooperativeSticky is the KIP-429 incremental cooperative sticky assignor.
//
// Algorithm, in order:
//
//  1. Claims. A member's owned partition counts only if the topic still exists,
//     the partition is in range and the member is still subscribed to the
//     topic. When several members claim the same partition, the highest
//     generation wins (the others are stale: they were fenced and must revoke
//     it); when the highest generation is shared, nobody is trusted with it:
//     it is withheld for this round so that every claimant revokes it, and it
//     is assigned in the next one.
//  2. Stickiness. Each valid owner keeps its partitions.
//  3. Fill. Unowned partitions, in sorted order, go to the eligible member
//     (subscribed to the topic) with the fewest partitions, ties by id.
//  4. Balance. While some member has at least two partitions more than a
//     member that could take one of them, one partition moves from the most
//     loaded to the least loaded such member (preferring partitions given in
//     step 3, so that no owned partition moves when a fresh one can). Each move
//     lowers the sum of squared counts, so this ends; with identical
//     subscriptions it ends balanced to within one with the fewest moves.
//  5. Cooperation. A partition that some member claims is assigned in this
//     round only to its valid owner; if its target is another member, it is
//     left out of this round's assignment: its claimants revoke it, and the rebalance they
//     trigger (round two) hands it over. Round two moves nothing else, so a
//     third round with no membership change is a no-op.
//
// Partitions of topics nobody subscribes to are left unassigned. Subscribed
// topics missing from partitions are ignored.
type CooperativeSticky struct{}

// Name returns "cooperative-sticky".
func (CooperativeSticky) Name() string { return CooperativeStickyName }

type claim struct {
	member MemberID
	gen    int32
}

// Assign implements Assignor.
func (CooperativeSticky) Assign(partitions map[string]int32, subs []Subscription) (Assignment, error) {
	if err := validate(partitions, subs); err != nil {
		return nil, err
	}
	subs = sortedSubs(subs)
	members := make([]MemberID, len(subs))
	eligible := make(map[MemberID]map[string]bool, len(subs))
	subscribed := map[string]bool{}
	for i, s := range subs {
		members[i] = s.Member
		e := map[string]bool{}
		for _, t := range s.Topics {
			if _, ok := partitions[t]; ok {
				e[t] = true
				subscribed[t] = true
			}
		}
		eligible[s.Member] = e
	}

	// All partitions of subscribed topics, sorted.
	var all []TopicPartition
	for _, t := range sortedTopics(partitions) {
		if !subscribed[t] {
			continue
		}
		for p := int32(0); p < partitions[t]; p++ {
			all = append(all, TopicPartition{t, p})
		}
	}

	// 1. Claims.
	claims := map[TopicPartition][]claim{}
	for _, s := range subs {
		seen := map[TopicPartition]bool{}
		for _, tp := range s.Owned {
			n, ok := partitions[tp.Topic]
			if !ok || tp.Partition < 0 || tp.Partition >= n || seen[tp] {
				continue
			}
			seen[tp] = true
			claims[tp] = append(claims[tp], claim{s.Member, s.Generation})
		}
	}
	owner := map[TopicPartition]MemberID{}
	withheld := map[TopicPartition]bool{}
	for tp, cs := range claims {
		var valid []claim
		for _, c := range cs {
			if eligible[c.member][tp.Topic] {
				valid = append(valid, c)
			}
		}
		if len(valid) == 0 {
			continue
		}
		best := valid[0]
		tie := false
		for _, c := range valid[1:] {
			switch {
			case c.gen > best.gen:
				best, tie = c, false
			case c.gen == best.gen:
				tie = true
			}
		}
		if tie {
			withheld[tp] = true
		} else {
			owner[tp] = best.member
		}
	}

	// 2. Stickiness.
	target := make(map[TopicPartition]MemberID, len(all))
	count := make(map[MemberID]int, len(members))
	for _, tp := range all {
		if m, ok := owner[tp]; ok {
			target[tp] = m
			count[m]++
		}
	}

	// 3. Fill.
	for _, tp := range all {
		if _, ok := target[tp]; ok || withheld[tp] {
			continue
		}
		var best MemberID
		found := false
		for _, m := range members {
			if eligible[m][tp.Topic] && (!found || count[m] < count[best]) {
				best, found = m, true
			}
		}
		if found {
			target[tp] = best
			count[best]++
		}
	}

	// 4. Balance.
	for moveOne(all, members, eligible, owner, target, count) {
	}

	// 5. Cooperation.
	out := emptyAssignment(subs)
	for _, tp := range all {
		m, ok := target[tp]
		if !ok {
			continue
		}
		if len(claims[tp]) > 0 && owner[tp] != m {
			continue // its claimants revoke it first; round two hands it over
		}
		out[m] = append(out[m], tp)
	}
	return out, nil
}

// moveOne performs one balancing move and reports whether it found one.
func moveOne(all []TopicPartition, members []MemberID, eligible map[MemberID]map[string]bool,
	owner, target map[TopicPartition]MemberID, count map[MemberID]int) bool {
	givers := slices.Clone(members)
	slices.SortStableFunc(givers, func(a, b MemberID) int {
		if count[a] != count[b] {
			return count[b] - count[a]
		}
		return strings.Compare(string(a), string(b))
	})
	takers := slices.Clone(members)
	slices.SortStableFunc(takers, func(a, b MemberID) int {
		if count[a] != count[b] {
			return count[a] - count[b]
		}
		return strings.Compare(string(a), string(b))
	})
	for _, from := range givers {
		for _, to := range takers {
			if count[from]-count[to] < 2 {
				break // the rest are at least as loaded
			}
			// Prefer a partition not owned by from (fresh), then the last one.
			var pick TopicPartition
			found, fresh := false, false
			for _, tp := range all {
				if target[tp] != from || !eligible[to][tp.Topic] {
					continue
				}
				f := owner[tp] != from
				if !found || f || !fresh {
					pick, found = tp, true
					fresh = fresh || f
				}
			}
			if !found {
				continue
			}
			target[pick] = to
			count[from]--
			count[to]++
			return true
		}
	}
	return false
}
