//! [`RewriteSpec`]: which rewrite policy a backup uses, as named on the
//! command line, and the policy object it stands for. Apart from the
//! contract ([`RewritePolicy`]) because it names every policy: the
//! policies depend on the contract, the spec on them.

use super::policy::{NoRewrite, RewritePolicy};
use crate::container::ContainerId;
use crate::rewrite::capping::Capping;
use crate::rewrite::har::{Har, HAR_LIMIT, HAR_THRESHOLD};
use crate::rewrite::ned::Ned;
use crate::rewrite::smr::Smr;
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
    /// Rewrite duplicates whose containers the segment uses below `threshold`
    /// (bytes referenced / bytes stored).
    Ned { threshold: f64 },
    /// History-aware rewriting: rewrite duplicates held in containers the
    /// previous backup of the chain used below `threshold`, the sparse list trimmed (most
    /// used first) until its referenced bytes are at most `limit` of the
    /// previous backup's.
    Har { threshold: f64, limit: f64 },
}

impl RewriteSpec {
    /// Parse `none`, `capping:T`, `smr:T`, `ned:T`, `har`, `har:U` or `har:U:L`.
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
            "ned" => {
                let a = arg.ok_or("ned needs a threshold, e.g. ned:0.5")?;
                match a.parse::<f64>() {
                    Ok(t) if t > 0.0 && t <= 1.0 => Ok(RewriteSpec::Ned { threshold: t }),
                    _ => Err(format!("bad ned threshold '{a}': expected a number in (0, 1]")),
                }
            }
            "har" => {
                let (u, l) = match arg {
                    None => (None, None),
                    Some(a) => match a.split_once(':') {
                        Some((u, l)) => (Some(u), Some(l)),
                        None => (Some(a), None),
                    },
                };
                let fraction = |v: Option<&str>, default: f64, what: &str| match v {
                    None => Ok(default),
                    Some(a) => match a.parse::<f64>() {
                        Ok(t) if (0.0..=1.0).contains(&t) => Ok(t),
                        _ => Err(format!("bad har {what} '{a}': expected 0..1")),
                    },
                };
                Ok(RewriteSpec::Har {
                    threshold: fraction(u, HAR_THRESHOLD, "threshold")?,
                    limit: fraction(l, HAR_LIMIT, "limit")?,
                })
            }
            _ => Err(format!(
                "unknown rewrite policy '{spec}' (expected none, capping:T, smr:T, ned:T, har, har:U or har:U:L)"
            )),
        }
    }
}

impl RewriteSpec {
    /// The policy object for one backup or interleaved group. HAR needs
    /// the sparse containers each stream's chain left at its previous
    /// backup, NED the chunk bytes stored in each live data container (both
    /// from the manifest).
    pub fn policy(
        &self,
        sparse: Vec<Vec<ContainerId>>,
        stored: impl FnOnce() -> std::collections::HashMap<ContainerId, u64>,
    ) -> Box<dyn RewritePolicy> {
        match *self {
            RewriteSpec::None => Box::new(NoRewrite),
            RewriteSpec::Capping { level } => Box::new(Capping { level }),
            RewriteSpec::Smr { level } => Box::new(Smr { level }),
            RewriteSpec::Ned { threshold } => Box::new(Ned::new(threshold, stored())),
            RewriteSpec::Har { .. } => Box::new(Har::new(sparse)),
        }
    }
}

impl fmt::Display for RewriteSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RewriteSpec::None => write!(f, "none"),
            RewriteSpec::Capping { level } => write!(f, "capping:{level}"),
            RewriteSpec::Smr { level } => write!(f, "smr:{level}"),
            RewriteSpec::Ned { threshold } => write!(f, "ned:{threshold}"),
            RewriteSpec::Har { threshold, limit } if *limit == HAR_LIMIT => {
                write!(f, "har:{threshold}")
            }
            RewriteSpec::Har { threshold, limit } => write!(f, "har:{threshold}:{limit}"),
        }
    }
}

impl std::str::FromStr for RewriteSpec {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        Self::parse(s)
    }
}
