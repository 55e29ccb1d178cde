//! Tar extraction of hostile streams: never panics, never hangs, and never
//! writes outside the target directory.
#![no_main]
use libfuzzer_sys::fuzz_target;
use std::path::Path;

fn count(dir: &Path) -> usize {
    std::fs::read_dir(dir).map(|d| d.count()).unwrap_or(0)
}

fuzz_target!(|data: &[u8]| {
    let outer = tempfile::tempdir().unwrap();
    let target = outer.path().join("target");
    let mut input = data;
    let _ = tessera_core::archive::extract(&mut input, &target);
    // Only the target itself may exist beside it.
    assert!(
        count(outer.path()) <= 1,
        "extraction wrote outside the target"
    );
    let _ = outer.close();
});
