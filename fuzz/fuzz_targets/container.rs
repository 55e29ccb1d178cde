//! Container objects: header, metadata and whole-object decoding must reject
//! garbage with an error, never panic, and never accept a container whose
//! metadata points outside its data.
#![no_main]
use libfuzzer_sys::fuzz_target;
use tessera_core::container::format;

fuzz_target!(|data: &[u8]| {
    if let Ok(h) = format::decode_header(7, data) {
        let _ = format::decode_meta(&h, data.get(format::HEADER_LEN..).unwrap_or(&[]));
    }
    for decoded in [format::decode(7, data), format::decode_salvage(7, data)] {
        if let Ok((h, metas)) = decoded {
            for m in metas {
                let end = m.offset as u64 + m.len as u64;
                assert!(h.trace || end <= h.data_len, "chunk outside the data section");
            }
        }
    }
});
