package dashboard

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// procState is one process as the launcher reports it, for the fault
// entries of the timeline.
type procState struct {
	Name string
	Kind string // "broker", "producer", "consumer"
	// State is "running", "paused", "exited" or "never started".
	State    string
	PID      int
	LastExit string
}

// differ turns successive snapshots into timeline entries: leader
// elections, ISR changes, rebalances and the faults applied to processes
// and links (whoever applied them: the page, chaos, or a signal from
// outside). The first snapshot only sets what later ones are compared
// with.
type differ struct {
	started bool
	parts   map[partKey]partSeen
	groups  map[string]groupSeen
	procs   map[string]procState
	links   map[[2]string]Link
}

type partKey struct {
	topic string
	p     int32
}

func (k partKey) String() string { return k.topic + "-" + strconv.Itoa(int(k.p)) }

type partSeen struct {
	leader int32
	epoch  int64
	isr    []int32 // sorted
}

type groupSeen struct {
	generation int32
	// owned: client (or member) -> partitions, sorted.
	owned map[string][]int32
}

func newDiffer() *differ {
	return &differ{parts: map[partKey]partSeen{}, groups: map[string]groupSeen{},
		procs: map[string]procState{}, links: map[[2]string]Link{}}
}

// diff returns the entries for what changed since the last call.
func (d *differ) diff(s *Snapshot, procs []procState, now time.Time) []Entry {
	var out []Entry
	add := func(kind, format string, args ...any) {
		if d.started {
			out = append(out, Entry{At: now.UTC(), Kind: kind, Text: fmt.Sprintf(format, args...)})
		}
	}
	d.diffProcs(procs, add)
	d.diffLinks(s.Links, add)
	d.diffPartitions(s.Topics, add)
	d.diffGroups(s.Groups, add)
	d.started = true
	return out
}

type addFunc func(kind, format string, args ...any)

func (d *differ) diffPartitions(topics []Topic, add addFunc) {
	for _, t := range topics {
		for _, p := range t.Partitions {
			k := partKey{t.Name, p.Partition}
			isr := slices.Clone(p.ISR)
			slices.Sort(isr)
			seen, ok := d.parts[k]
			if !ok {
				d.parts[k] = partSeen{p.Leader, p.Epoch, isr}
				if p.Leader >= 0 {
					add(KindLeader, "%s: broker %d leads, epoch %d", k, p.Leader, p.Epoch)
				}
				continue
			}
			if p.Epoch < seen.epoch {
				continue // a stale view (a broker that has not heard yet)
			}
			switch {
			case p.Leader >= 0 && (p.Epoch > seen.epoch || p.Leader != seen.leader):
				add(KindLeader, "%s: broker %d leads, epoch %d", k, p.Leader, p.Epoch)
			case p.Leader < 0 && seen.leader >= 0:
				add(KindLeader, "%s: no leader (broker %d led in epoch %d)", k, seen.leader, seen.epoch)
			}
			if len(isr) > 0 && len(seen.isr) > 0 && !slices.Equal(isr, seen.isr) {
				verb := "changed to"
				switch {
				case subset(isr, seen.isr):
					verb = "shrank to"
				case subset(seen.isr, isr):
					verb = "expanded to"
				}
				add(KindISR, "%s ISR %s %s", k, verb, joinIDs(isr))
			}
			if len(isr) == 0 {
				isr = seen.isr // unknown: keep the last one known
			}
			d.parts[k] = partSeen{p.Leader, p.Epoch, isr}
		}
	}
}

// subset reports whether every id of a is in b (both sorted).
func subset(a, b []int32) bool {
	for _, x := range a {
		if _, ok := slices.BinarySearch(b, x); !ok {
			return false
		}
	}
	return true
}

func joinIDs(ids []int32) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = strconv.Itoa(int(id))
	}
	return strings.Join(s, ",")
}

// joinParts prints partitions as "2, 5".
func joinParts(ps []int32) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = strconv.Itoa(int(p))
	}
	return strings.Join(s, ", ")
}

