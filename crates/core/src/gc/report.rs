//! What a GC did.

use super::options::GcStrategy;
use super::phase::PhaseReport;
use serde::Serialize;

/// What a GC did. Container counts and bytes are of data containers (the
/// papers' figures); recipe containers are reported in `recipe_*`.
#[derive(Clone, Debug, Default, Serialize)]
pub struct GcReport {
    pub strategy: GcStrategy,
    /// The mark run: logical, physical, physical+ or focused.
    pub mark: String,
    /// The mark that ran: `mark`, unless the focused mark fell back to the
    /// full (logical) one because its focus covered most of the repository.
    pub mark_ran: String,
    /// The focused mark's estimates and memory split (FGC, Fig. 8b); all 0
    /// for the other marks.
    pub focus: FocusReport,
    /// Mark passes (2 when sampling under `--memory-limit`).
    pub mark_passes: u32,
    /// Recipe subtrees the mark skipped as already marked, and the logical
    /// bytes below them (what walking each backup in full would add).
    pub skipped_subtrees: u64,
    pub skipped_bytes: u64,
    /// Seconds the copy phase slept to keep to `--max-read-rate` and
    /// `--max-write-rate`.
    pub throttled_seconds: f64,
    /// Per phase: time, bytes and containers read, memory.
    pub phases: Vec<PhaseReport>,
    pub dry_run: bool,
    /// Containers a deletion involves: referenced by a backup forgotten
    /// since the last GC, or holding a chunk no retained backup references.
    pub involved_containers: u64,
    /// Involved containers left alone: every chunk still live, or liveness
    /// at or above the threshold.
    pub skipped_containers: u64,
    /// Containers deleted (their live chunks, if any, copied forward).
    pub reclaimed_containers: u64,
    /// New containers written by the sweep (in a dry run: a lower bound,
    /// live bytes / container size).
    pub produced_containers: u64,
    /// Container bytes read by the sweep.
    pub bytes_read: u64,
    /// Container bytes written by the sweep.
    pub bytes_written: u64,
    pub mark_seconds: f64,
    pub analyze_seconds: f64,
    pub sweep_read_seconds: f64,
    pub sweep_write_seconds: f64,
    /// Writing the new index segment and manifest, deleting the old objects.
    pub publish_seconds: f64,
    pub total_seconds: f64,
    /// Mark tables + GC cache + ownership tree (their peaks). The GC cache
    /// counts the chunks' logical bytes, what data mode holds, so trace mode
    /// reports the same figure.
    pub peak_memory_bytes: u64,
    /// Logical bytes of the involved containers (GC throughput's numerator).
    pub involved_bytes: u64,
    /// Involved containers with no live chunk: deleted without being read.
    pub deleted_without_copy: u64,
    /// Logical container bytes freed: reclaimed minus produced.
    pub reclaimed_bytes: u64,
    /// Live chunks copied forward (data and recipe).
    pub moved_chunks: u64,
    /// GCCDF segments processed.
    pub segments: u64,
    /// Recipe container bytes read by mark.
    pub mark_bytes_read: u64,
    pub mark_memory_bytes: u64,
    pub gc_cache_peak_bytes: u64,
    pub tree_peak_bytes: u64,
    pub recipe_involved_containers: u64,
    pub recipe_reclaimed_containers: u64,
    pub recipe_produced_containers: u64,
    /// Whole containers (data and recipe) the mark and select read, and
    /// how many of those reads were seeks: out of ascending container
    /// order, i.e. the first, a jump back or a re-read (FAST'17 §5.3:
    /// LGC's random reads; a physical pass in container order is one).
    pub mark_containers_read: u64,
    pub mark_seeks: u64,
    /// Container metadata sections the mark and select read.
    pub mark_metadata_reads: u64,
    /// Per-chunk liveness queries the mark made (FGC Fig. 9): each data
    /// chunk reference marked, and each of a deleted backup checked.
    pub chunk_queries: u64,
    /// The liveness array the mark filled (the valid-chunk table; for the
    /// focused mark the correlative walk's): FGC Fig. 10's exchanged array.
    pub liveness_array_bytes: u64,
    /// `liveness_array_bytes` in bits per data fingerprint stored (FAST'17
    /// §3.4: a Bloom live vector of 6 bits per fingerprint, PGC+'s perfect
    /// hash vector 2.8).
    pub live_vector_bits_per_fp: f64,
    /// The physical marks' L_p perfect-hash vector (two bits per recipe
    /// fingerprint and the hash function) in bits per recipe fingerprint
    /// (FAST'17 §3.2.2: under 4); 0 for the other marks.
    pub lp_vector_bits_per_fp: f64,
    /// Online GC: dead chunk copies that concurrent backups deduplicated
    /// against, added to the live set at the cutoff (FAST'17 §3.5).
    pub resurrections: u64,
    /// Online GC: resurrection records read at the cutoff.
    pub resurrection_records: u64,
}

/// The focused mark's side of a [`GcReport`].
#[derive(Clone, Debug, Default, Serialize)]
pub struct FocusReport {
    /// The focus was estimated to cover most of the repository: the full
    /// mark ran.
    pub fell_back: bool,
    /// Recipe container bytes the focused mark was estimated to read, and
    /// the full mark; recipe entry bytes each would visit (what the choice
    /// compared: `gc::mark::focused::Estimate`).
    pub focus_estimate_bytes: u64,
    pub full_estimate_bytes: u64,
    pub focus_estimate_entry_bytes: u64,
    pub full_estimate_entry_bytes: u64,
    /// Correlative backups walked (0 after a fallback).
    pub correlative_backups: u64,
    /// The liveness array of the correlative walk (in the mark's memory).
    pub liveness_array_bytes: u64,
    /// The bases, one per stored chunk copy (not in the mark's memory: the
    /// paper keeps them in the fingerprint index).
    pub base_map_bytes: u64,
    /// The reference graph's edges (in the mark's memory).
    pub graph_bytes: u64,
}
