package assign

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
)

// holders returns, per partition, the in-group members currently holding it.
func (g *group) holders() map[TopicPartition][]MemberID {
	h := map[TopicPartition][]MemberID{}
	for _, id := range g.memberIDs(true) {
		for _, tp := range g.members[id].owned {
			h[tp] = append(h[tp], id)
		}
	}
	return h
}

// round runs one cooperative rebalance and checks that no partition is handed
// to a member while another member of the group still holds it, and that no
// partition is assigned twice. It returns the assignment and, per member, what
// it had to revoke (held before, not assigned now).
func (g *group) round(t *testing.T, ctx string) (Assignment, map[MemberID][]TopicPartition) {
	t.Helper()
	before := g.holders()
	subs := g.subscriptions()
	res, err := CooperativeSticky{}.Assign(g.topics, subs)
	if err != nil {
		t.Fatalf("%s: %v", ctx, err)
	}
	g.gen++
	seen := map[TopicPartition]MemberID{}
	revoked := map[MemberID][]TopicPartition{}
	for _, s := range subs {
		got := res[s.Member]
		for _, tp := range got {
			if prev, ok := seen[tp]; ok {
				t.Fatalf("%s: %v assigned to %s and %s", ctx, tp, prev, s.Member)
			}
			seen[tp] = s.Member
			if hs := before[tp]; len(hs) > 0 && !slices.Contains(hs, s.Member) {
				t.Fatalf("%s: %v handed to %s while %v still hold it", ctx, tp, s.Member, hs)
			}
			if !slices.Contains(s.Topics, tp.Topic) {
				t.Fatalf("%s: %v given to %s, not subscribed", ctx, tp, s.Member)
			}
		}
		m := g.members[s.Member]
		if r := diff(m.owned, got); len(r) > 0 {
			revoked[s.Member] = r
		}
		m.owned = slices.Clone(got)
		m.gen = g.gen
	}
	return res, revoked
}

// checkComplete checks that every partition of a subscribed topic is assigned
// to exactly one member, subscribed to its topic.
func (g *group) checkComplete(t *testing.T, ctx string, res Assignment) {
	t.Helper()
	subs := g.subscriptions()
	owners := map[TopicPartition]int{}
	for _, s := range subs {
		for _, tp := range res[s.Member] {
			owners[tp]++
		}
	}
	for _, t0 := range sortedTopics(g.topics) {
		wanted := slices.ContainsFunc(subs, func(s Subscription) bool { return slices.Contains(s.Topics, t0) })
		for p := int32(0); p < g.topics[t0]; p++ {
			tp := TopicPartition{t0, p}
			if wanted && owners[tp] != 1 || !wanted && owners[tp] != 0 {
				t.Fatalf("%s: %v has %d owners: %v", ctx, tp, owners[tp], res)
			}
		}
	}
}

// checkBalanced checks that no partition could move from its member to
// another member subscribed to its topic with at least two fewer partitions
// (with identical subscriptions: counts differ by at most one) and, when
// perTopic is set, that each topic's partitions are split among its
// subscribers to within one.
func (g *group) checkBalanced(t *testing.T, ctx string, res Assignment, perTopic bool) {
	t.Helper()
	subs := g.subscriptions()
	for _, s := range subs {
		for _, tp := range res[s.Member] {
			for _, o := range subs {
				if slices.Contains(o.Topics, tp.Topic) && len(res[o.Member]) <= len(res[s.Member])-2 {
					t.Fatalf("%s: unbalanced: %v could move from %s (%d) to %s (%d): %v",
						ctx, tp, s.Member, len(res[s.Member]), o.Member, len(res[o.Member]), res)
				}
			}
		}
	}
	if !perTopic {
		return
	}
	for _, t0 := range sortedTopics(g.topics) {
		minC, maxC := -1, -1
		for _, s := range subs {
			if !slices.Contains(s.Topics, t0) {
				continue
			}
			n := 0
			for _, tp := range res[s.Member] {
				if tp.Topic == t0 {
					n++
				}
			}
			minC, maxC = min(n, cmpOr(minC, n)), max(n, maxC)
		}
		if maxC-minC > 1 {
			t.Fatalf("%s: topic %s split %d..%d among its subscribers: %v", ctx, t0, minC, maxC, res)
		}
	}
}

// cmpOr returns a, or b while a is still unset (negative).
func cmpOr(a, b int) int {
	if a < 0 {
		return b
	}
	return a
}

