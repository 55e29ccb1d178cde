//! [`Selection`]: what a directory backup leaves out.
//!
//! Contract between the walker (issue 19: the directory stream) and the
//! CLI's choosing options (issue 13: `--exclude`, `--iexclude`,
//! `--exclude-file`, `--exclude-caches`, `--exclude-if-present`,
//! `--one-file-system`). The walker asks [`Selection::excludes`] for every
//! entry below a backup path and [`Selection::skips_dir`] for every
//! directory before reading it; an excluded entry is not stored at all (a
//! directory: nor anything below it), and is not an error.
//!
//! # Patterns (gitignore-style)
//!
//! A pattern is matched against an entry's path as stored (relative,
//! `/`-separated):
//!
//! * `*` and `?` match within one path component, `[abc]` a set, `**` any
//!   number of components (`a/**/b`, `**/cache`, `logs/**`).
//! * A pattern with no `/` other than a trailing one matches the name at any
//!   depth (`*.o`, `node_modules/`). A pattern with a `/` at its start or in
//!   its middle is anchored: it matches the whole path (a leading `/` is
//!   dropped).
//! * A trailing `/` matches directories only.
//! * `!pattern` includes again what an earlier pattern excluded; the last
//!   pattern that matches decides. (A directory that is excluded is not
//!   entered, so nothing below it can be included again: as in git.)
//! * In an exclude file, empty lines and lines starting with `#` are
//!   ignored, as is trailing whitespace.

use crate::error::{Error, IoContext, Result};
use globset::{GlobBuilder, GlobMatcher};
use std::path::Path;

/// The signature a `CACHEDIR.TAG` file starts with
/// (<https://bford.info/cachedir/>).
pub const CACHEDIR_SIGNATURE: &[u8] = b"Signature: 8a477f597d28d172789f06886806bc55";

/// What a directory backup leaves out. The default leaves out nothing.
#[derive(Debug, Clone, Default)]
pub struct Selection {
    /// Do not cross into other file systems below a backup path (the mount
    /// points themselves are stored, empty).
    pub one_file_system: bool,
    /// Leave out directories holding a `CACHEDIR.TAG` with its signature.
    pub exclude_caches: bool,
    /// Leave out directories holding an entry of one of these names.
    pub exclude_if_present: Vec<String>,
    /// Exclude patterns in order (the last that matches decides).
    pub patterns: Vec<Pattern>,
}

/// One compiled exclude pattern ([`Pattern::new`]).
#[derive(Debug, Clone)]
pub struct Pattern {
    matcher: GlobMatcher,
    dir_only: bool,
    negated: bool,
}

impl Pattern {
    /// Compile a gitignore-style pattern (see the module docs).
    pub fn new(pattern: &str, ignore_case: bool) -> Result<Pattern> {
        let bad = |why: String| Error::invalid(format!("bad exclude pattern '{pattern}': {why}"));
        let (negated, rest) = match pattern.strip_prefix('!') {
            Some(rest) => (true, rest),
            None => (false, pattern),
        };
        let (dir_only, rest) = match rest.strip_suffix('/') {
            Some(r) => (true, r),
            None => (false, rest),
        };
        let anchored = rest.contains('/');
        let rest = rest.strip_prefix('/').unwrap_or(rest);
        if rest.is_empty() {
            return Err(bad("it matches nothing".into()));
        }
        let glob = if anchored || rest.starts_with("**") {
            rest.to_string()
        } else {
            format!("**/{rest}")
        };
        let matcher = GlobBuilder::new(&glob)
            .literal_separator(true)
            .backslash_escape(true)
            .case_insensitive(ignore_case)
            .build()
            .map_err(|e| bad(e.kind().to_string()))?
            .compile_matcher();
        Ok(Pattern {
            matcher,
            dir_only,
            negated,
        })
    }
}

impl Selection {
    /// Add an exclude pattern (see the module docs); `ignore_case` for
    /// `--iexclude`.
    pub fn add_exclude(&mut self, pattern: &str, ignore_case: bool) -> Result<()> {
        self.patterns.push(Pattern::new(pattern, ignore_case)?);
        Ok(())
    }

    /// Add every pattern of an exclude file (`--exclude-file`), one a line.
    pub fn add_exclude_file(&mut self, file: &Path, ignore_case: bool) -> Result<()> {
        let text = std::fs::read(file).ctx(|| format!("cannot read {}", file.display()))?;
        for line in String::from_utf8_lossy(&text).lines() {
            let line = line.trim_end();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            self.add_exclude(line, ignore_case)?;
        }
        Ok(())
    }

