//! Interleaved ingest of a group of backups, as the GCCDF artifact ingests
//! its baselines: the chunks of `n` consecutive backups are buffered and
//! released round-robin (one chunk of each in turn) before dedup, so the
//! group's new chunks share containers, and the group's open containers are
//! sealed when it ends. Each backup keeps its own recipe and counts; the
//! whole group is published as one manifest generation, in member order.
//!
//! Why it exists: it is how the artifact's baselines become fragmented, and
//! reproducing its fragmentation figures needs the same layout. It is a
//! reproduction option (`interleave = N` in the lab), not how a user backs
//! up.
//!
//! Rewriting runs on the dealt stream, as the artifact's rewriting
//! baselines do: its segments (5 containers of data by default) hold
//! chunks of every member, the policy decides each segment once, and each
//! chunk still goes to its own member's recipe, so every backup restores
//! from its own copies. HAR keeps its history per member's chain. Every
//! member must ask for the same policy and segment: the group has one.
//! Without rewriting, FGC's reference graph records every member (with
//! edges between members), so a focused GC works on interleaved series.

use super::options::{report, Counts, Member};
use super::rewriting::StreamOut;
use super::sink::Sink;
use crate::chunking::chunk_all;
use crate::context::Context;
use crate::error::{Error, Result};
use crate::fingerprint::Fingerprint;
use crate::index::DataCursor;
use crate::ingest::options::{BackupOptions, BackupReport};
use crate::recipe::RecipeBuilder;
use crate::rewrite::{default_segment_bytes, HarHistory, Rewriter};
use std::time::Instant;

/// One backup of an interleaved group: its whole stream.
pub enum GroupInput {
    /// A byte stream (data-mode repositories); chunked and hashed here.
    Bytes(Vec<u8>),
    /// A fingerprint trace: (fingerprint, size) per chunk (trace mode).
    Trace(Vec<(Fingerprint, u32)>),
}

/// A member's chunks, ready to be dealt out.
struct Dealt {
    /// (fingerprint, length, offset of its bytes in `bytes`).
    chunks: Vec<(Fingerprint, u32, usize)>,
    bytes: Vec<u8>,
    recipe: RecipeBuilder,
    counts: Counts,
    cursor: DataCursor,
}

/// Where a segment of the dealt stream goes: each member's recipe and counts.
fn outs(dealt: &mut [Dealt]) -> Vec<StreamOut<'_>> {
    dealt
        .iter_mut()
        .map(|d| StreamOut {
            recipe: &mut d.recipe,
            counts: Some(&mut d.counts),
        })
        .collect()
}

