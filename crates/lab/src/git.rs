//! Git version series: one `git archive` tarball per tag of a local
//! repository, in version order (the papers' CODE / Linux / GCC datasets).

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

fn git(repo: &Path, args: &[&str]) -> Result<Vec<u8>> {
    let out = Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(args)
        .output()
        .context("cannot run git (is it installed?)")?;
    if !out.status.success() {
        bail!(
            "git {} in {}: {}",
            args.join(" "),
            repo.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(out.stdout)
}

/// Tags matching `glob`, in version order (`v:refname`, so v2.10 follows v2.9).
pub fn tags(repo: &Path, glob: &str) -> Result<Vec<String>> {
    let out = git(repo, &["tag", "--list", "--sort=v:refname", glob])?;
    Ok(String::from_utf8_lossy(&out)
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(String::from)
        .collect())
}

/// Write `<NNNNN>-<tag>.tar` per matching tag into `out`; returns the paths.
pub fn write_series(repo: &Path, glob: &str, out: &Path) -> Result<Vec<PathBuf>> {
    if !repo.exists() {
        bail!("git repository {} does not exist", repo.display());
    }
    let tags = tags(repo, glob)?;
    if tags.is_empty() {
        bail!("no tags of {} match '{glob}'", repo.display());
    }
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    // git runs in the repository: a relative output path must not follow it.
    let out = &std::path::absolute(out).with_context(|| format!("bad path {}", out.display()))?;
    let mut paths = Vec::new();
    for (i, tag) in tags.iter().enumerate() {
        let safe: String = tag
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || "._-".contains(c) {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let p = out.join(format!("{i:05}-{safe}.tar"));
        let ps = p.to_string_lossy().to_string();
        // The tag, not its tree: entries then carry the commit time, so the
        // same tag always gives the same bytes.
        let r = format!("refs/tags/{tag}");
        git(repo, &["archive", "--format=tar", "-o", &ps, &r])?;
        paths.push(p);
    }
    Ok(paths)
}
