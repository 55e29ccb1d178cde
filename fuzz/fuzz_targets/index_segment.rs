//! Index segments. Unless byte 0 is odd, the input after it is taken as the
//! entries and wrapped in a valid envelope (count, checksum). Nothing may
//! panic; what decodes re-encodes to the same bytes.
#![no_main]
use libfuzzer_sys::fuzz_target;
use tessera_core::container::format::checksum;
use tessera_core::index::{decode_segment, encode_segment};

fuzz_target!(|input: &[u8]| {
    let data = match input.split_first() {
        Some((flag, body)) if flag & 1 == 0 => {
            let mut b = b"TSRAINDX".to_vec();
            b.extend_from_slice(&1u32.to_le_bytes());
            b.extend_from_slice(&((body.len() / 48) as u64).to_le_bytes());
            b.extend_from_slice(body);
            let sum = checksum(&b);
            b.extend_from_slice(&sum);
            b
        }
        _ => input.to_vec(),
    };
    if let Ok(entries) = decode_segment(&data, "fuzz") {
        assert_eq!(encode_segment(&entries), data);
    }
});
