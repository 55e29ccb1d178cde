//! AVAR's arranging stage (MFDedup §4.3, Fig. 8): one step per version.
//!
//! Step v reads the active categories Cat.(i, v−1) part by part and sorts
//! each chunk by whether version v references it (its NDF table): the
//! referenced ones are written to the new active Cat.(i, v), the others to
//! the archived Cat.(i, v−1), which form Volume v−1. The pending Cat.(v, v)
//! (version v's unique chunks) joins the active set as it is. Each step
//! publishes its own generation: its new parts and the volume header are
//! durable first, the old active parts are deleted only after, so a crash
//! at any point leaves either step's layout intact.

use super::volume::{put_header, CategoryFiller, Volume};
use crate::backend::ObjectKey;
use crate::container::IdAllocator;
use crate::context::Context;
use crate::error::{Error, Result};
use crate::fingerprint::FpSet;
use crate::layout::mfdedup::state::MfState;
use std::collections::HashSet;
use std::time::Instant;

pub use crate::ingest::ArrangeReport;

/// Arrange `chain` until it is caught up, or at most `limit` steps.
pub fn arrange_chain(w: &mut Context, chain: &str, limit: Option<u32>) -> Result<ArrangeReport> {
    let started = Instant::now();
    let mut report = ArrangeReport {
        chain: chain.to_string(),
        ..Default::default()
    };
    loop {
        let state = MfState::of(&w.manifest)?;
        let Some(c) = state.chain(chain) else {
            return Err(Error::invalid(format!("no chain '{chain}'")));
        };
        if c.behind() == 0 || limit.is_some_and(|l| report.steps >= l) {
            break;
        }
        step(w, chain, &mut report)?;
        report.steps += 1;
    }
    report.seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

/// Arrange every chain that is behind.
pub fn arrange_all(w: &mut Context, limit: Option<u32>) -> Result<Vec<ArrangeReport>> {
    let names: Vec<String> = MfState::of(&w.manifest)?
        .chains
        .iter()
        .filter(|c| c.behind() > 0)
        .map(|c| c.name.clone())
        .collect();
    names.iter().map(|n| arrange_chain(w, n, limit)).collect()
}

/// One step: arrange version `arranged + 1` of the chain.
fn step(w: &mut Context, name: &str, report: &mut ArrangeReport) -> Result<()> {
    let mut state = MfState::of(&w.manifest)?;
    let ci = state
        .chains
        .iter()
        .position(|c| c.name == name)
        .expect("chain exists");
    let chain = state.chains[ci].clone();
    let v = chain.arranged + 1;
    let table = chain.table(v).ok_or_else(|| {
        Error::corrupt(
            "manifest",
            format!("chain '{name}' has no NDF table for version {v}"),
        )
    })?;
    let refs: FpSet = super::ndf::load_table(&w.objects, table.key)?
        .into_iter()
        .collect();
    let cfg = w.manifest.config.clone();
    let mut ids = IdAllocator::new(w.manifest.next_container_id);
    let cap = cfg.container_size as u64;
    let mut keep = CategoryFiller::new(w.store.clone(), cap, cfg.trace);
    let mut arch = CategoryFiller::new(w.store.clone(), cap, cfg.trace);
    let mut active = Vec::new();
    let mut archived = Vec::new();
    for cat in &chain.active {
        for &part in &cat.parts {
            let c = w.store.read(part)?;
            for m in &c.meta {
                let bytes = c.bytes(m);
                if refs.contains(&m.fp) {
                    keep.push(&mut ids, m.fp, m.len, bytes)?;
                } else {
                    arch.push(&mut ids, m.fp, m.len, bytes)?;
                }
            }
        }
        report.read_bytes += cat.bytes;
        if let Some(k) = keep.finish(cat.start, v)? {
            report.kept_bytes += k.bytes;
            active.push(k);
        }
        if let Some(a) = arch.finish(cat.start, cat.end)? {
            report.archived_bytes += a.bytes;
            archived.push(a);
        }
    }
    let mut next = w.manifest.clone();
    let volume = (!archived.is_empty()).then(|| Volume {
        version: v - 1,
        key: state.take_key(),
        categories: archived,
    });
    if let Some(vol) = &volume {
        put_header(&w.objects, name, vol)?;
        report.volumes_written += 1;
    }
    let c = &mut state.chains[ci];
    if let Some(p) = c.pending.iter().position(|p| p.start == v) {
        active.push(c.pending.remove(p));
    }
    let old_parts: HashSet<_> = chain.active.iter().flat_map(|x| x.parts.clone()).collect();
    c.active = active;
    c.arranged = v;
    c.volumes.extend(volume);
    let (gone, kept): (Vec<_>, Vec<_>) = c.tables.drain(..).partition(|t| t.version < v);
    c.tables = kept;
    next.containers.retain(|x| !old_parts.contains(&x.id));
    next.containers.extend_from_slice(keep.written());
    next.containers.extend_from_slice(arch.written());
    next.next_container_id = ids.next_id();
    let superseded: Vec<ObjectKey> = old_parts
        .into_iter()
        .map(ObjectKey::Container)
        .chain(gone.iter().map(|t| ObjectKey::NdfTable(t.key)))
        .collect();
    MfState::set(&mut next, &state);
    crate::publish::publish(w, next, &superseded)
}
