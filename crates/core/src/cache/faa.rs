//! Forward assembly area (Lillibridge et al., FAST'13): the output is
//! assembled a window at a time in a memory area; for each window every
//! container it needs is read exactly once, and all of its chunks that the
//! window holds are copied into place. Memory is the area, not containers.

/// Area of a cache of `containers`: (containers − 1) × container size, as in
/// Destor (one container's worth is the read buffer), and at least one
/// container.
pub fn area_bytes(containers: usize, container_size: u64) -> u64 {
    (containers.saturating_sub(1).max(1) as u64) * container_size
}

/// Whether a chunk of `len` bytes still fits a window holding `filled`
/// bytes (a window always takes its first chunk, however large).
pub fn fits(filled: u64, len: u64, area: u64) -> bool {
    filled == 0 || filled + len <= area
}

/// Containers read by FAA restoring `refs` (container, chunk length) with
/// an area of `area` bytes.
pub fn faa_reads<K: Copy + Eq + std::hash::Hash>(refs: &[(K, u64)], area: u64) -> u64 {
    let mut reads = 0u64;
    let mut window = std::collections::HashSet::new();
    let mut filled = 0u64;
    for &(id, len) in refs {
        if !fits(filled, len, area) {
            reads += window.len() as u64;
            window.clear();
            filled = 0;
        }
        filled += len;
        window.insert(id);
    }
    reads + window.len() as u64
}
