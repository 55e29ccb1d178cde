//! A container the restore has cut to the chunks it will still supply
//! (the memory ceiling's trim; `restore/hold.rs` decides which and when).
//!
//! Two ways to hold those chunks:
//! - *In place*: a container mapped from a file (a local store maps
//!   objects of 1 MiB and more) whose kept chunks are stored as they are
//!   (raw, unsealed) keeps its mapping, and the pages holding none of them
//!   go back to the kernel ([`ObjectBytes::discard`]). As each kept chunk
//!   is used for the last time, its pages follow.
//! - *Copied*: otherwise the kept chunks are copied out, their frames
//!   opened (and so authenticated) here.
//!
//! Why in place: copying cost what the trim kept, not what it freed.
//! `lab bench`'s fragmented stream under the default ceiling trimmed 296
//! containers keeping 2.2 MiB of each on average (often 97 % of one): the
//! copies, 645 MiB in an allocation per chunk on the assembler's thread,
//! took its restore from 0.32 s to 0.62 s. In place a trim costs a system
//! call per run of pages it frees, and no byte moves.
//!
//! What the ceiling counts: the scheduler counts a trimmed container as
//! its kept chunks' plain bytes. In place, whole pages stay; a cut whose
//! pages would hold more than [`SLACK`] beyond those bytes is copied
//! instead, and pages freed by last uses go back once [`PENDING`] of them
//! are free. So a container trimmed in place holds at most `SLACK +
//! PENDING` bytes more than the ceiling counts for it.

use crate::backend::page_size;
use crate::container::format::object_name;
use crate::container::{Container, ContainerStore};
use crate::error::{Error, Result};
use crate::fingerprint::{Fingerprint, FpMap};
use crate::restore::future;
use std::collections::{HashMap, HashSet};
use std::ops::Range;
use std::sync::Arc;

/// Whole pages an in-place trim may hold beyond its kept chunks' bytes.
const SLACK: u64 = 64 << 10;
/// Pages freed by last uses that are given back together (one system call
/// and one TLB flush for several chunks, not one each).
const PENDING: usize = 16;

/// A container's chunks kept by a trim.
pub(super) enum Trimmed {
    /// Plain bytes copied out, by fingerprint.
    Copied(HashMap<Fingerprint, Vec<u8>>),
    /// The container itself, its other pages given back.
    InPlace(InPlace),
}

/// A mapped container cut in place: which chunks it keeps, and which of its
/// pages they hold.
pub(super) struct InPlace {
    container: Arc<Container>,
    /// Kept chunks: position in the container's metadata.
    kept: FpMap<u32>,
    pages: KeptPages,
}

impl Trimmed {
    /// The container a cut in place holds (its remaining pages are the
    /// caller's to give back); none for a copied cut.
    pub(super) fn into_container(self) -> Option<Arc<Container>> {
        match self {
            Trimmed::InPlace(p) => Some(p.container),
            Trimmed::Copied(_) => None,
        }
    }

    /// Cut `c` to its chunks whose fingerprints start with one of
    /// `prefixes` ([`future::prefix`]), `kept` plain bytes as the scheduler
    /// counts them: in place where it can, else copied. A copied cut gives
    /// the container back for its buffer to be reused.
    pub(super) fn cut(
        c: Arc<Container>,
        prefixes: &[u64],
        kept: u64,
        store: &ContainerStore,
    ) -> Result<(Trimmed, Option<Arc<Container>>)> {
        let wanted: HashSet<u64> = prefixes.iter().copied().collect();
        if let Some(p) = InPlace::cut(&c, &wanted, kept) {
            return Ok((Trimmed::InPlace(p), None));
        }
        let mut chunks = HashMap::new();
        let mut frame: Option<(u32, Vec<u8>)> = None;
        for (i, m) in c.meta.iter().enumerate() {
            if !wanted.contains(&future::prefix(&m.fp)) || chunks.contains_key(&m.fp) {
                continue;
            }
            let bytes = if !c.needs_opening(m) {
                c.bytes(m).to_vec()
            } else {
                if frame.as_ref().is_none_or(|f| f.0 != m.stored_offset) {
                    let mut buf = frame.take().map(|f| f.1).unwrap_or_default();
                    store.open_frame(&c, i, &mut buf)?;
                    frame = Some((m.stored_offset, buf));
                }
                let plain = &frame.as_ref().expect("opened").1;
                let start = m.frame_offset as usize;
                plain
                    .get(start..start + m.len as usize)
                    .ok_or_else(|| {
                        Error::corrupt(
                            object_name(c.id()),
                            format!("chunk {} lies outside its frame", m.fp.to_hex()),
                        )
                    })?
                    .to_vec()
            };
            chunks.insert(m.fp, bytes);
        }
        Ok((Trimmed::Copied(chunks), Some(c)))
    }

