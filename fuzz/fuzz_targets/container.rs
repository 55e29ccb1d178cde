//! Container objects. The checksums would stop a fuzzer at the door, so
//! unless the input's byte 15 says otherwise, the target first makes the
//! header's lengths agree with the input's size and recomputes all three
//! checksums: the metadata entries (offsets, lengths, kinds) against the data
//! section are what gets explored. Decoding must never panic, and must never
//! accept a chunk that lies outside the data section.
#![no_main]
use libfuzzer_sys::fuzz_target;
use tessera_core::container::format::{self, checksum, HEADER_LEN, META_ENTRY_LEN};

fn repair(input: &[u8]) -> Vec<u8> {
    let mut b = input.to_vec();
    if b.len() < HEADER_LEN || b[15] & 1 == 1 {
        return b;
    }
    b[0..8].copy_from_slice(&format::MAGIC);
    b[8..12].copy_from_slice(&format::VERSION.to_le_bytes());
    b[16..24].copy_from_slice(&7u64.to_le_bytes());
    let rest = (b.len() - HEADER_LEN) as u64;
    let trace = b[14] != 0;
    let want = u32::from_le_bytes(b[24..28].try_into().unwrap()) as u64;
    let count = want.min(rest / META_ENTRY_LEN as u64);
    let meta_len = count * META_ENTRY_LEN as u64;
    let data_len = rest - meta_len;
    let (data_len, logical) = if trace {
        // Trace containers have no data section; drop any extra bytes.
        b.truncate(HEADER_LEN + meta_len as usize);
        let logical = u64::from_le_bytes(b[40..48].try_into().unwrap());
        (0, logical)
    } else {
        (data_len, data_len)
    };
    b[24..28].copy_from_slice(&(count as u32).to_le_bytes());
    b[32..40].copy_from_slice(&data_len.to_le_bytes());
    b[40..48].copy_from_slice(&logical.to_le_bytes());
    b[48..56].copy_from_slice(&(HEADER_LEN as u64 + data_len).to_le_bytes());
    b[56..64].copy_from_slice(&meta_len.to_le_bytes());
    let d = checksum(&b[HEADER_LEN..HEADER_LEN + data_len as usize]);
    let m = checksum(&b[HEADER_LEN + data_len as usize..]);
    b[64..80].copy_from_slice(&d);
    b[80..96].copy_from_slice(&m);
    let h = checksum(&b[..112]);
    b[112..128].copy_from_slice(&h);
    b
}

fuzz_target!(|input: &[u8]| {
    let data = repair(input);
    if let Ok(h) = format::decode_header(format::ContainerId(7), &data) {
        let _ = format::decode_meta(&h, data.get(h.meta_offset() as usize..).unwrap_or(&[]));
    }
    for decoded in [
        format::decode(format::ContainerId(7), &data),
        format::decode_salvage(format::ContainerId(7), &data),
    ] {
        if let Ok((h, metas)) = decoded {
            for m in metas {
                let end = m.offset as u64 + m.len as u64;
                assert!(
                    h.trace || end <= h.data_len,
                    "chunk outside the data section"
                );
            }
        }
    }
});
