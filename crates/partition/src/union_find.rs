/// Disjoint sets over `0..n` with path compression.
pub(crate) struct UnionFind {
    parent: Vec<u32>,
}

impl UnionFind {
    pub fn new(n: usize) -> UnionFind {
        UnionFind {
            parent: (0..n as u32).collect(),
        }
    }

    pub fn find(&mut self, x: u32) -> u32 {
        let mut r = x;
        while self.parent[r as usize] != r {
            r = self.parent[r as usize];
        }
        let mut c = x;
        while self.parent[c as usize] != r {
            let next = self.parent[c as usize];
            self.parent[c as usize] = r;
            c = next;
        }
        r
    }

    /// Joins the sets of `a` and `b`; the root of `a`'s set stays the root.
    pub fn union(&mut self, a: u32, b: u32) {
        let (ra, rb) = (self.find(a), self.find(b));
        self.parent[rb as usize] = ra;
    }

    /// Joins the sets of `a` and `b` under the lesser root. When every union is made this
    /// way, each set's root is its least element and every parent is at most its child.
    pub fn union_min(&mut self, a: u32, b: u32) {
        let (ra, rb) = (self.find(a), self.find(b));
        let (lo, hi) = if ra < rb { (ra, rb) } else { (rb, ra) };
        self.parent[hi as usize] = lo;
    }

    /// Puts the singleton `x` into `y`'s set (whose root is less than `x`, as `union_min`
    /// would have it).
    pub fn adopt(&mut self, x: u32, y: u32) {
        let r = self.find(y);
        debug_assert!(self.parent[x as usize] == x && r < x);
        self.parent[x as usize] = r;
    }

    /// The parent of each element (roots are their own parents).
    pub fn into_parents(self) -> Vec<u32> {
        self.parent
    }

    pub fn is_root(&self, x: u32) -> bool {
        self.parent[x as usize] == x
    }
}
