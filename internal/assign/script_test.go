package assign

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the expected output of testdata/*.txt scripts")

// member is a group member as the test script sees it: what it subscribes to,
// what it holds, and whether the coordinator counts it in the group.
type member struct {
	topics  []string // nil: every topic (as it exists at each rebalance)
	owned   []TopicPartition
	gen     int32
	inGroup bool
}

// group is the state a script drives: topics, members and the generation.
type group struct {
	topics  map[string]int32
	members map[MemberID]*member
	gen     int32
	// revoked is what each member revoked in the last rebalance (generation
	// gen), to show a partition handed back to the member that just gave it up.
	revoked map[MemberID][]TopicPartition
}

func newGroup() *group {
	return &group{topics: map[string]int32{}, members: map[MemberID]*member{}}
}

func (g *group) memberIDs(inGroupOnly bool) []MemberID {
	var ids []MemberID
	for id, m := range g.members {
		if !inGroupOnly || m.inGroup {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

func (g *group) subscriptions() []Subscription {
	var subs []Subscription
	for _, id := range g.memberIDs(true) {
		m := g.members[id]
		topics := m.topics
		if topics == nil {
			topics = sortedTopics(g.topics)
		}
		subs = append(subs, Subscription{Member: id, Topics: topics, Owned: slices.Clone(m.owned), Generation: m.gen})
	}
	return subs
}

// formatTPs prints partitions grouped by topic: "orders[0 1 2] pay[3]".
func formatTPs(tps []TopicPartition) string {
	if len(tps) == 0 {
		return "-"
	}
	tps = slices.Clone(tps)
	SortPartitions(tps)
	var b strings.Builder
	for i, tp := range tps {
		switch {
		case i == 0:
			fmt.Fprintf(&b, "%s[%d", tp.Topic, tp.Partition)
		case tps[i-1].Topic != tp.Topic:
			fmt.Fprintf(&b, "] %s[%d", tp.Topic, tp.Partition)
		default:
			fmt.Fprintf(&b, " %d", tp.Partition)
		}
	}
	b.WriteString("]")
	return b.String()
}

func diff(a, b []TopicPartition) []TopicPartition {
	var out []TopicPartition
	for _, tp := range a {
		if !slices.Contains(b, tp) {
			out = append(out, tp)
		}
	}
	return out
}

func parseTP(s string) (TopicPartition, error) {
	i := strings.LastIndexByte(s, '/')
	if i < 0 {
		return TopicPartition{}, fmt.Errorf("bad partition %q (want topic/N)", s)
	}
	p, err := strconv.ParseInt(s[i+1:], 10, 32)
	if err != nil {
		return TopicPartition{}, err
	}
	return TopicPartition{s[:i], int32(p)}, nil
}

// run executes one command and returns its output (no blank lines).
func (g *group) run(cmd string) (string, error) {
	f := strings.Fields(cmd)
	var out []string
	switch f[0] {
	case "topic": // topic NAME N: create a topic or grow it
		if len(f) != 3 {
			return "", fmt.Errorf("usage: topic NAME N")
		}
		n, err := strconv.ParseInt(f[2], 10, 32)
		if err != nil {
			return "", err
		}
		g.topics[f[1]] = int32(n)
	case "join": // join ID [TOPIC...]: join (or rejoin after fence) the group
		if len(f) < 2 {
			return "", fmt.Errorf("usage: join ID [TOPIC...]")
		}
		id := MemberID(f[1])
		m, ok := g.members[id]
		if !ok {
			m = &member{gen: -1}
			g.members[id] = m
		} else if m.inGroup {
			return "", fmt.Errorf("%s is already in the group", id)
		}
		m.inGroup = true
		if len(f) > 2 {
			m.topics = f[2:]
		}
		if len(m.owned) > 0 {
			out = append(out, fmt.Sprintf("%s rejoins claiming %s (generation %d)", id, formatTPs(m.owned), m.gen))
		}
	case "subscribe": // subscribe ID TOPIC...: change a member's subscription
		m, err := g.get(f, 3)
		if err != nil {
			return "", err
		}
		m.topics = f[2:]
	case "leave", "crash", "fence":
		// leave: revokes everything and leaves. crash: gone without revoking
		// (the coordinator drops it after the session timeout). fence: dropped
		// by the coordinator but still alive, holding its partitions and its
		// stale generation, until it rejoins.
		m, err := g.get(f, 2)
		if err != nil {
			return "", err
		}
		m.inGroup = false
		switch f[0] {
		case "leave":
			out = append(out, fmt.Sprintf("%s revokes %s and leaves", f[1], formatTPs(m.owned)))
			delete(g.members, MemberID(f[1]))
		case "crash":
			out = append(out, fmt.Sprintf("%s crashed holding %s", f[1], formatTPs(m.owned)))
			delete(g.members, MemberID(f[1]))
		case "fence":
			out = append(out, fmt.Sprintf("%s fenced, still holding %s (generation %d)", f[1], formatTPs(m.owned), m.gen))
		}
	case "set": // set ID GEN TP...: force what a member claims (conflicts)
		m, err := g.get(f, 3)
		if err != nil {
			return "", err
		}
		gen, err := strconv.ParseInt(f[2], 10, 32)
		if err != nil {
			return "", err
		}
		m.gen = int32(gen)
		m.owned = nil
		for _, s := range f[3:] {
			tp, err := parseTP(s)
			if err != nil {
				return "", err
			}
			m.owned = append(m.owned, tp)
		}
	case "assign": // assign NAME: one rebalance
		if len(f) != 2 {
			return "", fmt.Errorf("usage: assign NAME")
		}
		a, err := ByName(f[1])
		if err != nil {
			return "", err
		}
		return g.assign(a)
	default:
		return "", fmt.Errorf("unknown command %q", f[0])
	}
	return strings.Join(out, "\n"), nil
}

func (g *group) get(f []string, minArgs int) (*member, error) {
	if len(f) < minArgs {
		return nil, fmt.Errorf("%s: not enough arguments", f[0])
	}
	m, ok := g.members[MemberID(f[1])]
	if !ok {
		return nil, fmt.Errorf("no member %s", f[1])
	}
	return m, nil
}

// assign runs one rebalance with a, prints it and applies it: each member in
// the group now owns what it was assigned, in the new generation. Per member:
// its assignment, what it gains (+) and what it must revoke (-). With an eager
// assignor every member revokes everything it owned before the rebalance.
// With a cooperative one, a member gaining what it revoked in the previous
// rebalance is printed as "handed back" (a needless revocation, unless
// conflicting claims forced it).
func (g *group) assign(a Assignor) (string, error) {
	subs := g.subscriptions()
	res, err := a.Assign(g.topics, subs)
	if err != nil {
		return "", err
	}
	g.gen++
	out := []string{fmt.Sprintf("generation %d (%s)", g.gen, a.Name())}
	changed := false
	assigned := map[TopicPartition]bool{}
	revoked := map[MemberID][]TopicPartition{}
	var handedBack []string
	for _, s := range subs {
		m := g.members[s.Member]
		got := res[s.Member]
		var gain, revoke []TopicPartition
		if Cooperative(a) {
			gain, revoke = diff(got, m.owned), diff(m.owned, got)
		} else {
			gain, revoke = got, m.owned
		}
		line := fmt.Sprintf("%s: %s", s.Member, formatTPs(got))
		if len(gain) > 0 {
			line += " +" + formatTPs(gain)
		}
		if len(revoke) > 0 {
			line += " -" + formatTPs(revoke)
		}
		if len(gain)+len(revoke) > 0 {
			changed = true
		}
		out = append(out, line)
		if Cooperative(a) {
			revoked[s.Member] = revoke
			if back := diff(gain, diff(gain, g.revoked[s.Member])); len(back) > 0 {
				handedBack = append(handedBack, fmt.Sprintf("handed back: %s gets %s, revoked in generation %d", s.Member, formatTPs(back), g.gen-1))
			}
		}
		for _, tp := range got {
			assigned[tp] = true
		}
		m.owned = slices.Clone(got)
		m.gen = g.gen
	}
	g.revoked = revoked
	out = append(out, handedBack...)
	var unassigned []TopicPartition
	for _, t := range sortedTopics(g.topics) {
		for p := int32(0); p < g.topics[t]; p++ {
			if tp := (TopicPartition{t, p}); !assigned[tp] {
				unassigned = append(unassigned, tp)
			}
		}
	}
	if len(unassigned) > 0 {
		out = append(out, "unassigned: "+formatTPs(unassigned))
	} else if !changed {
		out = append(out, "stable: nothing moved")
	}
	return strings.Join(out, "\n"), nil
}

// A script is a sequence of blocks: a command line, a "----" line and the
// expected output, which ends at a blank line or at the end of the file.
// Lines starting with '#' and blank lines between blocks are comments.
func runScript(t *testing.T, path string) {
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	g := newGroup()
	var rewritten []string
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#") {
			rewritten = append(rewritten, line)
			continue
		}
		cmdLine := i + 1
		if i+1 >= len(lines) || lines[i+1] != "----" {
			t.Fatalf("%s:%d: command %q not followed by ----", path, cmdLine, line)
		}
		i += 2
		var want []string
		for ; i < len(lines) && strings.TrimSpace(lines[i]) != ""; i++ {
			want = append(want, lines[i])
		}
		i-- // the blank line (if any) is kept as a comment line
		got, err := g.run(line)
		if err != nil {
			got = "error: " + err.Error()
		}
		rewritten = append(rewritten, line, "----")
		if got != "" {
			rewritten = append(rewritten, got)
		}
		if w := strings.Join(want, "\n"); w != got && !*rewrite {
			t.Errorf("%s:%d: %s\n--- want:\n%s\n--- got:\n%s", path, cmdLine, line, w, got)
		}
	}
	if *rewrite {
		if err := os.WriteFile(path, []byte(strings.Join(rewritten, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestScripts(t *testing.T) {
	paths, err := filepath.Glob("testdata/*.txt")
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) == 0 {
		t.Fatal("no scripts in testdata")
	}
	for _, p := range paths {
		t.Run(strings.TrimSuffix(filepath.Base(p), ".txt"), func(t *testing.T) { runScript(t, p) })
	}
}
