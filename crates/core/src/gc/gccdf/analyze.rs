//! Analyzer (GCCDF §5.3): locality-promoting chunk clustering with the
//! ownership binary tree.
//!
//! All chunks of a segment start in one leaf. Each round checks one involved
//! backup, newest first, and splits every leaf: chunks the backup references
//! go to the right child, the others stay left. The final leaves are the
//! clusters (chunks of one ownership). Only the leaves are kept, as a doubly
//! linked list in tree order, each holding chunk indices (not data), so a
//! split is a partition of small integers and the planner walks the list.
//!
//! A leaf is split by a backup only if at least `split_threshold` of its
//! chunks are referenced by it (the artifact's rule, 200 by default): tiny
//! clusters would only scatter chunks over more containers.

const NIL: u32 = u32::MAX;

struct Leaf {
    chunks: Vec<u32>,
    prev: u32,
    next: u32,
}

/// The leaves of the ownership tree, left to right.
pub struct OwnershipTree {
    leaves: Vec<Leaf>,
    head: u32,
}

impl OwnershipTree {
    /// Clusters of chunk indices, left to right (following the list).
    pub fn leaves(&self) -> impl Iterator<Item = &[u32]> + '_ {
        let mut cur = self.head;
        std::iter::from_fn(move || {
            if cur == NIL {
                return None;
            }
            let l = &self.leaves[cur as usize];
            cur = l.next;
            Some(l.chunks.as_slice())
        })
    }
    /// Leaves walked right to left (the list is doubly linked).
    pub fn leaves_rev(&self) -> Vec<&[u32]> {
        let mut tail = self.head;
        while tail != NIL && self.leaves[tail as usize].next != NIL {
            tail = self.leaves[tail as usize].next;
        }
        let mut out = Vec::new();
        while tail != NIL {
            let l = &self.leaves[tail as usize];
            out.push(l.chunks.as_slice());
            tail = l.prev;
        }
        out
    }
    pub fn len(&self) -> usize {
        self.leaves.len()
    }
    pub fn is_empty(&self) -> bool {
        self.leaves.is_empty()
    }
    /// Heap bytes of the leaves and their chunk pointers.
    pub fn memory_bytes(&self) -> u64 {
        let node = std::mem::size_of::<Leaf>();
        self.leaves
            .iter()
            .map(|l| (node + l.chunks.capacity() * 4) as u64)
            .sum()
    }
}

/// Build the tree over `chunks` chunks with `rounds` backups (round 0 is the
/// newest involved backup). `referenced(round, chunk)` is the ownership check.
pub fn analyze(
    chunks: usize,
    rounds: usize,
    split_threshold: usize,
    mut referenced: impl FnMut(usize, u32) -> bool,
) -> OwnershipTree {
    let mut t = OwnershipTree {
        leaves: Vec::new(),
        head: NIL,
    };
    if chunks == 0 {
        return t;
    }
    t.leaves.push(Leaf {
        chunks: (0..chunks as u32).collect(),
        prev: NIL,
        next: NIL,
    });
    t.head = 0;
    let min = split_threshold.max(1);
    for round in 0..rounds {
        let mut cur = t.head;
        while cur != NIL {
            let next = t.leaves[cur as usize].next;
            let new = t.leaves.len() as u32;
            let leaf = &mut t.leaves[cur as usize];
            let (right, left): (Vec<u32>, Vec<u32>) =
                leaf.chunks.iter().partition(|&&c| referenced(round, c));
            if right.len() >= min && !left.is_empty() {
                leaf.chunks = left;
                leaf.next = new;
                t.leaves.push(Leaf {
                    chunks: right,
                    prev: cur,
                    next,
                });
                if next != NIL {
                    t.leaves[next as usize].prev = new;
                }
            }
            cur = next;
        }
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fig. 6: backups α (oldest), β, γ. Chunks 1,5,7 are referenced by all
    /// three, 2,4,8 by α and β, 3,6,9 by α only. Checking γ, β, α in turn
    /// groups them by ownership.
    #[test]
    fn fig6_three_backups_group_by_ownership() {
        let alpha = [1, 2, 3, 4, 5, 6, 7, 8, 9];
        let beta = [1, 2, 4, 5, 7, 8];
        let gamma = [1, 5, 7];
        let newest_first: [&[u32]; 3] = [&gamma, &beta, &alpha];
        // Chunk index i is chunk number i + 1, in appearance order.
        let t = analyze(9, 3, 1, |r, c| newest_first[r].contains(&(c + 1)));
        let clusters: Vec<Vec<u32>> = t
            .leaves()
            .map(|l| l.iter().map(|c| c + 1).collect())
            .collect();
        assert_eq!(clusters, vec![vec![3, 6, 9], vec![2, 4, 8], vec![1, 5, 7]]);
    }

    /// Fig. 9–10: with every ownership over α, β, γ present, the leaves come
    /// out in the order of the newest backups' references: adjacent clusters
    /// agree on γ first, then β, so neighbours have the most similar ownership.
    #[test]
    fn fig9_10_leaf_order_checks_newest_first() {
        // Ownership of chunk i as bits (γ = 4, β = 2, α = 1), shuffled order.
        let own: Vec<u8> = vec![7, 1, 6, 2, 5, 3, 4, 7, 1, 6];
        let t = analyze(own.len(), 3, 1, |r, c| own[c as usize] & (4 >> r) != 0);
        let clusters: Vec<Vec<u8>> = t
            .leaves()
            .map(|l| l.iter().map(|&c| own[c as usize]).collect())
            .collect();
        assert_eq!(
            clusters,
            vec![
                vec![1, 1],
                vec![2],
                vec![3],
                vec![4],
                vec![5],
                vec![6, 6],
                vec![7, 7]
            ]
        );
        // Within a cluster, chunks keep their old order.
        let first: Vec<u32> = t.leaves().next().unwrap().to_vec();
        assert_eq!(first, vec![1, 8]);
        // The list is doubly linked: walking back gives the reverse.
        let mut back: Vec<&[u32]> = t.leaves_rev();
        back.reverse();
        assert_eq!(back, t.leaves().collect::<Vec<_>>());
        // Cls.1 (γ,β,α) and Cls.2 (γ,β) are neighbours.
        assert_eq!(t.leaves_rev()[0].len(), 2);
        assert_eq!(own[t.leaves_rev()[1][0] as usize], 6);
    }

    #[test]
    fn small_referenced_groups_are_not_split_off() {
        // 10 chunks; the newest backup references 3 of them, the next 6.
        let b0 = [0u32, 1, 2];
        let b1 = [0u32, 1, 2, 3, 4, 5];
        let refs = |r: usize, c: u32| if r == 0 { &b0[..] } else { &b1[..] }.contains(&c);
        let t = analyze(10, 2, 4, refs);
        // Round 0: only 3 referenced < 4, no split. Round 1: 6 ≥ 4, split.
        let clusters: Vec<Vec<u32>> = t.leaves().map(|l| l.to_vec()).collect();
        assert_eq!(clusters, vec![vec![6, 7, 8, 9], vec![0, 1, 2, 3, 4, 5]]);
        // Threshold 1 splits all the way.
        let t = analyze(10, 2, 1, refs);
        let clusters: Vec<Vec<u32>> = t.leaves().map(|l| l.to_vec()).collect();
        assert_eq!(
            clusters,
            vec![vec![6, 7, 8, 9], vec![3, 4, 5], vec![0, 1, 2]]
        );
        assert!(analyze(0, 3, 1, |_, _| true).is_empty());
    }
}
