package assign

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
//     is assigned in the next one. The winner is the partition's valid owner.
//  2. Counts. How many partitions of each topic each member gets is the
//     cheapest flow of a min-cost flow network (plan) whose costs are
//     compared lexicographically: first the sum over members of their totals
//     squared (the members as balanced as their subscriptions allow: with
//     identical subscriptions, within one); then the number of validly owned
//     partitions that go to another member (sticky: a member short of its
//     count takes partitions nobody validly owns before anyone revokes one)
//     and the sum over (member, topic) of the member's count in the topic
//     squared (each topic split as evenly among its subscribers as the rest
//     allows). The topic balance ranks before the moves when every member
//     subscribes to the same topics, so each topic is then split to within
//     one too (both hold at once), and after them otherwise, where splitting a
//     topic can cost moves that total balance does not need (Kafka's sticky
//     assignor chooses between its constrained and general paths on the same
//     condition). Among the cheapest, the counts taken are the lexicographically
//     largest in (member, topic) order, so the first members get the extra
//     partitions.
//  3. Partitions. Per topic, each owner keeps its lowest-numbered owned
//     partitions up to its count; the rest, in partition order, go to the
//     members still short, each partition p to the first of them from the
//     (p mod n)-th of the topic's n subscribers on (a fixed preference that
//     spreads a fresh topic round-robin).
//  4. Cooperation. A partition that some member claims is assigned in this
//     round only to its valid owner; if its target is another member, it is
//     left out of this round's assignment: its claimants revoke it, and the
//     rebalance they trigger (round two) hands it over.
//
// Round two computes the same target, so it hands over exactly what round one
// revoked and moves nothing else (and a third round with no membership change
// is a no-op). Why: only the moves depend on what members own, and in round
// two every member owns what round one left it, a subset of its target. The
// target keeps all of that, which is the most any assignment can keep, so
// every cheapest assignment of round two keeps it too and ties with the
// target on the other costs; such an assignment keeps in round one at least
// as much as round one's target kept, so it was among round one's cheapest as
// well, and the same tie-break picks the same counts. Step 3 then picks the
// same partitions: owners keep what they hold, and for each partition revoked
// in round one the greedy makes the same choice, because the members it
// prefers to that choice had no room left then and have none now. So a
// partition revoked in round one is never handed back to the member that
// revoked it, unless a conflicting claim forced the revocation.
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
	r, err := planRound(partitions, subs)
	if err != nil {
		return nil, err
	}

	// 4. Cooperation.
	out := emptyAssignment(subs)
	for _, tp := range r.all {
		m, ok := r.target[tp]
		if !ok {
			continue
		}
		if len(r.claims[tp]) > 0 && r.owner[tp] != m {
			continue // its claimants revoke it first; round two hands it over
		}
		out[m] = append(out[m], tp)
	}
	return out, nil
}

// stickyRound is what one cooperative-sticky rebalance computes before
// leaving out the partitions that change owner.
type stickyRound struct {
	all    []TopicPartition            // every partition of a subscribed topic, sorted
	claims map[TopicPartition][]claim  // who claims each partition, valid or not
	owner  map[TopicPartition]MemberID // valid owner, when there is one
	target map[TopicPartition]MemberID // where each partition of all ends
}

// planRound runs steps 1 to 3 of CooperativeSticky on validated input, subs
// sorted by member.
func planRound(partitions map[string]int32, subs []Subscription) (*stickyRound, error) {
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
		if !tie { // tied: no owner, so whoever gets it waits for every claimant to revoke
			owner[tp] = best.member
		}
	}

	// 2 and 3. Counts and partitions.
	target, err := plan(partitions, members, eligible, owner)
	if err != nil {
		return nil, err
	}
	return &stickyRound{all: all, claims: claims, owner: owner, target: target}, nil
}
