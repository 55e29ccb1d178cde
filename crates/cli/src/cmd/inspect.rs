//! Looking inside backups: diff, find, dump. Built on the repository's
//! listing (`Repository::list_entries`) and selective restore, so they work
//! whatever the directory stream's format.

use super::open::open_backend;
use crate::args::RepoArg;
use crate::filter::Filter;
use crate::ui;
use anyhow::{bail, Context, Result};
use serde::Serialize;
use std::collections::BTreeMap;
use std::io::Write;
use std::process::ExitCode;
use tessera_core::archive::{Listed, Selection};
use tessera_core::catalog::{BackupEntry, BackupId, SourceKind};
use tessera_core::{Repository, RestoreOptions};

/// An entry as `diff` compares it: its listing plus, for a regular file,
/// a BLAKE3 hash of its content.
struct Seen {
    e: Listed,
    content: Option<[u8; 32]>,
}

/// A backup's entries by path (directories without their trailing `/`),
/// with content hashes: the backup's restore stream (a tar stream for a
/// directory) is read once.
fn entries(r: &Repository, b: &BackupEntry) -> Result<BTreeMap<String, Seen>> {
    let mut out = BTreeMap::new();
    if b.source != SourceKind::Tree {
        let mut names = Vec::new();
        r.list_entries(b, &mut |e| {
            names.push(e);
            Ok(())
        })?;
        let mut h = HashWriter(blake3::Hasher::new());
        r.restore_to(b, &mut h, &RestoreOptions::default(), &mut |_| {})?;
        let content = Some(*h.0.finalize().as_bytes());
        for e in names {
            out.insert(e.path.clone(), Seen { e, content });
        }
        return Ok(out);
    }
    let (reader, writer) = std::io::pipe().context("cannot create a pipe")?;
    std::thread::scope(|scope| -> Result<()> {
        let producer = scope.spawn(move || {
            let mut w = std::io::BufWriter::with_capacity(1 << 20, writer);
            let done = r.restore_to(b, &mut w, &RestoreOptions::default(), &mut |_| {});
            done.and_then(|_| {
                w.flush()
                    .map_err(|e| tessera_core::Error::io("restore pipe", e))
            })
        });
        let read = read_tar(reader, &mut out);
        let restored = producer.join().expect("the restore thread does not panic");
        restored?;
        read
    })?;
    Ok(out)
}

struct HashWriter(blake3::Hasher);

impl Write for HashWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.update(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn read_tar(reader: impl std::io::Read, out: &mut BTreeMap<String, Seen>) -> Result<()> {
    use tar::EntryType;
    let mut ar = tar::Archive::new(reader);
    for entry in ar.entries().context("cannot read the backup's stream")? {
        let mut entry = entry.context("cannot read the backup's stream")?;
        let h = entry.header();
        let kind = match h.entry_type() {
            EntryType::Regular | EntryType::Continuous => "file",
            EntryType::Directory => "dir",
            EntryType::Symlink => "symlink",
            EntryType::Link => "hardlink",
            EntryType::Fifo => "fifo",
            EntryType::Char => "chardev",
            EntryType::Block => "blockdev",
            _ => continue,
        };
        let path = String::from_utf8_lossy(&entry.path_bytes())
            .trim_end_matches('/')
            .to_string();
        let link = entry
            .link_name_bytes()
            .map(|l| String::from_utf8_lossy(&l).into_owned());
        let e = Listed {
            path: path.clone(),
            kind,
            size: h.size().unwrap_or(0),
            mode: h.mode().unwrap_or(0) & 0o7777,
            mtime: h.mtime().unwrap_or(0),
            link,
        };
        let content = if kind == "file" {
            let mut hw = HashWriter(blake3::Hasher::new());
            std::io::copy(&mut entry, &mut hw).context("cannot read the backup's stream")?;
            Some(*hw.0.finalize().as_bytes())
        } else {
            None
        };
        out.insert(path, Seen { e, content });
    }
    // Drain what follows the end marker so the writer never blocks.
    let mut rest = ar.into_inner();
    std::io::copy(&mut rest, &mut std::io::sink()).context("cannot read the backup's stream")?;
    Ok(())
}

/// One difference between two backups.
#[derive(Serialize)]
struct Change {
    path: String,
    /// `added`, `removed` or `changed`.
    what: &'static str,
    kind: &'static str,
    /// Size in the first backup (absent if added).
    #[serde(skip_serializing_if = "Option::is_none")]
    old_size: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    new_size: Option<u64>,
    /// For `changed`: which of content, type, size, mtime, mode, link differ.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    fields: Vec<&'static str>,
}

#[derive(Serialize, Default)]
struct DiffReport {
    from: u64,
    to: u64,
    added: u64,
    removed: u64,
    changed: u64,
    /// Content bytes of added files.
    added_bytes: u64,
    /// Content bytes of removed files.
    removed_bytes: u64,
    /// Content bytes of changed files in the second backup.
    changed_bytes: u64,
    changes: Vec<Change>,
}

fn differing(x: &Seen, y: &Seen) -> Vec<&'static str> {
    let (a, b) = (&x.e, &y.e);
    let mut f = Vec::new();
    if x.content != y.content {
        f.push("content");
    }
    if a.kind != b.kind {
        f.push("type");
    }
    if a.size != b.size {
        f.push("size");
    }
    if a.mtime != b.mtime {
        f.push("mtime");
    }
    if a.mode != b.mode {
        f.push("mode");
    }
    if a.link != b.link {
        f.push("link");
    }
    f
}

