//! Retention rounds: which backups to delete once more than N are retained.
//! Decisions depend only on the retained list and a seeded generator, so
//! every approach deletes exactly the same backups.

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// Which of the retained backups a round considers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Pick {
    /// The k oldest.
    #[default]
    Oldest,
    /// k spread evenly over the retained set, oldest first (the GCCDF
    /// artifact's "every 5th entry").
    Spread,
    /// k chosen at random (seeded), oldest first: the FGC paper deletes
    /// files at random until 90 / 80 / 70 % are alive.
    Random,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Retention {
    /// A round runs after a backup whenever more than `retain` are retained.
    pub retain: usize,
    /// Backups considered per round.
    pub delete: usize,
    /// Each considered backup is deleted with this probability.
    #[serde(default = "one")]
    pub probability: f64,
    #[serde(default)]
    pub pick: Pick,
    /// Run the approach's GC after each round.
    #[serde(default = "yes")]
    pub gc: bool,
    /// Before each GC: write dirty pages back and drop the page cache
    /// (root only), so GC reads its containers from the disk as the
    /// papers' GC timings do (a local-backend, data-mode experiment).
    #[serde(default)]
    pub cold_gc: bool,
    #[serde(default)]
    pub seed: u64,
}

fn one() -> f64 {
    1.0
}
fn yes() -> bool {
    true
}

impl Retention {
    pub fn validate(&self) -> Result<(), String> {
        if self.retain == 0 || self.delete == 0 {
            return Err("retain and delete must be at least 1".into());
        }
        if !(0.0..=1.0).contains(&self.probability) {
            return Err(format!(
                "probability must be in 0..1 (got {})",
                self.probability
            ));
        }
        Ok(())
    }

    pub fn rng(&self) -> ChaCha8Rng {
        ChaCha8Rng::seed_from_u64(self.seed)
    }

    /// Backups (ids, oldest first in `retained`) to delete now; empty when no
    /// round is due.
    /// Generic over the id type: the lab passes backup ids, tests numbers.
    pub fn round<T: Copy>(&self, retained: &[T], rng: &mut ChaCha8Rng) -> Vec<T> {
        if retained.len() <= self.retain {
            return Vec::new();
        }
        let k = self.delete.min(retained.len());
        let candidates: Vec<T> = match self.pick {
            Pick::Oldest => retained[..k].to_vec(),
            Pick::Spread => {
                let step = retained.len() as f64 / k as f64;
                (0..k)
                    .map(|i| retained[(i as f64 * step) as usize])
                    .collect()
            }
            Pick::Random => {
                // A partial Fisher–Yates over the positions, then oldest first.
                let mut at: Vec<usize> = (0..retained.len()).collect();
                for i in 0..k {
                    let j = rng.random_range(i..at.len());
                    at.swap(i, j);
                }
                let mut picked = at[..k].to_vec();
                picked.sort_unstable();
                picked.into_iter().map(|i| retained[i]).collect()
            }
        };
        candidates
            .into_iter()
            .filter(|_| self.probability >= 1.0 || rng.random::<f64>() < self.probability)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn simulate(r: &Retention, backups: u64) -> (Vec<Vec<u64>>, Vec<u64>) {
        let mut rng = r.rng();
        let mut retained = Vec::new();
        let mut rounds = Vec::new();
        for id in 1..=backups {
            retained.push(id);
            let gone = r.round(&retained, &mut rng);
            if !gone.is_empty() {
                retained.retain(|b| !gone.contains(b));
                rounds.push(gone);
            }
        }
        (rounds, retained)
    }

    #[test]
    fn oldest_spread_and_probability() {
        let r = Retention {
            retain: 4,
            delete: 2,
            probability: 1.0,
            pick: Pick::Oldest,
            gc: true,
            cold_gc: false,
            seed: 0,
        };
        let (rounds, kept) = simulate(&r, 9);
        assert_eq!(rounds, vec![vec![1, 2], vec![3, 4], vec![5, 6]]);
        assert_eq!(kept, vec![7, 8, 9]);

        let s = Retention {
            pick: Pick::Spread,
            retain: 10,
            delete: 2,
            ..r.clone()
        };
        let (rounds, _) = simulate(&s, 11);
        assert_eq!(rounds, vec![vec![1, 6]]);

        let p = Retention {
            probability: 0.5,
            retain: 20,
            delete: 10,
            ..r
        };
        let (a, _) = simulate(&p, 200);
        let rnd = Retention {
            pick: Pick::Random,
            retain: 99,
            delete: 30,
            ..r.clone()
        };
        let (rounds, kept) = simulate(&rnd, 100);
        assert_eq!(rounds.len(), 1);
        assert_eq!((rounds[0].len(), kept.len()), (30, 70), "30 % deleted");
        assert!(
            rounds[0].windows(2).all(|w| w[0] < w[1]),
            "distinct, oldest first"
        );
        assert_ne!(rounds[0], (1..=30).collect::<Vec<u64>>(), "not the oldest");
        assert_eq!(rounds, simulate(&rnd, 100).0, "seeded");
        assert_eq!(a, simulate(&p, 200).0, "seeded: same deletions every time");
        let n: usize = a.iter().map(Vec::len).sum();
        let considered = a.len() * 10;
        assert!(
            n > considered / 4 && n < considered * 3 / 4,
            "{n} of {considered}"
        );
        assert!(a.iter().all(|r| r.len() <= 10));
    }
}