// diffGroups compares settled generations only: while a group rebalances
// (PreparingRebalance, CompletingRebalance) its members' assignments are
// not yet those of its generation.
func (d *differ) diffGroups(groups []Group, add addFunc) {
	for _, g := range groups {
		if g.State != "Stable" && g.State != "Empty" {
			continue
		}
		owned := map[string][]int32{}
		for _, m := range g.Members {
			who := m.ClientID
			if who == "" {
				who = m.MemberID
			}
			ps := append(owned[who], m.Partitions...)
			slices.Sort(ps)
			owned[who] = slices.Compact(ps)
		}
		seen, ok := d.groups[g.Group]
		d.groups[g.Group] = groupSeen{g.Generation, owned}
		if !ok || g.Generation <= seen.generation {
			continue
		}
		names := map[string]bool{}
		for n := range owned {
			names[n] = true
		}
		for n := range seen.owned {
			names[n] = true
		}
		sorted := make([]string, 0, len(names))
		for n := range names {
			sorted = append(sorted, n)
		}
		sort.Strings(sorted)
		var got, gave []string
		for _, n := range sorted {
			before, wasIn := seen.owned[n]
			after, isIn := owned[n]
			plus, minus := diffParts(after, before), diffParts(before, after)
			switch {
			case len(plus) > 0 && !wasIn:
				got = append(got, fmt.Sprintf("%s joined and got %s", n, joinParts(plus)))
			case len(plus) > 0:
				got = append(got, fmt.Sprintf("%s got %s", n, joinParts(plus)))
			case !wasIn && isIn:
				got = append(got, n+" joined")
			}
			switch {
			case len(minus) > 0 && !isIn:
				gave = append(gave, fmt.Sprintf("%s left, giving up %s", n, joinParts(minus)))
			case len(minus) > 0:
				gave = append(gave, fmt.Sprintf("%s gave up %s", n, joinParts(minus)))
			case wasIn && !isIn:
				gave = append(gave, n+" left")
			}
		}
		what := strings.Join(append(got, gave...), "; ")
		if what == "" {
			what = "no partition moved"
		}
		add(KindRebalance, "group %s generation %d: %s", g.Group, g.Generation, what)
	}
}

// diffParts returns the partitions of a not in b (both sorted).
func diffParts(a, b []int32) []int32 {
	var out []int32
	for _, p := range a {
		if _, ok := slices.BinarySearch(b, p); !ok {
			out = append(out, p)
		}
	}
	return out
}

func (d *differ) diffProcs(procs []procState, add addFunc) {
	for _, p := range procs {
		seen, ok := d.procs[p.Name]
		d.procs[p.Name] = p
		switch {
		case !ok || seen.State == "never started":
			if p.State == "running" || p.State == "paused" {
				add(KindFault, "%s started (pid %d)", p.Name, p.PID)
			}
		case seen.State == p.State && seen.PID == p.PID:
		case p.State == "paused":
			add(KindFault, "%s paused (SIGSTOP)", p.Name)
		case p.State == "running" && seen.State == "paused" && seen.PID == p.PID:
			add(KindFault, "%s resumed (SIGCONT)", p.Name)
		case p.State == "running":
			add(KindFault, "%s restarted (pid %d)", p.Name, p.PID)
		case p.State == "exited":
			how := p.LastExit
			if how == "" {
				how = "exited"
			}
			add(KindFault, "%s exited (%s)", p.Name, how)
		}
	}
}

// describeLink says what a link does in words.
func describeLink(l Link) string {
	var s string
	switch l.Mode {
	case "pass":
		s = "passes"
	case "blackhole":
		s = "cut both ways"
	case "drop-forward":
		s = "cut one way (" + l.From + "'s requests held)"
	case "drop-back":
		s = "cut one way (" + l.To + "'s answers held)"
	default:
		s = l.Mode
	}
	if l.DelayMs != 0 || l.JitterMs != 0 {
		s += fmt.Sprintf(", delayed %d ms ± %d ms", l.DelayMs, l.JitterMs)
	}
	return s
}

func healthy(l Link) bool { return l.Mode == "pass" && l.DelayMs == 0 && l.JitterMs == 0 }

func (d *differ) diffLinks(links []Link, add addFunc) {
	var changed []string
	allHealthy, anyChanged := true, false
	for _, l := range links {
		k := [2]string{l.From, l.To}
		seen, ok := d.links[k]
		d.links[k] = l
		allHealthy = allHealthy && healthy(l)
		if !ok || seen == l {
			continue
		}
		anyChanged = true
		changed = append(changed, fmt.Sprintf("%s->%s %s", l.From, l.To, describeLink(l)))
	}
	switch {
	case !anyChanged:
	case allHealthy:
		add(KindFault, "links healed: every link passes bytes both ways, without delay")
	default:
		add(KindFault, "links: %s", strings.Join(changed, "; "))
	}
}