    /// Whether nothing is left out (a plain walk).
    pub fn is_empty(&self) -> bool {
        !self.one_file_system
            && !self.exclude_caches
            && self.exclude_if_present.is_empty()
            && self.patterns.is_empty()
    }

    /// Whether the entry at `rel` is left out. `rel` is the entry's path as
    /// stored (relative, `/`-separated, no trailing `/`); `is_dir` tells
    /// whether it is a directory (patterns ending in `/` match only those).
    pub fn excludes(&self, rel: &[u8], is_dir: bool) -> bool {
        if self.patterns.is_empty() {
            return false;
        }
        // Non-UTF-8 names are matched lossily: their other bytes still count.
        let rel = String::from_utf8_lossy(rel);
        let mut excluded = false;
        for p in &self.patterns {
            if (!p.dir_only || is_dir) && p.matcher.is_match(rel.as_ref()) {
                excluded = !p.negated;
            }
        }
        excluded
    }

    /// Whether the directory at `abs` is left out because of what it
    /// contains (`CACHEDIR.TAG`, `--exclude-if-present NAME`).
    pub fn skips_dir(&self, abs: &Path) -> bool {
        if self.exclude_caches && is_cache_dir(abs) {
            return true;
        }
        self.exclude_if_present
            .iter()
            .any(|name| std::fs::symlink_metadata(abs.join(name)).is_ok())
    }
}

