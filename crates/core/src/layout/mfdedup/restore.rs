//! Out-of-order restore (MFDedup §4.4, Fig. 9): the recipe gives a restore
//! table fingerprint → offsets; then the categories the version needs are
//! read volume by volume in disk order, one part at a time, and each chunk
//! is written at every offset where the version has it. Memory is the table
//! (proportional to the recipe, as in the paper) plus one part.
//!
//! Positional writes need a file: [`restore_to_file`] writes straight into
//! one; a stream (stdout, a tar extraction) is restored into an unlinked
//! temporary file first and then copied out in order ("buffered through a
//! temporary file" in the report).

use crate::catalog::BackupEntry;
use crate::context::Context;
use crate::error::{Error, IoContext, Result};
use crate::fingerprint::FpMap;
use crate::layout::mfdedup::state::Run;
use crate::metrics::{mb_per_s, read_amplification, speed_factor};
use crate::restore::{RestoreOptions, RestoreReport};
use std::collections::HashSet;
use std::fs::File;
use std::io::{Seek, Write};
use std::os::unix::fs::FileExt;
use std::time::Instant;

pub use crate::restore::MfdedupReads;

/// Writes a chunk's bytes at an offset of the output.
type WriteAt<'a> = &'a mut dyn FnMut(&[u8], u64) -> Result<()>;

struct Restored {
    bytes: u64,
    chunks: u64,
    reads: MfdedupReads,
}

/// Restore `backup` by writing each chunk at its offsets through `write_at`
/// (`None` in trace mode: only the reads are done and counted).
fn run(
    repo: &Context,
    backup: &BackupEntry,
    mut write_at: Option<WriteAt<'_>>,
    progress: &mut dyn FnMut(u64),
) -> Result<Restored> {
    let bid = backup.id;
    let state = super::state::MfState::of(&repo.manifest)?;
    let (chain, k) = state
        .version_of(bid)
        .ok_or_else(|| Error::corrupt("manifest", format!("backup {bid} belongs to no chain")))?;
    let mut table: FpMap<(u32, Vec<u64>)> = FpMap::default();
    let (mut offset, mut chunks) = (0u64, 0u64);
    {
        let mut reader = repo.recipe_reader(8)?;
        let mut entries = reader.entries(backup.root_fp()?, backup.root_level)?;
        while let Some(e) = entries.next()? {
            let slot = table.entry(e.fp).or_insert((e.size as u32, Vec::new()));
            if slot.0 as u64 != e.size {
                return Err(Error::corrupt(
                    format!("backup {bid}"),
                    format!("chunk {} has two sizes in the recipe", e.fp.to_hex()),
                ));
            }
            slot.1.push(offset);
            offset += e.size;
            chunks += 1;
        }
    }
    let mut reads = MfdedupReads::default();
    let mut runs = HashSet::new();
    let mut done = 0u64;
    for (run, cat) in chain.required(k) {
        reads.categories += 1;
        if runs.insert(run) {
            reads.seeks += 1;
            if matches!(run, Run::Volume(_)) {
                reads.volumes += 1;
            }
        }
        for &part in &cat.parts {
            let c = repo.store.read(part)?;
            for m in &c.meta {
                let Some((len, offs)) = table.remove(&m.fp) else {
                    continue;
                };
                if len != m.len {
                    return Err(Error::corrupt(
                        format!("backup {bid}"),
                        format!(
                            "chunk {} has size {} in its category, {len} in the recipe",
                            m.fp.to_hex(),
                            m.len
                        ),
                    ));
                }
                if let Some(w) = write_at.as_mut() {
                    let bytes = c.bytes(m);
                    for &o in &offs {
                        w(bytes, o)?;
                    }
                }
                done += len as u64 * offs.len() as u64;
            }
            progress(done);
        }
    }
    if let Some((fp, (_, offs))) = table.iter().next() {
        return Err(Error::corrupt(
            format!("backup {bid}"),
            format!(
                "chunk {} (at offset {}) is in no category version {k} of chain '{}' needs",
                fp.to_hex(),
                offs[0],
                chain.name
            ),
        )
        .in_backup(bid, Some(offs[0])));
    }
    if offset != backup.logical_bytes {
        return Err(Error::corrupt(
            format!("backup {bid}"),
            format!(
                "recipe restores {offset} bytes, catalog says {}",
                backup.logical_bytes
            ),
        ));
    }
    Ok(Restored {
        bytes: offset,
        chunks,
        reads,
    })
}

