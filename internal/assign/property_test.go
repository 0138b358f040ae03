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
// partition is assigned twice. It returns the assignment and whether anything
// changed.
func (g *group) round(t *testing.T, ctx string) (Assignment, bool) {
	t.Helper()
	before := g.holders()
	subs := g.subscriptions()
	res, err := CooperativeSticky{}.Assign(g.topics, subs)
	if err != nil {
		t.Fatalf("%s: %v", ctx, err)
	}
	g.gen++
	seen := map[TopicPartition]MemberID{}
	changed := false
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
		if len(diff(got, m.owned))+len(diff(m.owned, got)) > 0 {
			changed = true
		}
		m.owned = slices.Clone(got)
		m.gen = g.gen
	}
	return res, changed
}

// checkComplete checks that every partition of a subscribed topic is assigned
// to exactly one member, and (when balanced is set) that counts differ by at
// most one.
func (g *group) checkComplete(t *testing.T, ctx string, res Assignment, balanced bool) {
	t.Helper()
	subs := g.subscriptions()
	owners := map[TopicPartition]int{}
	minC, maxC := -1, -1
	for _, s := range subs {
		n := len(res[s.Member])
		if minC < 0 || n < minC {
			minC = n
		}
		if n > maxC {
			maxC = n
		}
		for _, tp := range res[s.Member] {
			owners[tp]++
		}
	}
	for _, t0 := range sortedTopics(g.topics) {
		wanted := slices.ContainsFunc(subs, func(s Subscription) bool { return slices.Contains(s.Topics, t0) })
		for p := int32(0); p < g.topics[t0]; p++ {
			tp := TopicPartition{t0, p}
			if wanted && owners[tp] != 1 {
				t.Fatalf("%s: %v has %d owners: %v", ctx, tp, owners[tp], res)
			}
		}
	}
	if balanced && len(subs) > 0 && maxC-minC > 1 {
		t.Fatalf("%s: unbalanced (%d..%d): %v", ctx, minC, maxC, res)
	}
}

func randomScenario(t *testing.T, seed uint64, sameTopics bool) {
	r := rand.New(rand.NewPCG(seed, 42))
	g := newGroup()
	topicNames := []string{"a", "b", "c"}
	for _, tn := range topicNames[:1+r.IntN(3)] {
		g.topics[tn] = int32(1 + r.IntN(12))
	}
	next := 0
	for step := range 12 {
		ids := g.memberIDs(true)
		var op string
		switch k := r.IntN(10); {
		case k < 4 || len(ids) == 0:
			next++
			id := MemberID(fmt.Sprintf("m%02d", next))
			m := &member{gen: -1, inGroup: true}
			if !sameTopics {
				for _, tn := range slices.Sorted(maps.Keys(g.topics)) {
					if r.IntN(2) == 0 {
						m.topics = append(m.topics, tn)
					}
				}
				if len(m.topics) == 0 {
					m.topics = []string{"a"}
				}
			}
			g.members[id] = m
			op = "join " + string(id)
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
		default:
			tn := topicNames[r.IntN(len(topicNames))]
			g.topics[tn] += int32(1 + r.IntN(4))
			op = "grow " + tn
		}
		ctx := fmt.Sprintf("seed %d step %d (%s)", seed, step, op)
		g.round(t, ctx+" round 1")
		res, _ := g.round(t, ctx+" round 2")
		g.checkComplete(t, ctx+" round 2", res, sameTopics)
		if _, changed := g.round(t, ctx+" round 3"); changed {
			t.Fatalf("%s: round 3 moved partitions", ctx)
		}
	}
}

func TestPropertyCooperativeSticky(t *testing.T) {
	for seed := range uint64(500) {
		randomScenario(t, seed, true)
	}
}

func TestPropertyCooperativeStickyMixedSubscriptions(t *testing.T) {
	for seed := range uint64(500) {
		randomScenario(t, seed, false)
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