// checkConfirmed checks that round two confirms round one: nothing assigned in
// round one is taken away, and every partition revoked in round one ends with
// another member (none is handed back to the member that just revoked it),
// unless nobody subscribes to its topic any more or several members claimed
// it (contested: its stale claimants revoke it whatever the plan).
func (g *group) checkConfirmed(t *testing.T, ctx string, res1, res2 Assignment, revoked1 map[MemberID][]TopicPartition,
	contested map[TopicPartition]bool) {
	t.Helper()
	wanted := map[string]bool{}
	for _, s := range g.subscriptions() {
		for _, tn := range s.Topics {
			wanted[tn] = true
		}
	}
	holder := map[TopicPartition]MemberID{}
	for m, tps := range res2 {
		for _, tp := range tps {
			holder[tp] = m
		}
	}
	for m, tps := range res1 {
		if lost := diff(tps, res2[m]); len(lost) > 0 {
			t.Fatalf("%s: round two takes %v from %s, assigned in round one", ctx, lost, m)
		}
	}
	for _, m := range slices.Sorted(maps.Keys(revoked1)) {
		for _, tp := range revoked1[m] {
			if !wanted[tp.Topic] || contested[tp] {
				continue
			}
			if h, ok := holder[tp]; !ok || h == m {
				t.Fatalf("%s: %s revoked %v in round one, round two gives it to %q (revoked in round one: %v; round two: %v)",
					ctx, m, tp, h, revoked1, res2)
			}
		}
	}
}

// checkPlanned checks that round two's assignment is exactly the target that
// round one computed (round one assigned part of it and left out what moves).
func checkPlanned(t *testing.T, ctx string, target map[TopicPartition]MemberID, res2 Assignment) {
	t.Helper()
	want := Assignment{}
	for tp, m := range target {
		want[m] = append(want[m], tp)
	}
	for m, tps := range res2 {
		SortPartitions(want[m])
		if !slices.Equal(tps, want[m]) {
			t.Fatalf("%s: round two gives %s %v, round one planned %v", ctx, m, tps, want[m])
		}
	}
}

// scenario says what kind of random group randomScenario drives.
type scenario struct {
	sameTopics  bool // every member subscribes to every topic
	smallTopics bool // many topics of 1 to 3 partitions instead of up to 3 of up to 12
}

// randomScenario drives a random group (seeded: a failure names its seed and
// step, and reruns identically) through joins, leaves, crashes, fences and
// rejoins, topics growing and (with mixed subscriptions) subscription
// changes. After each step it runs
// three cooperative rounds and checks the properties of the assignor: round
// two confirms round one, is complete and balanced, and round three moves
// nothing.
func randomScenario(t *testing.T, seed uint64, sc scenario) {
	r := rand.New(rand.NewPCG(seed, 42))
	g := newGroup()
	var topicNames []string
	if sc.smallTopics {
		for i := range 4 + r.IntN(12) {
			tn := fmt.Sprintf("t%02d", i)
			topicNames = append(topicNames, tn)
			g.topics[tn] = int32(1 + r.IntN(3)*r.IntN(2))
		}
	} else {
		topicNames = []string{"a", "b", "c"}
		for _, tn := range topicNames[:1+r.IntN(3)] {
			g.topics[tn] = int32(1 + r.IntN(12))
		}
	}
	randomTopics := func() []string {
		var ts []string
		for _, tn := range slices.Sorted(maps.Keys(g.topics)) {
			if r.IntN(2) == 0 {
				ts = append(ts, tn)
			}
		}
		if len(ts) == 0 {
			ts = []string{topicNames[0]}
		}
		return ts
	}
	next := 0
	for step := range 12 {
		ids := g.memberIDs(true)
		var op string
		switch k := r.IntN(12); {
		case k == 11 && len(ids) > 0:
			// fence: the coordinator drops a member, which keeps its
			// partitions and its generation until it rejoins (the next
			// fence step), claiming them in a stale generation
			op = "fence"
			for _, id := range g.memberIDs(false) {
				if m := g.members[id]; !m.inGroup {
					m.inGroup = true
					op = "rejoin " + string(id)
					break
				}
			}
			if op == "fence" {
				id := ids[r.IntN(len(ids))]
				g.members[id].inGroup = false
				op += " " + string(id)
			}
		case k < 4 || len(ids) == 0:
			// one to three members join at once
			op = "join"
			for range 1 + r.IntN(2)*r.IntN(3) {
				next++
				id := MemberID(fmt.Sprintf("m%02d", next))
				m := &member{gen: -1, inGroup: true}
				if !sc.sameTopics {
					m.topics = randomTopics()
				}
				g.members[id] = m
				op += " " + string(id)
			}
		case k < 6:
			id := ids[r.IntN(len(ids))]
			delete(g.members, id)
			op = "leave " + string(id)
		case k < 8:
			// crash, possibly several at once
			for _, id := range ids {
				if r.IntN(3) == 0 {
					delete(g.members, id)
				}
			}
			op = "crash"
		case k < 10 || sc.sameTopics:
			tn := topicNames[r.IntN(len(topicNames))]
			g.topics[tn] += int32(1 + r.IntN(4))
			op = "grow " + tn
		default:
			id := ids[r.IntN(len(ids))]
			g.members[id].topics = randomTopics()
			op = "subscribe " + string(id)
		}
		ctx := fmt.Sprintf("seed %d step %d (%s)", seed, step, op)
		contested := map[TopicPartition]bool{}
		for tp, hs := range g.holders() {
			contested[tp] = len(hs) > 1
		}
		planned, err := planRound(g.topics, sortedSubs(g.subscriptions()))
		if err != nil {
			t.Fatalf("%s: %v", ctx, err)
		}
		res1, revoked1 := g.round(t, ctx+" round 1")
		res2, _ := g.round(t, ctx+" round 2")
		g.checkConfirmed(t, ctx, res1, res2, revoked1, contested)
		checkPlanned(t, ctx, planned.target, res2)
		g.checkComplete(t, ctx+" round 2", res2)
		g.checkBalanced(t, ctx+" round 2", res2, sc.sameTopics)
		if _, revoked := g.round(t, ctx+" round 3"); len(revoked) > 0 {
			t.Fatalf("%s: round 3 revoked %v", ctx, revoked)
		}
		if got := g.holders(); !maps.EqualFunc(got, holdersOf(res2), slices.Equal) {
			t.Fatalf("%s: round 3 moved partitions: %v, round 2 %v", ctx, got, res2)
		}
	}
}