    /// The plain bytes of kept chunk `fp`.
    pub(super) fn chunk(&self, fp: &Fingerprint) -> Option<&[u8]> {
        match self {
            Trimmed::Copied(chunks) => chunks.get(fp).map(|v| &v[..]),
            Trimmed::InPlace(p) => {
                let &i = p.kept.get(fp)?;
                Some(p.container.bytes(&p.container.meta[i as usize]))
            }
        }
    }

    /// Chunk `fp` was used for the last time: let its memory go. Whether
    /// it was kept.
    pub(super) fn let_go(&mut self, fp: &Fingerprint) -> bool {
        match self {
            Trimmed::Copied(chunks) => chunks.remove(fp).is_some(),
            Trimmed::InPlace(p) => {
                let Some(i) = p.kept.remove(fp) else {
                    return false;
                };
                let c = &p.container;
                if let Some(span) = c.plain_span(&c.meta[i as usize]) {
                    let base = c.object().as_ptr() as usize;
                    p.pages.release(base + span.start..base + span.end);
                    for r in p.pages.take_pending(PENDING) {
                        c.object().discard(r.start - base..r.end - base);
                    }
                }
                true
            }
        }
    }

    /// Whether the chunks are held in place.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(super) fn in_place(&self) -> bool {
        matches!(self, Trimmed::InPlace(_))
    }
}

impl InPlace {
    /// `c` cut in place to the chunks whose prefixes are `wanted`, if it is
    /// mapped, every such chunk lies in it as it is, and their pages hold
    /// at most [`SLACK`] more than `kept`.
    fn cut(c: &Arc<Container>, wanted: &HashSet<u64>, kept: u64) -> Option<InPlace> {
        let object = c.object();
        if !object.is_mapped() {
            return None;
        }
        let base = object.as_ptr() as usize;
        let mut pages = KeptPages::new(base..base + object.len(), page_size());
        let mut chosen = FpMap::default();
        for (i, m) in c.meta.iter().enumerate() {
            if !wanted.contains(&future::prefix(&m.fp)) || chosen.contains_key(&m.fp) {
                continue;
            }
            let span = c.plain_span(m)?;
            pages.keep(base + span.start..base + span.end);
            chosen.insert(m.fp, i as u32);
        }
        if pages.held_bytes() > kept.saturating_add(SLACK) {
            return None;
        }
        for r in pages.free_runs() {
            object.discard(r.start - base..r.end - base);
        }
        Some(InPlace {
            container: Arc::clone(c),
            kept: chosen,
            pages,
        })
    }
}

/// Which pages of an object's address span hold kept chunks: a count of
/// kept chunks per page. Addresses are absolute, so pages are the
/// machine's, wherever the object starts.
struct KeptPages {
    page: usize,
    span: Range<usize>,
    /// The page number of the span's first byte.
    first: usize,
    counts: Vec<u32>,
    /// Pages whose last kept chunk went, not yet given back (indexes).
    pending: Vec<usize>,
}

impl KeptPages {
    fn new(span: Range<usize>, page: usize) -> Self {
        let first = span.start / page;
        let last = span.end.div_ceil(page);
        KeptPages {
            page,
            span,
            first,
            counts: vec![0; last.saturating_sub(first)],
            pending: Vec::new(),
        }
    }

    /// The pages touched by `r` (a non-empty range inside the span), as
    /// indexes.
    fn pages_of(&self, r: &Range<usize>) -> Range<usize> {
        if r.start >= r.end {
            return 0..0;
        }
        r.start / self.page - self.first..(r.end - 1) / self.page - self.first + 1
    }

    fn keep(&mut self, r: Range<usize>) {
        for p in self.pages_of(&r) {
            self.counts[p] += 1;
        }
    }

    /// Bytes of the pages that hold a kept chunk.
    fn held_bytes(&self) -> u64 {
        (self.counts.iter().filter(|&&n| n > 0).count() * self.page) as u64
    }

    /// The page index range `pages` as addresses, cut to the span.
    fn addresses(&self, pages: Range<usize>) -> Range<usize> {
        let start = ((self.first + pages.start) * self.page).max(self.span.start);
        let end = ((self.first + pages.end) * self.page).min(self.span.end);
        start..end
    }

