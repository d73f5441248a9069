package reputation

// bridges is MeritRank's connectivity decay at its strictest threshold:
// for each peer, the one other peer that every path of the receipt graph
// from this node and its seeds passes through, when there is one (its
// immediate dominator, unless that is this node or a seed); −1 where
// there is none. All the trust of such a peer, and of the region behind
// it, crossed that one bridge: a Sybil region behind a single lease with
// this node is the case, and so is a renter who dealt with one provider
// only. roots are this node and its seeds.
//
// It is Cooper, Harvey and Kennedy's iterative dominator algorithm ("A
// Simple, Fast Dominance Algorithm", 2001) over the undirected graph,
// each edge taken both ways, from a virtual root joined to the roots.
func (g graph) bridges(roots []int) []int32 {
	n := len(g.deg)
	root := int32(n) // the virtual root
	isRoot := make([]bool, n)
	for _, r := range roots {
		isRoot[r] = true
	}
	// Postorder numbers by an iterative depth-first search.
	post := make([]int32, n+1)
	for i := range post {
		post[i] = -1
	}
	var order []int32 // nodes in postorder
	seen := make([]bool, n+1)
	type frame struct {
		v    int32
		next int32 // the next neighbour to visit, as an index into to
	}
	seen[root] = true
	stack := []frame{{v: root}}
	for len(stack) > 0 {
		f := &stack[len(stack)-1]
		var w int32 = -1
		if f.v == root {
			for int(f.next) < len(roots) && w < 0 {
				if c := int32(roots[f.next]); !seen[c] {
					w = c
				}
				f.next++
			}
		} else {
			for k := g.off[f.v] + f.next; k < g.off[f.v+1] && w < 0; k++ {
				if c := g.to[k]; !seen[c] {
					w = c
				}
				f.next++
			}
		}
		if w < 0 {
			post[f.v] = int32(len(order))
			order = append(order, f.v)
			stack = stack[:len(stack)-1]
			continue
		}
		seen[w] = true
		stack = append(stack, frame{v: w})
	}
	idom := make([]int32, n+1)
	for i := range idom {
		idom[i] = -1
	}
	idom[root] = root
	intersect := func(a, b int32) int32 {
		for a != b {
			for post[a] < post[b] {
				a = idom[a]
			}
			for post[b] < post[a] {
				b = idom[b]
			}
		}
		return a
	}
	for changed := true; changed; {
		changed = false
		for i := len(order) - 2; i >= 0; i-- { // reverse postorder, the root (last) left out
			v := order[i]
			nd := int32(-1)
			if isRoot[v] {
				nd = root
			}
			for k := g.off[v]; k < g.off[v+1]; k++ {
				p := g.to[k]
				if idom[p] < 0 {
					continue
				}
				if nd < 0 {
					nd = p
				} else {
					nd = intersect(p, nd)
				}
			}
			if nd >= 0 && idom[v] != nd {
				idom[v], changed = nd, true
			}
		}
	}
	out := make([]int32, n)
	for v := range n {
		out[v] = -1
		if d := idom[v]; d >= 0 && d != root && !isRoot[d] {
			out[v] = d
		}
	}
	return out
}
