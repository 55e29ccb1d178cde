//! Planner (GCCDF §5.4): container-adaptable cluster packing. The tree built
//! newest-backup-first already places clusters of the most similar ownership
//! next to each other (the longest common suffix of newest backups), so the
//! migration order is the leaves' chunks, walked left to right.

use super::analyze::OwnershipTree;

/// The migration order: indices of the segment's cached chunks.
pub fn migration_order(tree: &OwnershipTree) -> Vec<u32> {
    tree.leaves().flatten().copied().collect()
}

#[cfg(test)]
mod tests {
    use super::super::analyze::analyze;
    use super::*;

    #[test]
    fn order_is_leaves_left_to_right() {
        let own = [3u8, 1, 2, 3, 1];
        let t = analyze(5, 2, 1, |r, c| own[c as usize] & (2 >> r) != 0);
        assert_eq!(migration_order(&t), vec![1, 4, 2, 0, 3]);
    }
}