/// A directory holding a regular `CACHEDIR.TAG` that starts with the signature.
fn is_cache_dir(dir: &Path) -> bool {
    use std::io::Read;
    let tag = dir.join("CACHEDIR.TAG");
    let Ok(meta) = std::fs::symlink_metadata(&tag) else {
        return false;
    };
    if !meta.is_file() {
        return false;
    }
    let mut head = [0u8; CACHEDIR_SIGNATURE.len()];
    std::fs::File::open(&tag)
        .and_then(|mut f| f.read_exact(&mut head))
        .is_ok()
        && head == CACHEDIR_SIGNATURE
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sel(patterns: &[&str]) -> Selection {
        let mut s = Selection::default();
        for p in patterns {
            s.add_exclude(p, false).unwrap();
        }
        s
    }

    fn ex(s: &Selection, rel: &str) -> bool {
        s.excludes(rel.as_bytes(), false)
    }

    fn ex_dir(s: &Selection, rel: &str) -> bool {
        s.excludes(rel.as_bytes(), true)
    }

    #[test]
    fn default_excludes_nothing() {
        let s = Selection::default();
        assert!(s.is_empty());
        assert!(!ex(&s, "a") && !ex_dir(&s, "a/b"));
        assert!(!s.skips_dir(Path::new("/")));
    }

    #[test]
    fn a_bare_name_matches_at_any_depth() {
        let s = sel(&["*.o", "core"]);
        assert!(ex(&s, "main.o") && ex(&s, "src/deep/x.o"));
        assert!(!ex(&s, "main.c") && !ex(&s, "main.o.txt"));
        assert!(ex(&s, "core") && ex(&s, "a/b/core") && ex_dir(&s, "core"));
        assert!(!ex(&s, "core2") && !ex(&s, "hardcore"));
        // `*` stays within one component.
        let s = sel(&["a*"]);
        assert!(ex(&s, "abc") && ex(&s, "x/abc"));
        assert!(!ex(&s, "b/c"));
        assert!(!s.is_empty());
    }

    #[test]
    fn a_pattern_with_a_slash_is_anchored() {
        let s = sel(&["/build", "docs/*.tmp"]);
        assert!(ex_dir(&s, "build") && !ex_dir(&s, "src/build"));
        assert!(ex(&s, "docs/x.tmp") && !ex(&s, "src/docs/x.tmp"));
        assert!(!ex(&s, "docs/sub/x.tmp"), "* does not cross a /");
        let s = sel(&["docs/**/*.tmp", "**/cache", "logs/**"]);
        assert!(ex(&s, "docs/x.tmp") && ex(&s, "docs/a/b/x.tmp"));
        assert!(ex_dir(&s, "cache") && ex_dir(&s, "a/b/cache"));
        assert!(ex(&s, "logs/today") && ex(&s, "logs/a/b"));
        assert!(!ex_dir(&s, "logs"), "logs/** matches what is inside");
    }

    #[test]
    fn a_trailing_slash_matches_directories_only() {
        let s = sel(&["node_modules/", "/out/"]);
        assert!(ex_dir(&s, "node_modules") && ex_dir(&s, "web/node_modules"));
        assert!(!ex(&s, "node_modules"), "a file of that name stays");
        assert!(ex_dir(&s, "out") && !ex(&s, "out") && !ex_dir(&s, "a/out"));
    }

    #[test]
    fn negation_includes_again_and_the_last_match_wins() {
        let s = sel(&["*.log", "!keep.log"]);
        assert!(ex(&s, "a.log") && ex(&s, "d/b.log"));
        assert!(!ex(&s, "keep.log") && !ex(&s, "d/keep.log"));
        let s = sel(&["!keep.log", "*.log"]);
        assert!(ex(&s, "keep.log"), "a later exclude wins");
    }

    #[test]
    fn iexclude_ignores_case() {
        let mut s = Selection::default();
        s.add_exclude("*.JPG", true).unwrap();
        s.add_exclude("Thumbs.db", false).unwrap();
        assert!(ex(&s, "a.jpg") && ex(&s, "b/C.Jpg"));
        assert!(ex(&s, "Thumbs.db") && !ex(&s, "thumbs.db"));
    }

    #[test]
    fn non_utf8_names_are_matched() {
        let s = sel(&["*.bin"]);
        assert!(s.excludes(b"caf\xe9.bin", false));
        assert!(!s.excludes(b"caf\xe9.txt", false));
    }

    #[test]
    fn bad_patterns_are_errors() {
        let mut s = Selection::default();
        let e = s.add_exclude("a[", false).unwrap_err().to_string();
        assert!(e.contains("bad exclude pattern 'a['"), "{e}");
        assert!(s.add_exclude("/", false).is_err());
        assert!(s.add_exclude("!", false).is_err());
    }

    #[test]
    fn exclude_file_skips_comments_and_blank_lines() {
        let t = tempfile::tempdir().unwrap();
        let f = t.path().join("excludes");
        std::fs::write(&f, "# build output\n*.o  \n\n/target/\n!keep.o\n").unwrap();
        let mut s = Selection::default();
        s.add_exclude_file(&f, false).unwrap();
        assert!(ex(&s, "x.o") && !ex(&s, "keep.o") && ex_dir(&s, "target"));
        assert!(!ex(&s, "# build output"));
        let missing = s.add_exclude_file(&t.path().join("nope"), false);
        assert!(missing.unwrap_err().to_string().contains("nope"));
    }

    #[test]
    fn cache_directories_need_the_signature() {
        let t = tempfile::tempdir().unwrap();
        let dir = |name: &str, tag: Option<&[u8]>| {
            let d = t.path().join(name);
            std::fs::create_dir(&d).unwrap();
            if let Some(tag) = tag {
                std::fs::write(d.join("CACHEDIR.TAG"), tag).unwrap();
            }
            d
        };
        let mut real = CACHEDIR_SIGNATURE.to_vec();
        real.extend_from_slice(b"\n# This file is a cache directory tag.\n");
        let cache = dir("cache", Some(&real));
        let fake = dir("fake", Some(b"Signature: nope"));
        let short = dir("short", Some(&CACHEDIR_SIGNATURE[..10]));
        let plain = dir("plain", None);
        let marked = dir("marked", None);
        std::fs::write(marked.join(".nobackup"), b"").unwrap();
        let linked = dir("linked", None);
        std::os::unix::fs::symlink("/nonexistent", linked.join(".nobackup")).unwrap();

        let off = Selection::default();
        assert!(!off.skips_dir(&cache));
        let s = Selection {
            exclude_caches: true,
            ..Default::default()
        };
        assert!(!s.is_empty());
        assert!(s.skips_dir(&cache));
        assert!(!s.skips_dir(&fake) && !s.skips_dir(&short) && !s.skips_dir(&plain));
        let s = Selection {
            exclude_if_present: vec![".nobackup".into()],
            ..Default::default()
        };
        assert!(s.skips_dir(&marked) && !s.skips_dir(&plain) && !s.skips_dir(&cache));
        assert!(s.skips_dir(&linked), "a dangling symlink is present too");
    }
}
