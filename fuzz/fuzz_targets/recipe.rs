//! Recipe chunks: decode garbage without panicking; what decodes
//! re-encodes to the same bytes.
#![no_main]
use libfuzzer_sys::fuzz_target;
use tessera_core::recipe;

fuzz_target!(|data: &[u8]| {
    if let Ok(c) = recipe::decode(data, "fuzz") {
        assert_eq!(recipe::encode(c.level, &c.entries), data);
    }
});
