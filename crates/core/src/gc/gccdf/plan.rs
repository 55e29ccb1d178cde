//! Planner (GCCDF §5.4): container-adaptable cluster packing. The tree built
//! newest-backup-first already places clusters of the most similar ownership
//! next to each other (the longest common suffix of newest backups), so the
//! migration order is the leaves' chunks, walked left to right.

use super::analyze::OwnershipTree;

/// How clusters are packed into new containers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Packing {
    /// The paper's recency-prioritized packing: leaves in tree order.
    #[default]
    Recency,
    /// The paper's ablation (§6.4, Fig. 15): the same clusters, each kept
    /// whole, in a random order (seeded: runs repeat).
    Random,
}

impl std::str::FromStr for Packing {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "recency" => Ok(Packing::Recency),
            "random" => Ok(Packing::Random),
            _ => Err(format!(
                "unknown packing '{s}' (expected recency or random)"
            )),
        }
    }
}

impl std::fmt::Display for Packing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Packing::Recency => "recency",
            Packing::Random => "random",
        })
    }
}

/// The migration order: indices of the segment's cached chunks. `seed`
/// (the segment's number) drives the random packing.
pub fn migration_order(tree: &OwnershipTree, packing: Packing, seed: u64) -> Vec<u32> {
    match packing {
        Packing::Recency => tree.leaves().flatten().copied().collect(),
        Packing::Random => {
            let mut leaves: Vec<&[u32]> = tree.leaves().collect();
            // Fisher–Yates over the clusters with a splitmix64 stream: an
            // ablation needs repeatable runs, not a cryptographic shuffle.
            let mut x = seed;
            let mut next = || {
                x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
                let mut z = x;
                z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
                z ^ (z >> 31)
            };
            for i in (1..leaves.len()).rev() {
                let j = (next() % (i as u64 + 1)) as usize;
                leaves.swap(i, j);
            }
            leaves.into_iter().flatten().copied().collect()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::analyze::analyze;
    use super::*;

    #[test]
    fn order_is_leaves_left_to_right() {
        let own = [3u8, 1, 2, 3, 1];
        let t = analyze(5, 2, 1, |r, c| own[c as usize] & (2 >> r) != 0);
        assert_eq!(
            migration_order(&t, Packing::Recency, 0),
            vec![1, 4, 2, 0, 3]
        );
    }

    #[test]
    fn random_packing_keeps_each_cluster_whole_and_repeats() {
        let own: Vec<u8> = (0..64u32).map(|i| (i % 7 + 1) as u8).collect();
        let t = analyze(64, 3, 1, |r, c| own[c as usize] & (4 >> r) != 0);
        let leaves: Vec<Vec<u32>> = t.leaves().map(|l| l.to_vec()).collect();
        assert!(leaves.len() >= 5);
        let recency = migration_order(&t, Packing::Recency, 0);
        let random = migration_order(&t, Packing::Random, 7);
        assert_eq!(random, migration_order(&t, Packing::Random, 7), "seeded");
        assert_ne!(random, recency);
        let mut sorted = random.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..64).collect::<Vec<u32>>(), "every chunk once");
        // Each cluster appears as one contiguous run.
        for l in &leaves {
            let at = random.iter().position(|&i| i == l[0]).unwrap();
            assert_eq!(&random[at..at + l.len()], &l[..]);
        }
    }
}
