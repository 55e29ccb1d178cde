//! GCCDF: the sweep reorders the valid chunks of each segment of S involved
//! containers by ownership before writing them (preprocess → analyze → plan).

pub mod analyze;
pub mod plan;
pub mod preprocess;

use crate::container::ContainerId;
use crate::context::Context;
use crate::error::Result;
use crate::fingerprint::Fingerprint;
use crate::gc::mark::Mark;
use crate::index::{CopyNo, CopySet};

/// The ownership tree of one cached segment: its involved backups (from
/// the mark's RRT), newest first, checked against their ownership filters.
pub fn segment_tree(
    mark: &Mark,
    cache: &preprocess::GcCache,
    segment: &[ContainerId],
    split_threshold: usize,
) -> analyze::OwnershipTree {
    let backups = preprocess::involved_backups(mark, segment);
    let filters: Vec<_> = backups.iter().map(|b| mark.owners.get(b)).collect();
    analyze::analyze(cache.len(), filters.len(), split_threshold, |r, c| {
        filters[r].is_some_and(|f| f.contains(&cache.fps[c as usize]))
    })
}

/// Clusters per segment, each a list of (fingerprint, live copies).
pub type Clusters = Vec<Vec<Vec<(Fingerprint, Vec<CopyNo>)>>>;

/// The clusters GCCDF's sweep would write for data containers `ids`, per
/// segment, left to right, each chunk as (fingerprint, the live copies it
/// stands for). Reads the containers as the sweep does; writes nothing
/// (for tests and reports comparing marks).
pub fn clusters(
    repo: &Context,
    mark: &Mark,
    ids: &[ContainerId],
    segment_containers: usize,
    split_threshold: usize,
) -> Result<Clusters> {
    let mut placed = CopySet::default();
    let mut out = Vec::new();
    for segment in ids.chunks(segment_containers.max(1)) {
        let (cache, _) = preprocess::load_segment(repo, mark, segment, &mut placed)?;
        let tree = segment_tree(mark, &cache, segment, split_threshold);
        out.push(
            tree.leaves()
                .map(|l| {
                    l.iter()
                        .map(|&i| (cache.fps[i as usize], cache.copies[i as usize].clone()))
                        .collect()
                })
                .collect(),
        );
    }
    Ok(out)
}