fn report(
    repo: &Context,
    backup: &BackupEntry,
    opts: &RestoreOptions,
    r: Restored,
    before: &crate::metrics::MetricsSnapshot,
    started: Instant,
) -> RestoreReport {
    let io = repo.metrics.snapshot().since(before);
    let secs = started.elapsed().as_secs_f64();
    RestoreReport {
        backup_id: backup.id,
        restored_bytes: r.bytes,
        chunks: r.chunks,
        data_containers_read: io.data_containers_read,
        data_container_bytes_read: io.data_container_bytes_read,
        recipe_containers_read: io.recipe_containers_read,
        read_amplification: read_amplification(io.data_container_bytes_read, r.bytes),
        speed_factor: speed_factor(r.bytes, io.data_containers_read),
        seeks: r.reads.seeks,
        cache_containers: 0,
        cache: opts.cache,
        seconds: secs,
        throughput_mb_s: mb_per_s(r.bytes, secs),
        mfdedup: Some(r.reads),
    }
}

/// Restore into a file by positional writes (its length is set first).
pub fn restore_to_file(
    repo: &Context,
    backup: &BackupEntry,
    file: &File,
    opts: &RestoreOptions,
    progress: &mut dyn FnMut(u64),
) -> Result<RestoreReport> {
    let started = Instant::now();
    let before = repo.metrics.snapshot();
    if repo.manifest.config.trace {
        let r = run(repo, backup, None, progress)?;
        return Ok(report(repo, backup, opts, r, &before, started));
    }
    file.set_len(backup.logical_bytes)
        .ctx(|| "cannot size the restored file".into())?;
    let mut write = |b: &[u8], o: u64| {
        file.write_all_at(b, o)
            .ctx(|| "cannot write restored data".into())
    };
    let r = run(repo, backup, Some(&mut write), progress)?;
    Ok(report(repo, backup, opts, r, &before, started))
}

/// Restore into a stream: through an unlinked temporary file, then copied
/// out in order. Trace mode writes nothing.
pub fn restore_to(
    repo: &Context,
    backup: &BackupEntry,
    out: &mut dyn Write,
    opts: &RestoreOptions,
    progress: &mut dyn FnMut(u64),
) -> Result<RestoreReport> {
    let started = Instant::now();
    if repo.manifest.config.trace {
        return restore_to_file(
            repo,
            backup,
            &tempfile::tempfile().ctx(|| "cannot create a temporary file".into())?,
            opts,
            progress,
        );
    }
    let mut tmp = tempfile::tempfile()
        .ctx(|| "cannot create a temporary file for the out-of-order restore".into())?;
    let mut r = restore_to_file(repo, backup, &tmp, opts, progress)?;
    tmp.rewind()
        .ctx(|| "cannot read the temporary file".into())?;
    // A directory backup's stream (contents, then metadata) becomes its tar
    // stream, as on the container layout.
    match crate::restore::range::tree_records(repo, backup)? {
        Some((records, content)) => {
            let mut tar = crate::archive::assemble::TarAssembler::new(&mut *out, records, content)?;
            std::io::copy(&mut tmp, &mut tar).ctx(|| "cannot write restored data".into())?;
            tar.finish()?;
        }
        None => {
            std::io::copy(&mut tmp, out).ctx(|| "cannot write restored data".into())?;
        }
    }
    out.flush().ctx(|| "cannot write restored data".into())?;
    if let Some(m) = &mut r.mfdedup {
        m.buffered = true;
    }
    r.seconds = started.elapsed().as_secs_f64();
    r.throughput_mb_s = mb_per_s(r.restored_bytes, r.seconds);
    Ok(r)
}
