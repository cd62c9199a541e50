//! Min-cost maximum flow with lexicographic costs.
//!
//! The planner's objective is lexicographic (Preferred excess, then staying
//! members, then load balance), so an arc's cost is a [`Cost`] triple compared
//! in that order rather than one number with hand-picked weights: no weight can
//! overflow and no order can be wrong. Triples under lexicographic order form an
//! ordered abelian group, which is all that shortest paths with potentials need.
//!
//! The algorithm is primal-dual: Dijkstra on reduced costs gives the distance of
//! the cheapest augmenting path, then a Dinic blocking flow pushes every unit
//! that can travel on arcs of reduced cost zero. Each phase raises the
//! distance, and the planner's networks have few distinct distances (costs are
//! small integers), so there are few phases even when millions of units flow.
//! The result is a maximum flow of least cost among maximum flows.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::ops::{Add, Neg, Sub};

/// An arc's cost, compared lexicographically: excess first, then stay, then
/// balance. Smaller is better.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Cost {
    /// Units of Preferred excess.
    pub excess: i64,
    /// Minus the members that stay on their node.
    pub stay: i64,
    /// Load balance: the marginal cost of one more member on a node.
    pub balance: i64,
}

impl Cost {
    pub const ZERO: Cost = Cost {
        excess: 0,
        stay: 0,
        balance: 0,
    };
    /// One unit over a Preferred maxReplicas.
    pub const EXCESS: Cost = Cost {
        excess: 1,
        stay: 0,
        balance: 0,
    };
    /// One running member kept on its node (a reward).
    pub const STAY: Cost = Cost {
        excess: 0,
        stay: -1,
        balance: 0,
    };
    const INFINITE: Cost = Cost {
        excess: i64::MAX,
        stay: i64::MAX,
        balance: i64::MAX,
    };

    /// The marginal balance cost of the `n`-th extra member on one node.
    pub const fn balance(n: i64) -> Cost {
        Cost {
            excess: 0,
            stay: 0,
            balance: n,
        }
    }

    pub fn times(self, k: i64) -> Cost {
        Cost {
            excess: self.excess * k,
            stay: self.stay * k,
            balance: self.balance * k,
        }
    }
}

impl Add for Cost {
    type Output = Cost;
    fn add(self, o: Cost) -> Cost {
        Cost {
            excess: self.excess + o.excess,
            stay: self.stay + o.stay,
            balance: self.balance + o.balance,
        }
    }
}

impl Sub for Cost {
    type Output = Cost;
    fn sub(self, o: Cost) -> Cost {
        Cost {
            excess: self.excess - o.excess,
            stay: self.stay - o.stay,
            balance: self.balance - o.balance,
        }
    }
}

impl Neg for Cost {
    type Output = Cost;
    fn neg(self) -> Cost {
        Cost {
            excess: -self.excess,
            stay: -self.stay,
            balance: -self.balance,
        }
    }
}

/// A capacity no flow in the planner comes near (the most members is 2^20).
pub(crate) const UNBOUNDED: i64 = 1 << 40;

/// A flow network. Arcs are stored in pairs: arc `a` and its residual twin
/// `a ^ 1`, so `cap[a ^ 1]` is the flow on a forward arc.
#[derive(Debug, Default)]
pub(crate) struct Graph {
    vertices: usize,
    head: Vec<u32>,
    cap: Vec<i64>,
    cost: Vec<Cost>,
}

/// Arcs grouped by tail, built once before solving.
struct Adjacency {
    start: Vec<usize>,
    arcs: Vec<u32>,
}

impl Adjacency {
    fn of(&self, v: usize) -> &[u32] {
        &self.arcs[self.start[v]..self.start[v + 1]]
    }
}

impl Graph {
    pub fn add_vertex(&mut self) -> usize {
        self.vertices += 1;
        self.vertices - 1
    }

    /// Adds an arc and returns its id (for [`Graph::flow`]). `cap` must be >= 0.
    pub fn add_arc(&mut self, from: usize, to: usize, cap: i64, cost: Cost) -> usize {
        let id = self.head.len();
        self.head.push(to as u32);
        self.cap.push(cap);
        self.cost.push(cost);
        self.head.push(from as u32);
        self.cap.push(0);
        self.cost.push(-cost);
        id
    }

    /// The flow on a forward arc.
    pub fn flow(&self, arc: usize) -> i64 {
        self.cap[arc ^ 1]
    }

    fn tail(&self, arc: usize) -> usize {
        self.head[arc ^ 1] as usize
    }