// holdersOf inverts an assignment.
func holdersOf(a Assignment) map[TopicPartition][]MemberID {
	h := map[TopicPartition][]MemberID{}
	for m, tps := range a {
		for _, tp := range tps {
			h[tp] = append(h[tp], m)
		}
	}
	return h
}

// The seed counts keep the four tests within seconds under -race; each fails
// within its first few seeds on an assignor that balances one move at a time.

func TestPropertyCooperativeSticky(t *testing.T) {
	for seed := range uint64(150) {
		randomScenario(t, seed, scenario{sameTopics: true})
	}
}

func TestPropertyCooperativeStickyMixedSubscriptions(t *testing.T) {
	for seed := range uint64(200) {
		randomScenario(t, seed, scenario{})
	}
}

func TestPropertyCooperativeStickySmallTopics(t *testing.T) {
	for seed := range uint64(150) {
		randomScenario(t, seed, scenario{smallTopics: true})
	}
}

func TestPropertyCooperativeStickySmallTopicsSameSubscriptions(t *testing.T) {
	for seed := range uint64(80) {
		randomScenario(t, seed, scenario{sameTopics: true, smallTopics: true})
	}
}

func TestPropertyRange(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	for i := range 300 {
		parts := map[string]int32{"a": int32(r.IntN(20)), "b": int32(r.IntN(5))}
		var subs []Subscription
		for m := range 1 + r.IntN(6) {
			subs = append(subs, Subscription{Member: MemberID(fmt.Sprintf("m%d", m)), Topics: []string{"a", "b"}})
		}
		res, err := Range{}.Assign(parts, subs)
		if err != nil {
			t.Fatal(err)
		}
		for tn, n := range parts {
			seen := map[int32]int{}
			per := map[MemberID]int{}
			for m, tps := range res {
				for _, tp := range tps {
					if tp.Topic == tn {
						seen[tp.Partition]++
						per[m]++
					}
				}
			}
			for p := range n {
				if seen[p] != 1 {
					t.Fatalf("case %d: %s/%d assigned %d times", i, tn, p, seen[p])
				}
			}
			for _, s := range subs {
				if d := per[subs[0].Member] - per[s.Member]; d < 0 || d > 1 {
					t.Fatalf("case %d: topic %s split unevenly: %v", i, tn, per)
				}
			}
		}
	}
}

func TestValidate(t *testing.T) {
	for _, a := range []Assignor{Range{}, CooperativeSticky{}} {
		if _, err := a.Assign(map[string]int32{"a": 1}, []Subscription{{Member: "x"}, {Member: "x"}}); err == nil {
			t.Errorf("%s: duplicate member accepted", a.Name())
		}
		if _, err := a.Assign(map[string]int32{"a": -1}, nil); err == nil {
			t.Errorf("%s: negative partition count accepted", a.Name())
		}
		res, err := a.Assign(map[string]int32{"a": 2}, nil)
		if err != nil || len(res) != 0 {
			t.Errorf("%s: empty group: %v, %v", a.Name(), res, err)
		}
	}
	if _, err := ByName("roundrobin"); err == nil {
		t.Error("unknown assignor accepted")
	}
}
