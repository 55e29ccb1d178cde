//! Rewriting of fragmented duplicates at backup time (Capping, NED, SMR, HAR).
//!
//! A rewrite policy looks at each ingest segment (a run of chunks, 5
//! containers of data by default: 20 MiB at the papers' 4 MiB) and decides which duplicate chunks are deduplicated and which are
//! written again, next to their neighbours, so that restores read fewer
//! containers. See `smr-rewriting.md` and `mfdedup-tos.md` §2.2.

mod capping;
mod har;
mod ned;
mod policy;
mod rewriter;
mod smr;
mod spec;

pub use capping::{capping_select, Capping};
pub(crate) use har::LegacySparse;
pub use har::{har_sparse, Har, HarHistory, HAR_LIMIT, HAR_THRESHOLD};
pub use ned::{ned_select, Ned};
pub use policy::{
    decide_by_selection, default_segment_bytes, NoRewrite, RewritePolicy, Segment, SegmentChunk,
    DEFAULT_SEGMENT_CONTAINERS,
};
pub(crate) use rewriter::Rewriter;
pub use smr::{smr_select, Smr};
pub use spec::RewriteSpec;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::container::ContainerId;
    use std::collections::HashMap;

    // Containers of `smr-rewriting.md` Fig. 3 (capacity 5 chunks).
    const I: ContainerId = ContainerId(1);
    const II: ContainerId = ContainerId(2);
    const III: ContainerId = ContainerId(3);
    const IV: ContainerId = ContainerId(4);
    const V: ContainerId = ContainerId(5);

    /// A segment from (chunk name, containers holding a copy).
    fn segment(chunks: &[(&str, &[ContainerId])]) -> (Vec<String>, Segment) {
        let names = chunks.iter().map(|c| c.0.to_string()).collect();
        let chunks = chunks
            .iter()
            .map(|(_, cs)| SegmentChunk {
                len: 1,
                containers: cs.to_vec(),
                stream: 0,
            })
            .collect();
        (names, Segment { chunks })
    }

    fn rewritten(names: &[String], d: &[Option<ContainerId>]) -> Vec<String> {
        names
            .iter()
            .zip(d)
            .filter(|(_, d)| d.is_none())
            .map(|(n, _)| n.clone())
            .collect()
    }

    /// Second stream of Fig. 3: I holds A–E, II holds F G, III holds K L M
    /// (N O P are unique, not the policy's business).
    fn fig3_second_stream() -> (Vec<String>, Segment) {
        segment(&[
            ("A", &[I]),
            ("B", &[I]),
            ("C", &[I]),
            ("D", &[I]),
            ("E", &[I]),
            ("F", &[II]),
            ("G", &[II]),
            ("K", &[III]),
            ("L", &[III]),
            ("M", &[III]),
        ])
    }

    /// Both schemes pick I and III and rewrite F and G.
    #[test]
    fn paper_fig3_second_stream() {
        let (names, seg) = fig3_second_stream();
        assert_eq!(capping_select(&seg, 2), vec![I, III]);
        assert_eq!(smr_select(&seg, 2), vec![I, III]);
        let d = Capping { level: 2 }.decide(&seg);
        assert_eq!(rewritten(&names, &d), ["F", "G"]);
        assert_eq!(Smr { level: 2 }.decide(&seg), d);
    }

    /// Third stream of Fig. 3 / Fig. 6: after the second backup F and G have
    /// copies in II and IV (IV = F G N O P). Capping counts I:3 II:5 III:0
    /// IV:4, selects II and IV, rewrites A B C; SMR (Table I) selects I and
    /// II (8 distinct chunks) and rewrites only O and P.
    #[test]
    fn paper_fig3_fig6_third_stream() {
        let (names, seg) = segment(&[
            ("A", &[I]),
            ("B", &[I]),
            ("C", &[I]),
            ("F", &[IV, II]),
            ("G", &[IV, II]),
            ("H", &[II]),
            ("I", &[II]),
            ("J", &[II]),
            ("O", &[IV]),
            ("P", &[IV]),
        ]);
        let mut cap = capping_select(&seg, 2);
        cap.sort();
        assert_eq!(cap, vec![II, IV]);
        let mut smr = smr_select(&seg, 2);
        smr.sort();
        assert_eq!(smr, vec![I, II]);

        let d = Capping { level: 2 }.decide(&seg);
        assert_eq!(rewritten(&names, &d), ["A", "B", "C"]);
        assert_eq!(d.iter().filter(|d| d.is_some()).count(), 7);
        let d = Smr { level: 2 }.decide(&seg);
        assert_eq!(rewritten(&names, &d), ["O", "P"]);
        assert_eq!(d.iter().filter(|d| d.is_some()).count(), 8);
        // F and G are read from II, the container SMR selected.
        assert_eq!(d[3], Some(II));
        assert_eq!(d[4], Some(II));
    }

    #[test]
    fn selection_is_exactly_the_level_and_stops_at_zero_gain() {
        let (_, seg) = segment(&[("a", &[I]), ("b", &[II]), ("c", &[III]), ("d", &[I, II])]);
        assert_eq!(capping_select(&seg, 2).len(), 2);
        assert_eq!(smr_select(&seg, 2).len(), 2);
        // Container 2 adds nothing once 1 and 4 are chosen: gain 0 stops.
        let (_, seg) = segment(&[("a", &[I, II]), ("b", &[I, II]), ("c", &[IV])]);
        let s = smr_select(&seg, 10);
        assert_eq!(s, vec![I, IV]);
        assert!(smr_select(&Segment::default(), 3).is_empty());
    }

    #[test]
    fn har_rewrites_only_chunks_without_a_dense_copy() {
        let (names, seg) = segment(&[("a", &[I]), ("b", &[II]), ("c", &[I, III])]);
        let d = Har::new(vec![vec![I]]).decide(&seg);
        assert_eq!(rewritten(&names, &d), ["a"]);
        assert_eq!(d[2], Some(III));
        let used = HashMap::from([(I, 40), (II, 60), (III, 50)]);
        assert_eq!(har_sparse(&used, 100, 0.5, 1.0), vec![I]);
    }

    #[test]
    fn ned_keeps_containers_the_segment_uses_at_or_above_the_threshold() {
        // Fig. 3's second stream with 5-chunk containers: I holds 5 of the
        // segment's chunks (1.0), III 3 (0.6), II 2 (0.4).
        let (names, seg) = fig3_second_stream();
        let stored = HashMap::from([(I, 5), (II, 5), (III, 5)]);
        assert_eq!(ned_select(&seg, &stored, 0.5), vec![I, III]);
        assert_eq!(ned_select(&seg, &stored, 0.4), vec![I, III, II]);
        assert_eq!(ned_select(&seg, &stored, 1.0), vec![I]);
        let mut ned = Ned::new(0.5, stored.clone());
        assert_eq!(rewritten(&names, &ned.decide(&seg)), ["F", "G"]);
        let mut all = Ned::new(0.3, stored.clone());
        assert!(rewritten(&names, &all.decide(&seg)).is_empty());
        // A copy counts in every container holding it: F and G also in IV
        // (stored 2) make IV fully used, so they are kept there.
        let (names, seg) = segment(&[("A", &[I]), ("F", &[II, IV]), ("G", &[II, IV])]);
        let mut ned = Ned::new(0.5, HashMap::from([(I, 5), (II, 5), (IV, 2)]));
        let d = ned.decide(&seg);
        assert_eq!(rewritten(&names, &d), ["A"]);
        assert_eq!(d[1], Some(IV));
        // A container sealed by this backup is known once sealed; before
        // that an unknown container counts as fully used.
        assert_eq!(ned_select(&seg, &HashMap::new(), 1.0), vec![I, II, IV]);
        ned.sealed(I, 1);
        assert_eq!(ned.decide(&seg)[0], Some(I));
    }

    #[test]
    fn har_trims_the_most_used_sparse_containers_to_the_limit() {
        // Sparse (< 50 of 100): 1, 2, 3 with 85 of the 285 bytes referenced.
        let used = HashMap::from([(I, 10), (II, 30), (III, 45), (IV, 100), (V, 100)]);
        assert_eq!(har_sparse(&used, 100, 0.5, 1.0), vec![I, II, III]);
        assert_eq!(har_sparse(&used, 100, 0.5, 0.3), vec![I, II, III]);
        // 57 allowed: drop 3 (45), leaving 40.
        assert_eq!(har_sparse(&used, 100, 0.5, 0.2), vec![I, II]);
        // 28.5 allowed: drop 3, then 2.
        assert_eq!(har_sparse(&used, 100, 0.5, 0.1), vec![I]);
        assert!(har_sparse(&used, 100, 0.5, 0.0).is_empty());
        assert!(har_sparse(&HashMap::new(), 100, 0.5, 0.05).is_empty());
    }

    #[test]
    fn parse_and_display_round_trip() {
        for s in [
            "none",
            "capping:20",
            "smr:5",
            "ned:0.5",
            "har:0.5",
            "har:0.7:0.01",
        ] {
            assert_eq!(RewriteSpec::parse(s).unwrap().to_string(), s);
        }
        assert_eq!(
            RewriteSpec::parse("har").unwrap(),
            RewriteSpec::Har {
                threshold: 0.5,
                limit: 0.05
            }
        );
        assert_eq!(
            RewriteSpec::parse("har:0.5:0.05").unwrap().to_string(),
            "har:0.5"
        );
        for bad in [
            "capping",
            "smr:0",
            "har:2",
            "har:0.5:2",
            "har:0.5:x",
            "ned",
            "ned:0",
            "ned:1.5",
            "lru:3",
            "none:1",
        ] {
            assert!(RewriteSpec::parse(bad).is_err(), "{bad}");
        }
    }
}
