package assign

import (
	"cmp"
	"slices"
)

// cost is the price of one unit of flow: a vector compared lexicographically,
// so that a later component only decides between flows whose earlier
// components are equal. The cooperative-sticky assignor uses three: the
// balance of the members' totals, the balance of each topic among its
// subscribers, and the number of owned partitions that move.
type cost [3]int64

func (a cost) plus(b cost) cost { return cost{a[0] + b[0], a[1] + b[1], a[2] + b[2]} }

func (a cost) minus(b cost) cost { return cost{a[0] - b[0], a[1] - b[1], a[2] - b[2]} }

func (a cost) times(k int64) cost { return cost{a[0] * k, a[1] * k, a[2] * k} }

func (a cost) compare(b cost) int {
	for i := range a {
		if c := cmp.Compare(a[i], b[i]); c != 0 {
			return c
		}
	}
	return 0
}

// fedge is an edge of a network. A linear edge costs unit per unit of flow; a
// convex one costs (2k-1)·unit for its k-th unit, so k units cost k²·unit:
// sums of squares are minimised by pricing each further unit more.
type fedge struct {
	from, to  int
	cap, flow int // invariant: 0 <= flow <= cap
	unit      cost
	convex    bool
}

// network is a min-cost flow network solved by successive shortest paths
// with potentials (Dijkstra on reduced costs). Arc 2e is edge e forward (while
// flow < cap), arc 2e+1 is edge e backward (while flow > 0, undoing its last
// unit). It is used by one goroutine, inside one Assign call.
type network struct {
	edges []fedge
	adj   [][]int // per node: the arcs leaving it, forward or backward
	// pot is the potential of each node. Invariant (after minCostFlow and
	// after every augmentation along arcs of zero reduced cost): every
	// residual arc a from u to v has reduced cost cost(a)+pot[u]-pot[v] >= 0,
	// which proves the flow has the least cost for its value; the arcs of
	// reduced cost zero are then exactly those along which the flow can
	// change without costing more.
	pot []cost
	// via and queue are admissiblePath's buffers.
	via, queue []int
}

func (n *network) addNode() int {
	n.adj = append(n.adj, nil)
	n.pot = append(n.pot, cost{})
	return len(n.adj) - 1
}

// addEdge adds an edge and returns its index. unit must be non-negative (the
// first shortest path search starts from zero potentials).
func (n *network) addEdge(from, to, capacity int, unit cost, convex bool) int {
	e := len(n.edges)
	n.edges = append(n.edges, fedge{from: from, to: to, cap: capacity, unit: unit, convex: convex})
	n.adj[from] = append(n.adj[from], 2*e)
	n.adj[to] = append(n.adj[to], 2*e+1)
	return e
}

// arc returns the ends and cost of residual arc a, and whether it is usable.
func (n *network) arc(a int) (from, to int, c cost, ok bool) {
	e := &n.edges[a/2]
	if a%2 == 0 {
		if e.flow >= e.cap {
			return 0, 0, cost{}, false
		}
		k := int64(1)
		if e.convex {
			k = int64(2*e.flow + 1)
		}
		return e.from, e.to, e.unit.times(k), true
	}
	if e.flow <= 0 {
		return 0, 0, cost{}, false
	}
	k := int64(-1)
	if e.convex {
		k = -int64(2*e.flow - 1)
	}
	return e.to, e.from, e.unit.times(k), true
}

// reduced returns the ends and reduced cost of residual arc a, and whether it
// is usable.
func (n *network) reduced(a int) (from, to int, rc cost, ok bool) {
	u, v, c, ok := n.arc(a)
	if !ok {
		return 0, 0, cost{}, false
	}
	return u, v, c.plus(n.pot[u]).minus(n.pot[v]), true
}

func (n *network) push(a int) {
	if a%2 == 0 {
		n.edges[a/2].flow++
	} else {
		n.edges[a/2].flow--
	}
}

// minCostFlow sends up to want units from s to t at the least cost and
// returns how many it sent. Each phase computes shortest distances on reduced
// costs, raises the potentials by them (capped at t's distance, which keeps
// every reduced cost non-negative) and then augments, one unit at a time,
// along paths of zero reduced cost until it finds none.
func (n *network) minCostFlow(s, t, want int) int {
	sent := 0
	dist := make([]cost, len(n.adj))
	for sent < want {
		if !n.distances(s, t, dist) {
			break
		}
		for v := range n.pot {
			n.pot[v] = n.pot[v].plus(dist[v])
		}
		sent += n.augment(s, t, want-sent)
	}
	return sent
}

