//! Recipe chunks and the recipe walk. The input is split on the separator
//! `|||` into candidate recipe chunks; each must decode or fail cleanly (and
//! re-encode to itself), and then a walk of the tree rooted at the first one,
//! fetching the others by fingerprint, must end or fail cleanly on any
//! hostile structure: wrong levels, sizes that do not add up or overflow,
//! missing children.
#![no_main]
use libfuzzer_sys::fuzz_target;
use std::collections::HashMap;
use tessera_core::recipe::{self, RecipeWalker};
use tessera_core::{Error, HashAlgo};

fuzz_target!(|input: &[u8]| {
    let parts: Vec<&[u8]> = input
        .split(|&b| b == b'|')
        .filter(|p| !p.is_empty())
        .collect();
    let mut store = HashMap::new();
    for p in &parts {
        if let Ok(c) = recipe::decode(p, "fuzz") {
            assert_eq!(recipe::encode(c.level, &c.entries), *p);
        }
        store.insert(HashAlgo::Blake3.hash(p), p.to_vec());
    }
    let Some(root) = parts.first() else { return };
    let Ok(chunk) = recipe::decode(root, "fuzz") else {
        return;
    };
    let fetch = |fp: &tessera_core::Fingerprint, _level: u8| -> tessera_core::Result<_> {
        let bytes = store
            .get(fp)
            .ok_or_else(|| Error::MissingObject("chunk".into()))?;
        recipe::decode(bytes, "fuzz")
    };
    if let Ok(mut w) = RecipeWalker::new(HashAlgo::Blake3.hash(root), chunk.level, fetch) {
        for _ in 0..100_000 {
            match w.next() {
                Ok(Some(_)) => {}
                _ => break,
            }
        }
    }
});