    fn adjacency(&self) -> Adjacency {
        let mut start = vec![0usize; self.vertices + 1];
        for arc in 0..self.head.len() {
            start[self.tail(arc) + 1] += 1;
        }
        for v in 0..self.vertices {
            start[v + 1] += start[v];
        }
        let mut next = start.clone();
        let mut arcs = vec![0u32; self.head.len()];
        for arc in 0..self.head.len() {
            let tail = self.tail(arc);
            arcs[next[tail]] = arc as u32;
            next[tail] += 1;
        }
        Adjacency { start, arcs }
    }

    /// Pushes a maximum flow from `s` to `t` of least cost among maximum flows;
    /// returns its value and cost. The network as built must have no cycle of
    /// positive-capacity arcs (the planner's networks are layered).
    pub fn min_cost_max_flow(&mut self, s: usize, t: usize) -> (i64, Cost) {
        let adj = self.adjacency();
        let mut potential = self.initial_potentials(s, &adj);
        let mut total = 0i64;
        let n = self.vertices;
        let mut dist = vec![Cost::INFINITE; n];
        let mut done = vec![false; n];
        let mut heap = BinaryHeap::new();
        loop {
            dist.fill(Cost::INFINITE);
            done.fill(false);
            heap.clear();
            dist[s] = Cost::ZERO;
            heap.push(Reverse((Cost::ZERO, s as u32)));
            while let Some(Reverse((d, v))) = heap.pop() {
                let v = v as usize;
                if done[v] {
                    continue;
                }
                done[v] = true;
                if v == t {
                    break;
                }
                for &arc in adj.of(v) {
                    let arc = arc as usize;
                    if self.cap[arc] <= 0 {
                        continue;
                    }
                    let w = self.head[arc] as usize;
                    let nd = d + self.cost[arc] + potential[v] - potential[w];
                    if nd < dist[w] {
                        dist[w] = nd;
                        heap.push(Reverse((nd, w as u32)));
                    }
                }
            }
            if !done[t] {
                break;
            }
            let dt = dist[t];
            for v in 0..n {
                potential[v] = potential[v] + if done[v] { dist[v] } else { dt };
            }
            let pushed = self.blocking_flow(s, t, &adj, &potential);
            if pushed == 0 {
                // Cannot happen (a shortest path of reduced cost zero exists);
                // stopping keeps a bug from looping forever.
                break;
            }
            total += pushed;
        }
        let mut cost = Cost::ZERO;
        for arc in (0..self.head.len()).step_by(2) {
            let f = self.cap[arc ^ 1];
            if f != 0 {
                cost = cost + self.cost[arc].times(f);
            }
        }
        (total, cost)
    }

    /// Shortest distances from `s` over the arcs with capacity, in topological
    /// order, so that every reduced cost starts non-negative (keep arcs have a
    /// negative cost).
    fn initial_potentials(&self, s: usize, adj: &Adjacency) -> Vec<Cost> {
        let n = self.vertices;
        let mut indegree = vec![0u32; n];
        for arc in (0..self.head.len()).step_by(2) {
            if self.cap[arc] > 0 {
                indegree[self.head[arc] as usize] += 1;
            }
        }
        let mut order: Vec<usize> = (0..n).filter(|&v| indegree[v] == 0).collect();
        let mut i = 0;
        while i < order.len() {
            let v = order[i];
            i += 1;
            for &arc in adj.of(v) {
                let arc = arc as usize;
                if arc.is_multiple_of(2) && self.cap[arc] > 0 {
                    let w = self.head[arc] as usize;
                    indegree[w] -= 1;
                    if indegree[w] == 0 {
                        order.push(w);
                    }
                }
            }
        }
        let mut dist = vec![Cost::INFINITE; n];
        dist[s] = Cost::ZERO;
        for &v in &order {
            if dist[v] == Cost::INFINITE {
                continue;
            }
            for &arc in adj.of(v) {
                let arc = arc as usize;
                if arc.is_multiple_of(2) && self.cap[arc] > 0 {
                    let w = self.head[arc] as usize;
                    let nd = dist[v] + self.cost[arc];
                    if nd < dist[w] {
                        dist[w] = nd;
                    }
                }
            }
        }
        // Vertices that `s` cannot reach never join a path; zero is as good as any.
        dist.into_iter()
            .map(|d| if d == Cost::INFINITE { Cost::ZERO } else { d })
            .collect()
    }

    fn admissible(&self, arc: usize, potential: &[Cost]) -> bool {
        self.cap[arc] > 0
            && self.cost[arc] + potential[self.tail(arc)] - potential[self.head[arc] as usize]
                == Cost::ZERO
    }