    /// The runs of pages that hold no kept chunk, as address ranges.
    fn free_runs(&self) -> Vec<Range<usize>> {
        let mut runs = Vec::new();
        let mut from = None;
        for (p, &n) in self.counts.iter().enumerate() {
            match (n == 0, from) {
                (true, None) => from = Some(p),
                (false, Some(f)) => {
                    runs.push(self.addresses(f..p));
                    from = None;
                }
                _ => {}
            }
        }
        if let Some(f) = from {
            runs.push(self.addresses(f..self.counts.len()));
        }
        runs
    }

    /// A kept chunk at `r` went: the pages it alone held become pending.
    fn release(&mut self, r: Range<usize>) {
        for p in self.pages_of(&r) {
            self.counts[p] -= 1;
            if self.counts[p] == 0 {
                self.pending.push(p);
            }
        }
    }

    /// The pending pages as coalesced address ranges, once there are at
    /// least `at_least` of them (then none are pending).
    fn take_pending(&mut self, at_least: usize) -> Vec<Range<usize>> {
        if self.pending.len() < at_least {
            return Vec::new();
        }
        self.pending.sort_unstable();
        let mut runs: Vec<Range<usize>> = Vec::new();
        for p in self.pending.drain(..) {
            match runs.last_mut() {
                Some(r) if r.end == p => r.end = p + 1,
                _ => runs.push(p..p + 1),
            }
        }
        runs.into_iter().map(|r| self.addresses(r)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Against a model of bytes: a page is free exactly when no kept
        /// chunk touches it; what is given back never touches a kept byte,
        /// and every page a released chunk alone held is given back once
        /// enough are pending.
        #[test]
        fn pages_given_back_hold_no_kept_byte(
            offset in 0usize..64,
            chunks in proptest::collection::vec((1usize..3000, any::<bool>()), 1..40),
            order in proptest::collection::vec(any::<prop::sample::Index>(), 0..40),
        ) {
            const PAGE: usize = 256;
            let base = 10 * PAGE + offset;
            let mut at = base;
            let spans: Vec<(Range<usize>, bool)> = chunks
                .iter()
                .map(|&(len, keep)| {
                    let r = at..at + len;
                    at += len;
                    (r, keep)
                })
                .collect();
            let mut pages = KeptPages::new(base..at, PAGE);
            let mut kept: Vec<Range<usize>> = Vec::new();
            for (r, keep) in &spans {
                if *keep {
                    pages.keep(r.clone());
                    kept.push(r.clone());
                }
            }
            let touches = |g: &Range<usize>, kept: &[Range<usize>]| {
                kept.iter().any(|k| k.start < g.end && g.start < k.end)
            };
            let page_of = |a: usize| a / PAGE;
            let held: std::collections::BTreeSet<usize> = kept
                .iter()
                .flat_map(|k| page_of(k.start)..=page_of(k.end - 1))
                .collect();
            prop_assert_eq!(pages.held_bytes(), (held.len() * PAGE) as u64);
            let mut given: Vec<Range<usize>> = pages.free_runs();
            for g in &given {
                prop_assert!(g.start >= base && g.end <= at && g.start < g.end);
                prop_assert!(!touches(g, &kept), "{:?} touches a kept chunk", g);
            }
            // Every page inside the span that no kept chunk touches is given.
            for p in page_of(base)..=page_of(at - 1) {
                let page = (p * PAGE).max(base)..((p + 1) * PAGE).min(at);
                let free = !held.contains(&p);
                let covered = given.iter().any(|g| g.start <= page.start && page.end <= g.end);
                prop_assert_eq!(free, covered, "page {}", p);
            }
            // Release kept chunks in some order, giving back as they pend.
            for i in order {
                if kept.is_empty() {
                    break;
                }
                let r = kept.swap_remove(i.index(kept.len()));
                pages.release(r);
                let out = pages.take_pending(3);
                for g in &out {
                    prop_assert!(!touches(g, &kept), "{:?} touches a kept chunk", g);
                }
                given.extend(out);
            }
            given.extend(pages.take_pending(0));
            let now: std::collections::BTreeSet<usize> = kept
                .iter()
                .flat_map(|k| page_of(k.start)..=page_of(k.end - 1))
                .collect();
            for p in page_of(base)..=page_of(at - 1) {
                let page = (p * PAGE).max(base)..((p + 1) * PAGE).min(at);
                let covered = given.iter().any(|g| g.start <= page.start && page.end <= g.end);
                prop_assert_eq!(!now.contains(&p), covered, "page {} at the end", p);
            }
        }
    }
}
