//! Container objects. The checksums would stop a fuzzer at the door, so
//! unless the input's first byte says otherwise, the target first makes the
//! header's lengths agree with the input's size and the entries' lengths,
//! and recomputes all three checksums: the metadata entries (offsets,
//! stored and logical lengths, kinds, codecs) against the data section are
//! what gets explored. The first byte also picks the sealer (plain, or
//! encrypted under a fixed key, whose metadata then must not open).
//! Decoding must never panic, must never accept a chunk that lies outside
//! the data section, and opening each chunk (zstd, AEAD) must fail cleanly.
#![no_main]
use libfuzzer_sys::fuzz_target;
use tessera_core::container::format::{self, checksum, HEADER_LEN, META_ENTRY_LEN};
use tessera_core::container::open_chunk;
use tessera_core::seal::keys::MasterKey;
use tessera_core::seal::{CipherKind, Compression, Sealer};

fn repair(b: &mut Vec<u8>, sealed: bool) {
    if b.len() < HEADER_LEN {
        return;
    }
    b[0..8].copy_from_slice(&format::MAGIC);
    b[8..12].copy_from_slice(&format::VERSION.to_le_bytes());
    b[14] &= 1;
    b[15] = sealed as u8;
    b[16..24].copy_from_slice(&7u64.to_le_bytes());
    let overhead = if sealed { 40 } else { 0 };
    let rest = (b.len() - HEADER_LEN) as u64;
    let trace = b[14] != 0;
    let want = u32::from_le_bytes(b[24..28].try_into().unwrap()) as u64;
    let count = want.min(rest.saturating_sub(overhead) / META_ENTRY_LEN as u64);
    let meta_len = count * META_ENTRY_LEN as u64 + if rest >= overhead { overhead } else { 0 };
    let meta_len = meta_len.min(rest);
    let data_len = rest - meta_len;
    if trace {
        // Trace containers have no data section; drop any extra bytes.
        b.truncate(HEADER_LEN + meta_len as usize);
    }
    let data_len = if trace { 0 } else { data_len };
    // Logical length: what the (plain) entries say.
    let meta = &b[HEADER_LEN + data_len as usize..];
    let logical: u64 = meta
        .chunks_exact(META_ENTRY_LEN)
        .map(|e| u32::from_le_bytes(e[40..44].try_into().unwrap()) as u64)
        .sum();
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
}

fuzz_target!(|input: &[u8]| {
    let Some((&mode, rest)) = input.split_first() else {
        return;
    };
    let sealed = mode & 2 != 0;
    let sealer = if sealed {
        // Bit 3 picks the cipher (both share the sealed layout).
        let kind = if mode & 8 != 0 {
            CipherKind::Xchacha20Poly1305
        } else {
            CipherKind::Xaes256Gcm
        };
        Sealer::new(Some(MasterKey::from_bytes([7; 32]).cipher(kind)), Compression::Off)
    } else {
        Sealer::identity()
    };
    let mut data = rest.to_vec();
    if mode & 1 == 0 {
        repair(&mut data, sealed);
    }
    if let Ok(h) = format::decode_header(format::ContainerId(7), &data) {
        let _ = format::decode_meta(
            &h,
            data.get(h.meta_offset() as usize..).unwrap_or(&[]),
            &sealer,
        );
    }
    for decoded in [
        format::decode(format::ContainerId(7), &data, &sealer),
        format::decode_salvage(format::ContainerId(7), &data, &sealer),
    ] {
        if let Ok((h, metas)) = decoded {
            for m in metas {
                let end = m.stored_offset as u64 + m.stored_len as u64;
                assert!(
                    h.trace || end <= h.data_len,
                    "chunk outside the data section"
                );
                if !h.trace && m.len <= 1 << 24 {
                    let _ = open_chunk(&data, &m, &sealer);
                }
            }
        }
    }
});
