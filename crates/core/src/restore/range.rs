//! Random access into a backup's stream through its recipe's chunk sizes:
//! how a restore reads a directory backup's metadata (which follows the
//! contents) before the contents.

use crate::archive::meta::{self, Record};
use crate::cache::LruCache;
use crate::catalog::{BackupEntry, SourceKind};
use crate::container::ChunkKind;
use crate::error::{Error, Result};
use crate::repo::Repository;

/// Bytes `start..end` of the backup's stream, from verified containers.
pub(crate) fn read_range(
    repo: &Repository,
    b: &BackupEntry,
    start: u64,
    end: u64,
) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(end.saturating_sub(start).min(1 << 30) as usize);
    let mut entries = repo
        .recipe_reader(16)
        .into_entries(b.root_fp()?, b.root_level)?;
    let mut cache = LruCache::new(4);
    let mut at = 0u64;
    while at < end {
        let Some(e) = entries.next()? else { break };
        let (a, z) = (at, at + e.size);
        at = z;
        if z <= start {
            continue;
        }
        let id = repo
            .locate(ChunkKind::Data, &e.fp)
            .ok_or_else(|| Error::missing(format!("data chunk {}", e.fp.to_hex())))
            .map_err(|err| err.in_backup(b.id, Some(a)))?;
        let from = start.saturating_sub(a) as usize;
        let to = (end.min(z) - a) as usize;
        match cache.get(id, |id| repo.store.read(id)) {
            Ok(c) => {
                let bytes = c
                    .chunk(&e.fp)
                    .filter(|x| x.len() as u64 == e.size)
                    .ok_or_else(|| {
                        Error::corrupt(
                            format!("backup {}", b.id),
                            format!("chunk at offset {a} is not where the index says"),
                        )
                    })?;
                out.extend_from_slice(&bytes[from..to]);
            }
            // A damaged container may still hold this chunk intact (the
            // metadata shares containers with contents): salvage it.
            Err(err) => {
                let salvaged = repo.salvage_object(id).and_then(|(object, _, metas)| {
                    let m = metas.iter().find(|m| m.fp == e.fp)?;
                    let bytes = crate::salvage::chunk_bytes(&object, m, repo.store.sealer())?;
                    (bytes.len() as u64 == e.size && repo.fingerprinter().hash(&bytes) == e.fp)
                        .then(|| bytes[from..to].to_vec())
                });
                match salvaged {
                    Some(bytes) => out.extend_from_slice(&bytes),
                    None => return Err(err.in_backup(b.id, Some(a))),
                }
            }
        }
    }
    if (out.len() as u64) < end - start {
        return Err(Error::corrupt(
            format!("backup {}", b.id),
            format!("the recipe ends before byte {end}"),
        ));
    }
    Ok(out)
}

/// A directory backup's metadata records and where its metadata starts;
/// None for other backups and for directory backups stored as tar streams.
pub(crate) fn tree_records(
    repo: &Repository,
    b: &BackupEntry,
) -> Result<Option<(Vec<Record>, u64)>> {
    let (SourceKind::Tree, Some(content)) = (b.source, b.content_bytes) else {
        return Ok(None);
    };
    if content > b.logical_bytes {
        return Err(Error::corrupt(
            "manifest",
            format!("backup {} has more content bytes than bytes", b.id),
        ));
    }
    let bytes = read_range(repo, b, content, b.logical_bytes)?;
    Ok(Some((meta::decode(&bytes)?, content)))
}