/// `tessera diff A B`: what B adds, removes and changes relative to A. An
/// entry is changed when its content (compared by hash), type, size,
/// modification time, permissions or link target differ.
pub fn diff(repo: &RepoArg, a: &str, b: &str, json: bool) -> Result<ExitCode> {
    let r = super::open::open_repo(repo, open_backend(repo)?)?;
    let (ba, bb) = (r.resolve(a)?.clone(), r.resolve(b)?.clone());
    let (ea, eb) = (entries(&r, &ba)?, entries(&r, &bb)?);
    let mut rep = DiffReport {
        from: ba.id.0,
        to: bb.id.0,
        ..Default::default()
    };
    for (path, old) in &ea {
        let old_seen = old;
        let old = &old.e;
        match eb.get(path) {
            None => {
                rep.removed += 1;
                rep.removed_bytes += old.size;
                rep.changes.push(Change {
                    path: path.clone(),
                    what: "removed",
                    kind: old.kind,
                    old_size: Some(old.size),
                    new_size: None,
                    fields: Vec::new(),
                });
            }
            Some(new_seen) => {
                let fields = differing(old_seen, new_seen);
                let new = &new_seen.e;
                // A directory's mtime changes with its contents, which are
                // listed themselves.
                if fields.is_empty() || (new.kind == "dir" && old.kind == "dir") {
                    continue;
                }
                rep.changed += 1;
                rep.changed_bytes += new.size;
                rep.changes.push(Change {
                    path: path.clone(),
                    what: "changed",
                    kind: new.kind,
                    old_size: Some(old.size),
                    new_size: Some(new.size),
                    fields,
                });
            }
        }
    }
    for (path, new) in &eb {
        let new = &new.e;
        if !ea.contains_key(path) {
            rep.added += 1;
            rep.added_bytes += new.size;
            rep.changes.push(Change {
                path: path.clone(),
                what: "added",
                kind: new.kind,
                old_size: None,
                new_size: Some(new.size),
                fields: Vec::new(),
            });
        }
    }
    rep.changes.sort_by(|x, y| x.path.cmp(&y.path));
    if json {
        ui::print_json(&rep)?;
        return Ok(ExitCode::SUCCESS);
    }
    for c in &rep.changes {
        let mark = match c.what {
            "added" => '+',
            "removed" => '-',
            _ => 'M',
        };
        let slash = if c.kind == "dir" { "/" } else { "" };
        println!("{mark}    {}{slash}", c.path);
    }
    if !ui::quiet() {
        println!(
            "backup {} → {}: {} added ({}), {} removed ({}), {} changed ({})",
            rep.from,
            rep.to,
            rep.added,
            ui::bytes(rep.added_bytes),
            rep.removed,
            ui::bytes(rep.removed_bytes),
            rep.changed,
            ui::bytes(rep.changed_bytes)
        );
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(Serialize)]
struct Found {
    backup: BackupId,
    time: u64,
    #[serde(flatten)]
    entry: Listed,
}

/// `tessera find PATTERN`: entries matching a gitignore-style pattern (as
/// for `--exclude`) in the chosen backups, newest backup first.
pub fn find(
    repo: &RepoArg,
    patterns: &[String],
    snapshots: &[String],
    filter: &Filter,
    ignore_case: bool,
    json: bool,
) -> Result<ExitCode> {
    let r = super::open::open_repo(repo, open_backend(repo)?)?;
    let mut sel = Selection::default();
    for p in patterns {
        sel.add_exclude(p, ignore_case)?;
    }
    let mut chosen: Vec<BackupEntry> = if snapshots.is_empty() {
        filter.select(r.backups()).into_iter().cloned().collect()
    } else {
        let mut v = Vec::new();
        for s in snapshots {
            v.push(filter.resolve(&r, s)?.clone());
        }
        v
    };
    chosen.retain(|b| b.source != SourceKind::Trace);
    chosen.sort_by_key(|b| std::cmp::Reverse(b.id));
    let mut found = Vec::new();
    for b in &chosen {
        r.list_entries(b, &mut |e| {
            let rel = e.path.trim_end_matches('/');
            if sel.excludes(rel.as_bytes(), e.kind == "dir") {
                found.push(Found {
                    backup: b.id,
                    time: b.time,
                    entry: e,
                });
            }
            Ok(())
        })?;
    }
    if json {
        ui::print_json(&found)?;
    } else {
        for f in &found {
            println!(
                "{:>5}  {}  {:>10}  {}",
                f.backup,
                ui::time(f.time),
                if f.entry.kind == "file" {
                    ui::bytes(f.entry.size)
                } else {
                    f.entry.kind.to_string()
                },
                f.entry.path
            );
        }
    }
    // As grep: status 1 when nothing matched, without an error line.
    Ok(if found.is_empty() {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// `tessera dump SNAPSHOT PATH`: a file's bytes, or a directory as a tar
/// stream, on standard output. A file or stream backup is dumped by its
/// name (as `tessera ls` shows it).
pub fn dump(repo: &RepoArg, snapshot: &str, path: &str, filter: &Filter) -> Result<ExitCode> {
    let r = super::open::open_repo(repo, open_backend(repo)?)?;
    let b = filter.resolve(&r, snapshot)?.clone();
    let want = path.trim_matches('/');
    let opts = RestoreOptions::default();
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::with_capacity(1 << 20, stdout.lock());
    if b.source != SourceKind::Tree {
        let mut name = None;
        r.list_entries(&b, &mut |e| {
            name = Some(e.path);
            Ok(())
        })?;
        if name.as_deref() != Some(want) {
            bail!(
                "backup {} holds one file, {}; dump that",
                b.id,
                name.unwrap_or_default()
            );
        }
        r.restore_to(&b, &mut out, &opts, &mut |_| {})?;
        out.flush()?;
        return Ok(ExitCode::SUCCESS);
    }
    let scratch = tempfile::tempdir().context("cannot create a scratch directory")?;
    let target = scratch.path().join("t");
    let include = if want.is_empty() {
        Vec::new()
    } else {
        vec![want.to_string()]
    };
    let (_, ext) = r.restore_into_selected(&b, &target, &opts, &include, &mut |_| {})?;
    if !ext.unmatched.is_empty() {
        bail!("backup {} has no entry {path}", b.id);
    }
    let at = target.join(want);
    let meta = std::fs::symlink_metadata(&at)
        .with_context(|| format!("backup {} has no entry {path}", b.id))?;
    if meta.is_file() {
        let mut f = std::fs::File::open(&at)?;
        std::io::copy(&mut f, &mut out)?;
    } else if meta.is_dir() {
        let mut tar = tar::Builder::new(&mut out);
        tar.follow_symlinks(false);
        let top = if want.is_empty() {
            ".".to_string()
        } else {
            want.rsplit('/').next().unwrap_or(want).to_string()
        };
        tar.append_dir_all(&top, &at)
            .with_context(|| format!("cannot write {path} as tar"))?;
        tar.finish()?;
    } else {
        bail!("{path} in backup {} is not a file or directory", b.id);
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}
