//! Sealed whole objects (manifests, index segments) and the unsealed
//! config and key slots: what is read before anything is verified. Byte 0
//! picks the sealer (plain or encrypted under a fixed key; with or without
//! compression) and whether the input is first sealed properly (so the
//! zstd frame and length paths are reached) or opened as it is. Nothing may
//! panic; a properly sealed input opens to itself.
#![no_main]
use libfuzzer_sys::fuzz_target;
use tessera_core::backend::ObjectKey;
use tessera_core::seal::keys::{KeySlot, MasterKey};
use tessera_core::seal::{CipherKind, Compression, RepoSeal, Sealer};

fuzz_target!(|input: &[u8]| {
    let Some((&mode, body)) = input.split_first() else {
        return;
    };
    // Bit 3 picks the cipher (both share the sealed layout).
    let kind = if mode & 8 != 0 {
        CipherKind::Xchacha20Poly1305
    } else {
        CipherKind::Xaes256Gcm
    };
    let cipher = (mode & 1 != 0).then(|| MasterKey::from_bytes([3; 32]).cipher(kind));
    let compression = if mode & 2 != 0 {
        Compression::Auto
    } else {
        Compression::Off
    };
    let sealer = Sealer::new(cipher, compression);
    let key = ObjectKey::IndexSegment(5);
    if mode & 4 != 0 {
        let sealed = sealer.seal(&key, body.to_vec()).expect("sealing never fails");
        let opened = sealer
            .unseal(&key, sealed.into())
            .ok()
            .expect("a sealed object opens");
        assert_eq!(&*opened, body);
    } else {
        let _ = sealer.unseal(&key, body.to_vec().into());
    }
    let _ = RepoSeal::decode(body);
    let _ = KeySlot::decode(body, "keys/0000000000000001");
});
