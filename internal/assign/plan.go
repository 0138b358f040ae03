package assign

import (
	"fmt"
	"maps"
	"slices"
)

// costs returns the units of the three costs of plan's network (see
// CooperativeSticky): per member, its total squared; per member and topic,
// its count squared; per validly owned partition going to another member, one.
// The first ranks first; the topic balance ranks before the moves only when
// every member subscribes to the same topics.
func costs(sameSubscriptions bool) (total, topic, move cost) {
	if sameSubscriptions {
		return cost{1, 0, 0}, cost{0, 1, 0}, cost{0, 0, 1}
	}
	return cost{1, 0, 0}, cost{0, 0, 1}, cost{0, 1, 0}
}

// plan computes the target of every partition of the topics some member is
// eligible for (steps 2 and 3 of CooperativeSticky): members are sorted,
// eligible[m] holds the existing topics m subscribes to, owner the valid owner
// of each partition that has one.
//
// The network: source -> member (convex, costTotal) -> (member, topic) pair
// (convex, costTopic) -> then either the topic's free partitions (those
// nobody validly owns), or the member's own partitions of the topic, or, at
// costMove, the topic's pool, from which any other member's own partitions
// are reached -> sink, each partition class with its size as capacity. Its
// cheapest full flow gives the counts; the flow on a member -> pair edge is
// the member's count in the topic.
func plan(partitions map[string]int32, members []MemberID, eligible map[MemberID]map[string]bool,
	owner map[TopicPartition]MemberID) (map[TopicPartition]MemberID, error) {
	owned := map[MemberID]map[string][]int32{}
	for tp, m := range owner {
		if owned[m] == nil {
			owned[m] = map[string][]int32{}
		}
		owned[m][tp.Topic] = append(owned[m][tp.Topic], tp.Partition)
	}
	subscribers := map[string][]MemberID{} // sorted, as members is
	for _, m := range members {
		for t := range eligible[m] {
			subscribers[t] = append(subscribers[t], m)
		}
		for _, ps := range owned[m] {
			slices.Sort(ps)
		}
	}
	topics := sortedTopics(partitions)
	topics = slices.DeleteFunc(topics, func(t string) bool { return len(subscribers[t]) == 0 })
	same := true // every member subscribes to every topic that has partitions
	for _, t := range topics {
		same = same && (partitions[t] == 0 || len(subscribers[t]) == len(members))
	}
	costTotal, costTopic, costMove := costs(same)

	var n network
	src, sink := n.addNode(), n.addNode()
	free, pool := map[string]int{}, map[string]int{}
	want := 0
	for _, t := range topics {
		size := int(partitions[t])
		want += size
		unowned := size
		for _, m := range subscribers[t] {
			unowned -= len(owned[m][t])
		}
		free[t], pool[t] = n.addNode(), n.addNode()
		n.addEdge(free[t], sink, unowned, cost{}, false)
	}
	type pair struct {
		member MemberID
		topic  string
		from   int // member node
		to     int // pair node
		edge   int // member -> pair: its flow is the count
	}
	var pairs []pair
	for _, m := range members {
		mt := slices.Sorted(maps.Keys(eligible[m]))
		total := 0
		for _, t := range mt {
			total += int(partitions[t])
		}
		mn := n.addNode()
		n.addEdge(src, mn, total, costTotal, true)
		for _, t := range mt {
			size := int(partitions[t])
			pn := n.addNode()
			pairs = append(pairs, pair{m, t, mn, pn, n.addEdge(mn, pn, size, costTopic, true)})
			n.addEdge(pn, free[t], size, cost{}, false)
			n.addEdge(pn, pool[t], size, costMove, false)
			if o := len(owned[m][t]); o > 0 {
				on := n.addNode()
				n.addEdge(pn, on, o, cost{}, false)
				n.addEdge(pool[t], on, o, cost{}, false)
				n.addEdge(on, sink, o, cost{}, false)
			}
		}
	}
	if got := n.minCostFlow(src, sink, want); got != want {
		return nil, fmt.Errorf("assign: internal error: %d of %d partitions placed", got, want)
	}

	// Tie-break: raise each pair's count in turn, in (member, topic) order,
	// while the flow stays among the cheapest (a cycle of zero reduced cost
	// through its edge, not changing the pairs already settled). A convex
	// edge has at most one unit of zero reduced cost, so one try per pair
	// reaches its largest count. The searches for one member's pairs all end
	// at its node, and a node that cannot reach it stays so while its pairs
	// are settled (settling only removes arcs; a cycle only adds arcs leaving
	// its own nodes, which reach the member), so they share what is dead.
	settled := make([]bool, len(n.edges))
	var dead []bool
	for i, p := range pairs {
		if i == 0 || p.from != pairs[i-1].from {
			dead = make([]bool, len(n.adj))
		}
		if _, _, rc, ok := n.reduced(2 * p.edge); ok && rc == (cost{}) {
			cycle := n.admissiblePath(p.to, p.from, func(e int) bool { return settled[e] || e == p.edge }, dead)
			if cycle != nil {
				for _, a := range cycle {
					n.push(a)
				}
				n.push(2 * p.edge)
			}
		}
		settled[p.edge] = true
	}

	count := map[MemberID]map[string]int{}
	for _, p := range pairs {
		if count[p.member] == nil {
			count[p.member] = map[string]int{}
		}
		count[p.member][p.topic] = n.edges[p.edge].flow
	}
	target := map[TopicPartition]MemberID{}
	for _, t := range topics {
		subs := subscribers[t]
		short := make([]int, len(subs)) // what each subscriber still needs
		kept := map[int32]bool{}
		for i, m := range subs {
			keep := owned[m][t][:min(len(owned[m][t]), count[m][t])]
			for _, p := range keep {
				target[TopicPartition{t, p}] = m
				kept[p] = true
			}
			short[i] = count[m][t] - len(keep)
		}
		for p := range partitions[t] {
			if kept[p] {
				continue
			}
			placed := false
			for k := range subs {
				i := (int(p) + k) % len(subs)
				if short[i] > 0 {
					target[TopicPartition{t, p}] = subs[i]
					short[i]--
					placed = true
					break
				}
			}
			if !placed {
				return nil, fmt.Errorf("assign: internal error: no member short of %s/%d", t, p)
			}
		}
	}
	return target, nil
}
