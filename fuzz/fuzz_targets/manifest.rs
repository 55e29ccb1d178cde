//! Manifest generations. Unless byte 0 of the input is odd, the input is the
//! JSON body and the target wraps it in a valid envelope (magic, version,
//! length, checksum), so the fuzzer explores the catalog's validation rather
//! than the checksum. Nothing may panic; what decodes re-encodes to the same
//! manifest.
#![no_main]
use libfuzzer_sys::fuzz_target;
use tessera_core::catalog::{Manifest, VERSION};
use tessera_core::container::format::checksum;

fuzz_target!(|input: &[u8]| {
    let data = match input.split_first() {
        Some((flag, body)) if flag & 1 == 0 => {
            let mut b = b"TSRAMANI".to_vec();
            b.extend_from_slice(&VERSION.to_le_bytes());
            b.extend_from_slice(&(body.len() as u64).to_le_bytes());
            b.extend_from_slice(body);
            let sum = checksum(&b);
            b.extend_from_slice(&sum);
            b
        }
        _ => input.to_vec(),
    };
    if let Ok(m) = Manifest::decode(&data, "fuzz") {
        let again = Manifest::decode(&m.encode(), "fuzz").expect("re-encoded manifest decodes");
        assert_eq!(again, m);
    }
});