    /// Dinic's maximum flow restricted to arcs of reduced cost zero.
    fn blocking_flow(&mut self, s: usize, t: usize, adj: &Adjacency, potential: &[Cost]) -> i64 {
        const UNSEEN: u32 = u32::MAX;
        let n = self.vertices;
        let mut level = vec![UNSEEN; n];
        let mut queue = Vec::with_capacity(n);
        let mut next = vec![0usize; n];
        let mut path: Vec<usize> = Vec::new();
        let mut total = 0i64;
        loop {
            level.fill(UNSEEN);
            queue.clear();
            level[s] = 0;
            queue.push(s);
            let mut i = 0;
            while i < queue.len() {
                let v = queue[i];
                i += 1;
                for &arc in adj.of(v) {
                    let arc = arc as usize;
                    let w = self.head[arc] as usize;
                    if level[w] == UNSEEN && self.admissible(arc, potential) {
                        level[w] = level[v] + 1;
                        queue.push(w);
                    }
                }
            }
            if level[t] == UNSEEN {
                return total;
            }
            for (v, slot) in next.iter_mut().enumerate() {
                *slot = adj.start[v];
            }
            path.clear();
            let mut v = s;
            loop {
                if v == t {
                    let push = path.iter().map(|&a| self.cap[a]).min().unwrap_or(0);
                    for &a in &path {
                        self.cap[a] -= push;
                        self.cap[a ^ 1] += push;
                    }
                    total += push;
                    path.clear();
                    v = s;
                    continue;
                }
                let end = adj.start[v + 1];
                while next[v] < end {
                    let arc = adj.arcs[next[v]] as usize;
                    let w = self.head[arc] as usize;
                    if level[w] == level[v] + 1 && self.admissible(arc, potential) {
                        break;
                    }
                    next[v] += 1;
                }
                if next[v] < end {
                    let arc = adj.arcs[next[v]] as usize;
                    path.push(arc);
                    v = self.head[arc] as usize;
                } else if let Some(arc) = path.pop() {
                    // Dead end: never enter `v` again in this round.
                    level[v] = UNSEEN;
                    v = self.tail(arc);
                    next[v] += 1;
                } else {
                    break;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_flow_comes_before_cost() {
        // s -> a -> t cheap but narrow; s -> b -> t expensive and wide.
        let mut g = Graph::default();
        let s = g.add_vertex();
        let a = g.add_vertex();
        let b = g.add_vertex();
        let t = g.add_vertex();
        g.add_arc(s, a, 1, Cost::ZERO);
        g.add_arc(a, t, 1, Cost::ZERO);
        g.add_arc(s, b, 5, Cost::EXCESS);
        let bt = g.add_arc(b, t, 2, Cost::ZERO);
        let (flow, cost) = g.min_cost_max_flow(s, t);
        assert_eq!(flow, 3);
        assert_eq!(cost.excess, 2);
        assert_eq!(g.flow(bt), 2);
    }

    #[test]
    fn lexicographic_costs_prefer_less_excess_over_more_stays() {
        // One unit; path via `keep` stays (-1) but pays an excess; the other is plain.
        let mut g = Graph::default();
        let s = g.add_vertex();
        let keep = g.add_vertex();
        let plain = g.add_vertex();
        let t = g.add_vertex();
        let src = g.add_vertex();
        g.add_arc(s, src, 1, Cost::ZERO);
        g.add_arc(src, keep, 1, Cost::EXCESS);
        g.add_arc(keep, t, 1, Cost::STAY);
        let p = g.add_arc(src, plain, 1, Cost::ZERO);
        g.add_arc(plain, t, 1, Cost::ZERO);
        let (flow, cost) = g.min_cost_max_flow(s, t);
        assert_eq!(flow, 1);
        assert_eq!(cost, Cost::ZERO);
        assert_eq!(g.flow(p), 1);
    }

    #[test]
    fn rerouting_through_residual_arcs_finds_the_optimum() {
        // Classic case where the first shortest path must be partly undone.
        let mut g = Graph::default();
        let s = g.add_vertex();
        let a = g.add_vertex();
        let b = g.add_vertex();
        let t = g.add_vertex();
        g.add_arc(s, a, 1, Cost::ZERO);
        g.add_arc(s, b, 1, Cost::balance(2));
        g.add_arc(a, b, 1, Cost::ZERO);
        g.add_arc(a, t, 1, Cost::balance(3));
        g.add_arc(b, t, 1, Cost::ZERO);
        let (flow, cost) = g.min_cost_max_flow(s, t);
        assert_eq!(flow, 2);
        assert_eq!(cost, Cost::balance(5));
    }
}
