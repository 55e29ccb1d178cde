//! Directory backups: the walk's entries become the directory stream — each
//! regular file's contents in chunks of their own (the chunker restarts at
//! a file's first byte and cuts at its last), then the metadata records in
//! two sections, each chunked from its start (see
//! [`crate::archive::meta`]) — with the files cache supplying the chunks
//! of unchanged files.

use std::io::{self, Write};
use std::path::PathBuf;

use super::files_cache::{cache_path, CacheBuilder, FilesCache, FilesCacheOptions};
use super::pipeline::Ingest;
use crate::archive::meta::{Kind, MetaEncoder, Record};
use crate::archive::walk::{store, TreeOut};
use crate::archive::{FileId, Scan, TreeStats};
use crate::context::Context;
use crate::error::{Error, Result};
use crate::ingest::options::{BackupOptions, BackupReport};
use crate::rewrite::RewriteSpec;

/// The walk's output into a running backup.
struct TreeIngest<'a> {
    ingest: &'a mut Ingest,
    meta: MetaEncoder,
    /// The previous backup's files cache (files it may skip reading).
    cache: Option<&'a mut FilesCache>,
    /// Whether the next files cache learns each regular file.
    learning: bool,
    /// The identity of the file being read, and the mark before its chunks.
    current: Option<(FileId, u64)>,
    from_cache: u64,
}

impl Write for TreeIngest<'_> {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.ingest.write(data)
    }
    fn write_all(&mut self, data: &[u8]) -> io::Result<()> {
        self.ingest.write_all(data)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl TreeOut for TreeIngest<'_> {
    fn entry(&mut self, r: &Record) -> io::Result<()> {
        self.meta.push(r);
        if r.kind == Kind::File {
            self.ingest.boundary()?;
        }
        Ok(())
    }

    fn file_end(&mut self, r: &Record, complete: bool) -> io::Result<()> {
        self.ingest.boundary()?;
        if let (true, Some((id, first))) = (self.learning, self.current.take()) {
            // Only a file read whole at the size its identity gives, with
            // every attribute (one that could not be read is reported by
            // every backup, not taken as none from the cache).
            if id.size == r.size && complete {
                self.ingest.learn(&r.path, id, &r.xattrs, first)?;
            }
        }
        Ok(())
    }

    fn reuse(&mut self, r: &mut Record, id: &FileId) -> io::Result<bool> {
        self.current = None;
        let Some((chunks, xattrs)) = self
            .cache
            .as_deref_mut()
            .and_then(|c| c.lookup(&r.path, id))
        else {
            self.current = Some((*id, self.ingest.mark()));
            return Ok(false);
        };
        // Unchanged since recorded: a change of attributes changes the
        // ctime, which is part of `id`.
        r.xattrs = xattrs.to_vec();
        // `entry`, with the cache still borrowed.
        self.meta.push(r);
        if r.kind == Kind::File {
            self.ingest.boundary()?;
        }
        let first = self.ingest.mark();
        for (fp, n) in chunks.iter() {
            self.ingest.push_known(fp, n)?;
        }
        if self.learning {
            self.ingest.learn(&r.path, *id, &r.xattrs, first)?;
        }
        self.from_cache += 1;
        Ok(true)
    }
}

/// [`Writer::backup_paths`](crate::Writer::backup_paths).
pub(crate) fn backup_paths(
    repo: &mut Context,
    hooks: &dyn super::options::BackupHooks,
    files_cache: Option<&FilesCacheOptions>,
    opts: &BackupOptions,
    scan: Scan,
    progress: &mut dyn FnMut(u64),
) -> Result<(BackupReport, TreeStats)> {
    if repo.manifest.config.trace {
        return Err(Error::invalid(
            "this repository is in trace mode; it stores fingerprint traces, not directories",
        ));
    }
    // Before any file is read (the scan may have stat-ed some already):
    // the files cache's racy-file guard counts from here.
    let started = crate::clock::now();
    let paths: Vec<PathBuf> = scan.paths().to_vec();
    let mut scan = Some(scan);
    // The cache hands chunks over without their bytes, which a rewrite
    // policy would need to store duplicates again.
    let cache_opts: Option<FilesCacheOptions> = files_cache
        .filter(|_| matches!(opts.rewrite, RewriteSpec::None))
        .cloned();
    let cache_file = cache_opts
        .as_ref()
        .map(|c| cache_path(&c.dir, &repo.manifest.config.repo_id, &paths));
    let mut old = match (&cache_opts, &cache_file) {
        (Some(c), Some(f)) if !c.force_read => {
            let mut old = FilesCache::load(f);
            old.retain_indexed(repo.need_index()?);
            Some(old)
        }
        _ => None,
    };
    // The next cache is written as the backup goes (straight to its
    // temporary file), and put in place once the backup is committed.
    // Only speed depends on the cache: failing to write it is no error.
    let next_cache = cache_file
        .as_ref()
        .and_then(|f| CacheBuilder::create(f, started).ok());
    let learning = next_cache.is_some();
    let mut stats = None;
    let mut from_cache = 0;
    let (mut report, next_cache) = repo.backup_in_tree(hooks, opts, next_cache, |ingest| {
        let mut out = TreeIngest {
            ingest,
            meta: MetaEncoder::default(),
            cache: old.as_mut(),
            learning,
            current: None,
            from_cache: 0,
        };
        let mut done = 0u64;
        let mut on_bytes = |n: u64| {
            done += n;
            progress(done)
        };
        let scan = scan
            .take()
            .ok_or_else(|| Error::invalid("the directory walk ran twice"))?;
        stats = Some(store(scan, &mut out, &mut on_bytes)?);
        let io_err = |e| Error::io("backup", e);
        let (names, times) = std::mem::take(&mut out.meta).finish();
        from_cache = out.from_cache;
        ingest.metadata_starts().map_err(io_err)?;
        ingest.write_all(&names).map_err(io_err)?;
        ingest.boundary().map_err(io_err)?;
        ingest.write_all(&times).map_err(io_err)?;
        Ok(())
    })?;
    report.files_from_cache = from_cache;
    drop(old);
    if let Some(w) = next_cache {
        let _ = w.finish();
    }
    Ok((report, stats.unwrap_or_default()))
}
