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

/// (path, identity, mark before its chunks, mark after) of a regular file stored.
type Learnt = (Vec<u8>, FileId, u64, u64);

/// The walk's output into a running backup.
struct TreeIngest<'a> {
    ingest: &'a mut Ingest,
    meta: MetaEncoder,
    /// The previous backup's files cache (files it may skip reading).
    cache: Option<&'a FilesCache>,
    /// Each regular file, for the next files cache.
    learnt: Option<Vec<Learnt>>,
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

    fn file_end(&mut self, r: &Record) -> io::Result<()> {
        self.ingest.boundary()?;
        if let (Some(learnt), Some((id, first))) = (&mut self.learnt, self.current.take()) {
            // Only a file read whole at the size its identity gives.
            if id.size == r.size {
                learnt.push((r.path.clone(), id, first, self.ingest.mark()));
            }
        }
        Ok(())
    }

    fn reuse(&mut self, r: &Record, id: &FileId) -> io::Result<bool> {
        self.current = None;
        let Some(chunks) = self.cache.and_then(|c| c.lookup(&r.path, id)) else {
            self.current = Some((*id, self.ingest.mark()));
            return Ok(false);
        };
        self.entry(r)?;
        let first = self.ingest.mark();
        for (fp, n) in chunks.iter() {
            self.ingest.push_known(fp, n)?;
        }
        if let Some(learnt) = &mut self.learnt {
            learnt.push((r.path.clone(), *id, first, self.ingest.mark()));
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
    let old = match (&cache_opts, &cache_file) {
        (Some(c), Some(f)) if !c.force_read => {
            let mut old = FilesCache::load(f);
            old.retain_indexed(repo.need_index()?);
            Some(old)
        }
        _ => None,
    };
    let mut stats = None;
    let mut learnt = None;
    let mut from_cache = 0;
    let (mut report, trail) = repo.backup_in_tree(hooks, opts, cache_file.is_some(), |ingest| {
        let mut out = TreeIngest {
            ingest,
            meta: MetaEncoder::default(),
            cache: old.as_ref(),
            learnt: cache_file.is_some().then(Vec::new),
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
        learnt = out.learnt.take();
        from_cache = out.from_cache;
        ingest.metadata_starts().map_err(io_err)?;
        ingest.write_all(&names).map_err(io_err)?;
        ingest.boundary().map_err(io_err)?;
        ingest.write_all(&times).map_err(io_err)?;
        Ok(())
    })?;
    report.files_from_cache = from_cache;
    // The old cache is done with before the new one is written.
    drop(old);
    if let (Some(file), Some(learnt), Some(trail)) = (cache_file, learnt, trail) {
        // Only speed depends on the cache: failing to write it is no error.
        if let Ok(mut w) = CacheBuilder::create(&file, started) {
            for (path, id, a, z) in learnt {
                if let Some(chunks) = trail.between(a, z) {
                    w.push(&path, &id, chunks.iter().copied());
                }
            }
            let _ = w.finish();
        }
    }
    Ok((report, stats.unwrap_or_default()))
}
