//! Rewriting of fragmented duplicates at backup time (Capping, SMR, HAR).
//!
//! A rewrite policy looks at each ingest segment (a run of chunks, 20 MiB by
//! default) and decides which duplicate chunks are deduplicated and which are
//! written again, next to their neighbours, so that restores read fewer
//! containers. See `smr-rewriting.md` and `mfdedup-tos.md` §2.2.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Which rewrite policy a backup uses, as named on the command line
/// (`none`, `capping:20`, `smr:20`, `har` or `har:0.5`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(tag = "policy", rename_all = "lowercase")]
pub enum RewriteSpec {
    /// Deduplicate every duplicate (the naive baseline).
    #[default]
    None,
    /// Keep the `level` containers referenced most by a segment.
    Capping { level: usize },
    /// Greedy submodular choice of `level` containers covering the most distinct chunks.
    Smr { level: usize },
    /// History-aware rewriting: rewrite duplicates held in containers the
    /// previous backup used below `threshold`.
    Har { threshold: f64 },
}

impl RewriteSpec {
    /// Parse `none`, `capping:T`, `smr:T`, `har` or `har:U`.
    pub fn parse(spec: &str) -> Result<Self, String> {
        let (name, arg) = match spec.split_once(':') {
            Some((n, a)) => (n, Some(a)),
            None => (spec, None),
        };
        let level = |what: &str| -> Result<usize, String> {
            let a = arg.ok_or_else(|| format!("{what} needs a level, e.g. {what}:20"))?;
            match a.parse::<usize>() {
                Ok(n) if n > 0 => Ok(n),
                _ => Err(format!(
                    "bad {what} level '{a}': expected a positive integer"
                )),
            }
        };
        match name.to_ascii_lowercase().as_str() {
            "none" | "naive" if arg.is_none() => Ok(RewriteSpec::None),
            "capping" => Ok(RewriteSpec::Capping {
                level: level("capping")?,
            }),
            "smr" => Ok(RewriteSpec::Smr {
                level: level("smr")?,
            }),
            "har" => {
                let threshold = match arg {
                    None => 0.5,
                    Some(a) => match a.parse::<f64>() {
                        Ok(t) if (0.0..=1.0).contains(&t) => t,
                        _ => return Err(format!("bad har threshold '{a}': expected 0..1")),
                    },
                };
                Ok(RewriteSpec::Har { threshold })
            }
            _ => Err(format!(
                "unknown rewrite policy '{spec}' (expected none, capping:T, smr:T, har or har:U)"
            )),
        }
    }
}

impl fmt::Display for RewriteSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RewriteSpec::None => write!(f, "none"),
            RewriteSpec::Capping { level } => write!(f, "capping:{level}"),
            RewriteSpec::Smr { level } => write!(f, "smr:{level}"),
            RewriteSpec::Har { threshold } => write!(f, "har:{threshold}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_display_round_trip() {
        for s in ["none", "capping:20", "smr:5", "har:0.5"] {
            assert_eq!(RewriteSpec::parse(s).unwrap().to_string(), s);
        }
        assert_eq!(
            RewriteSpec::parse("har").unwrap(),
            RewriteSpec::Har { threshold: 0.5 }
        );
        for bad in ["capping", "smr:0", "har:2", "lru:3", "none:1"] {
            assert!(RewriteSpec::parse(bad).is_err(), "{bad}");
        }
    }
}