// augment sends up to want units from s to t along paths of zero reduced
// cost, depth first, and returns how many it sent (at least one right after
// distances found t). A node found unable to reach t stays so for the rest of
// the phase: augmenting only adds arcs leaving nodes of the path, which such
// a node could not reach. A node wrongly taken for one (it failed only
// because its way on went through the stack) costs at most an early end of
// the phase, never a wrong flow.
func (n *network) augment(s, t, want int) int {
	type frame struct{ node, next, via int }
	dead := make([]bool, len(n.adj))
	seen := make([]int, len(n.adj)) // search number that reached the node
	sent := 0
	for search := 1; sent < want && !dead[s]; search++ {
		stack := []frame{{node: s, via: -1}}
		seen[s] = search
		for len(stack) > 0 && stack[len(stack)-1].node != t {
			top := &stack[len(stack)-1]
			if top.next == len(n.adj[top.node]) {
				dead[top.node] = true
				stack = stack[:len(stack)-1]
				continue
			}
			a := n.adj[top.node][top.next]
			top.next++
			_, y, rc, ok := n.reduced(a)
			if ok && rc == (cost{}) && !dead[y] && seen[y] != search {
				seen[y] = search
				stack = append(stack, frame{node: y, via: a})
			}
		}
		if len(stack) == 0 {
			break
		}
		for _, f := range stack[1:] {
			n.push(f.via)
		}
		sent++
	}
	return sent
}

// distances runs Dijkstra from s on reduced costs until t is settled, and
// sets dist[v] to the distance of v capped at t's (the cap is all the
// potential update needs, and it lets the search stop early). It reports
// whether t is reachable.
func (n *network) distances(s, t int, dist []cost) bool {
	done := make([]bool, len(n.adj))
	reached := make([]bool, len(n.adj))
	reached[s] = true
	dist[s] = cost{}
	q := costHeap{{node: s}}
	for len(q) > 0 {
		it := q.pop()
		if done[it.node] {
			continue
		}
		done[it.node] = true
		if it.node == t {
			break
		}
		for _, a := range n.adj[it.node] {
			u, v, c, ok := n.arc(a)
			if !ok || done[v] {
				continue
			}
			d := it.dist.plus(c).plus(n.pot[u]).minus(n.pot[v])
			if !reached[v] || d.compare(dist[v]) < 0 {
				dist[v], reached[v] = d, true
				q.push(costItem{node: v, dist: d})
			}
		}
	}
	if !done[t] {
		return false
	}
	for v := range dist {
		if !done[v] {
			dist[v] = dist[t]
		}
	}
	return true
}

// admissiblePath returns the arcs of a path from u to v made of residual arcs
// of reduced cost zero (breadth first, so the result is deterministic), or nil
// if there is none. Arcs of edges for which skip returns true are not used.
// Nodes marked in dead (if not nil) are not entered; when there is no path,
// every node the search reached is marked, since none of them reaches v.
func (n *network) admissiblePath(u, v int, skip func(edge int) bool, dead []bool) []int {
	if dead != nil && dead[u] {
		return nil
	}
	if len(n.via) != len(n.adj) {
		n.via = make([]int, len(n.adj))
	}
	via := n.via // arc that reached the node, +1; 0: not reached
	clear(via)
	via[u] = -1
	queue := append(n.queue[:0], u)
	for i := 0; i < len(queue) && via[v] == 0; i++ {
		for _, a := range n.adj[queue[i]] {
			if skip != nil && skip(a/2) {
				continue
			}
			_, y, rc, ok := n.reduced(a)
			if ok && via[y] == 0 && rc == (cost{}) && (dead == nil || !dead[y]) {
				via[y] = a + 1
				queue = append(queue, y)
			}
		}
	}
	n.queue = queue
	if via[v] == 0 && dead != nil {
		for _, x := range queue {
			dead[x] = true
		}
	}
	if via[v] == 0 || u == v {
		return nil
	}
	var path []int
	for x := v; x != u; {
		a := via[x] - 1
		path = append(path, a)
		x, _, _, _ = n.arc(a)
	}
	slices.Reverse(path)
	return path
}

type costItem struct {
	node int
	dist cost
}

// costHeap is a binary min-heap of items by distance.
type costHeap []costItem

func (h *costHeap) push(it costItem) {
	*h = append(*h, it)
	q := *h
	for i := len(q) - 1; i > 0; {
		parent := (i - 1) / 2
		if q[parent].dist.compare(q[i].dist) <= 0 {
			break
		}
		q[parent], q[i] = q[i], q[parent]
		i = parent
	}
}

func (h *costHeap) pop() costItem {
	q := *h
	top := q[0]
	last := len(q) - 1
	q[0] = q[last]
	q = q[:last]
	for i := 0; ; {
		small := i
		for _, c := range []int{2*i + 1, 2*i + 2} {
			if c < len(q) && q[c].dist.compare(q[small].dist) < 0 {
				small = c
			}
		}
		if small == i {
			break
		}
		q[small], q[i] = q[i], q[small]
		i = small
	}
	*h = q
	return top
}
