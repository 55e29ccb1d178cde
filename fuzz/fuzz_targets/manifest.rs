//! Manifest generations: decode garbage without panicking; what decodes
//! re-encodes to the same manifest.
#![no_main]
use libfuzzer_sys::fuzz_target;
use tessera_core::catalog::Manifest;

fuzz_target!(|data: &[u8]| {
    if let Ok(m) = Manifest::decode(data, "fuzz") {
        let again = Manifest::decode(&m.encode(), "fuzz").expect("re-encoded manifest decodes");
        assert_eq!(again, m);
    }
});
