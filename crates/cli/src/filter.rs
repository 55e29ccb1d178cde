//! Finding backups: `--host`, `--tag`, `--path`, and tag lists.

use crate::args::FilterArgs;
use anyhow::{bail, Result};
use tessera_core::catalog::BackupEntry;
use tessera_core::retention::has_tags;
use tessera_core::Repository;

/// Tags from `--tag` values: each value a comma list; empty items dropped.
pub fn tags(values: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for t in values.iter().flat_map(|v| v.split(',')) {
        let t = t.trim();
        if !t.is_empty() && !out.iter().any(|o| o == t) {
            out.push(t.to_string());
        }
    }
    out
}

/// Tag lists from `--tag`/`--keep-tag` values: each value one list.
pub fn tag_lists(values: &[String]) -> Vec<Vec<String>> {
    values
        .iter()
        .map(|v| tags(std::slice::from_ref(v)))
        .filter(|l| !l.is_empty())
        .collect()
}

/// A path as backups record it: absolute, lexically normalised.
pub fn absolute(p: &std::path::Path) -> String {
    std::path::absolute(p)
        .unwrap_or_else(|_| p.to_path_buf())
        .display()
        .to_string()
}

/// Which backups a command applies to.
#[derive(Debug, Default)]
pub struct Filter {
    hosts: Vec<String>,
    tags: Vec<Vec<String>>,
    /// As given (a stream's name) and made absolute (a path).
    paths: Vec<(String, String)>,
}

impl Filter {
    pub fn new(a: &FilterArgs) -> Filter {
        Filter {
            hosts: a.host.clone(),
            tags: tag_lists(&a.tag),
            paths: a
                .path
                .iter()
                .map(|p| (p.display().to_string(), absolute(p)))
                .collect(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.hosts.is_empty() && self.tags.is_empty() && self.paths.is_empty()
    }

    /// Host is one of `--host`; the tags of one `--tag` list are all
    /// present; every `--path` is among the backup's paths (or is its name,
    /// for backups that recorded none).
    pub fn matches(&self, b: &BackupEntry) -> bool {
        (self.hosts.is_empty() || self.hosts.contains(&b.meta.host))
            && (self.tags.is_empty() || self.tags.iter().any(|l| has_tags(b, l)))
            && self.paths.iter().all(|(given, abs)| {
                b.meta.paths.contains(abs) || (b.meta.paths.is_empty() && &b.name == given)
            })
    }

    pub fn select<'a>(&self, backups: &'a [BackupEntry]) -> Vec<&'a BackupEntry> {
        backups.iter().filter(|b| self.matches(b)).collect()
    }

    /// A backup by `latest` (the newest that matches), id or root prefix
    /// (which must match).
    pub fn resolve<'r>(&self, r: &'r Repository, spec: &str) -> Result<&'r BackupEntry> {
        if self.is_empty() {
            return Ok(r.resolve(spec)?);
        }
        if spec == "latest" {
            return match self.select(r.backups()).into_iter().max_by_key(|b| b.id) {
                Some(b) => Ok(b),
                None => bail!("no backup matches the --host, --tag and --path given"),
            };
        }
        let b = r.resolve(spec)?;
        if !self.matches(b) {
            bail!(
                "backup {} does not match the --host, --tag and --path given",
                b.id
            );
        }
        Ok(b)
    }
}
