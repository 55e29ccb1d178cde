//! Index segments: decode garbage without panicking; what decodes
//! re-encodes to the same bytes.
#![no_main]
use libfuzzer_sys::fuzz_target;
use tessera_core::index::{decode_segment, encode_segment};

fuzz_target!(|data: &[u8]| {
    if let Ok(entries) = decode_segment(data, "fuzz") {
        assert_eq!(encode_segment(&entries), data);
    }
});