/// [`Writer::backup_interleaved`](crate::Writer::backup_interleaved).
pub(crate) fn backup_interleaved(
    repo: &mut Context,
    hooks: &dyn super::options::BackupHooks,
    group: Vec<(BackupOptions, GroupInput)>,
) -> Result<Vec<BackupReport>> {
    let started = Instant::now();
    let before = repo.metrics.snapshot();
    let cfg = repo.manifest.config.clone();
    hooks.check_interleaved()?;
    if group.is_empty() {
        return Ok(Vec::new());
    }
    let (rewrite, segment) = (group[0].0.rewrite, group[0].0.segment_bytes);
    let mut names = Vec::with_capacity(group.len());
    let mut chains = Vec::with_capacity(group.len());
    let mut dealt = Vec::with_capacity(group.len());
    let chunker = cfg.chunker.build();
    let fingerprinter = repo.fingerprinter().clone();
    for (opts, input) in group {
        if (opts.rewrite, opts.segment_bytes) != (rewrite, segment) {
            return Err(Error::invalid(format!(
                "backup {:?}: an interleaved group rewrites with one policy and segment \
                 ({} here, {} for the group's first backup)",
                opts.name, opts.rewrite, rewrite
            )));
        }
        hooks.check(&opts)?;
        chains.push(super::backup::har_chain(&opts));
        let (chunks, bytes) = match input {
            GroupInput::Trace(t) => {
                if !cfg.trace {
                    return Err(Error::invalid("this repository stores data; it cannot ingest a fingerprint trace (init it with --trace)"));
                }
                (
                    t.into_iter().map(|(fp, n)| (fp, n, 0)).collect(),
                    Vec::new(),
                )
            }
            GroupInput::Bytes(b) => {
                if cfg.trace {
                    return Err(Error::invalid(
                        "this repository holds fingerprint traces; it cannot store bytes",
                    ));
                }
                let mut at = 0;
                let chunks = chunk_all(&*chunker, &b)
                    .into_iter()
                    .map(|n| {
                        let c = (fingerprinter.hash(&b[at..at + n]), n as u32, at);
                        at += n;
                        c
                    })
                    .collect();
                (chunks, b)
            }
        };
        names.push((opts.name, opts.source, opts.meta));
        dealt.push(Dealt {
            chunks,
            bytes,
            recipe: RecipeBuilder::new(fingerprinter.clone()),
            counts: Counts::default(),
            cursor: DataCursor::default(),
        });
    }

    let segment = segment.unwrap_or_else(|| default_segment_bytes(cfg.container_size as u64));
    let chains_of_members = chains.clone();
    let rw = Rewriter::new(&rewrite, segment, &repo.manifest, chains)?;
    let recording = rw.is_none();
    let mut sink = Sink::new(repo, hooks, rw);
    if recording {
        // FGC's graph: each member's bases and edges, including those to
        // earlier members of the group (see `fgc::CorrRecorder::member`).
        sink.corr = crate::fgc::CorrRecorder::start(repo);
    }
    let trace = cfg.trace;
    let mut deal = || -> Result<Vec<Member>> {
        let longest = dealt.iter().map(|d| d.chunks.len()).max().unwrap_or(0);
        for k in 0..longest {
            for m in 0..dealt.len() {
                let d = &mut dealt[m];
                let Some(&(fp, len, at)) = d.chunks.get(k) else {
                    continue;
                };
                let bytes = if trace {
                    &[][..]
                } else {
                    &d.bytes[at..at + len as usize]
                };
                if let Some(rw) = &mut sink.rw {
                    if rw.push(m, fp, len, bytes) {
                        sink.flush_segment(&mut outs(&mut dealt))?;
                    }
                    continue;
                }
                // The sink counts for, and follows the index log of,
                // the member whose chunk this is.
                sink.counts = d.counts;
                sink.cursor = d.cursor;
                if let Some(corr) = &mut sink.corr {
                    corr.member(m);
                }
                let copy = sink.dedup_chunk(fp, len, bytes)?;
                d.recipe.push(fp, len, copy, &mut sink)?;
                d.counts = sink.counts;
                d.cursor = sink.cursor;
            }
        }
        sink.flush_segment(&mut outs(&mut dealt))?;
        let mut members = Vec::with_capacity(dealt.len());
        for (m, (d, (name, source, meta))) in dealt.drain(..).zip(names.drain(..)).enumerate() {
            sink.counts = d.counts;
            if let Some(corr) = &mut sink.corr {
                corr.member(m);
            }
            let root = d.recipe.finish(&mut sink)?;
            members.push(Member {
                name,
                chain: None,
                source,
                meta,
                root,
                counts: sink.counts,
            });
        }
        Ok(members)
    };
    let members = deal();
    let counts: Vec<Counts> = match &members {
        Ok(m) => m.iter().map(|m| m.counts).collect(),
        Err(_) => Vec::new(),
    };
    let entries = repo.commit(hooks, sink, members)?;
    let io = repo.metrics.snapshot().since(&before);
    // HAR: each member's chain's list for its next backup.
    let history = match rewrite {
        crate::rewrite::RewriteSpec::Har { .. } => Some(HarHistory::of(&repo.manifest)?),
        _ => None,
    };
    Ok(entries
        .into_iter()
        .zip(counts)
        .zip(chains_of_members)
        .map(|((e, c), chain)| {
            let sparse = history.as_ref().map_or(0, |h| h.chain(&chain).len() as u64);
            report(e, c, sparse, &io, started)
        })
        .collect())
}
