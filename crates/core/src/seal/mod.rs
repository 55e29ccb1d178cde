//! The sealing layer: between the engine's objects and the object store.
//!
//! Every object the engine reads or writes passes through a [`SealedStore`],
//! whose [`Sealer`] compresses ([`zstd`]) and, in an encrypted repository,
//! encrypts ([`aead`]) it:
//!
//! - **Whole objects** (manifest generations, index segments) are framed
//!   `mode u8 | …`: mode 0 is `0 | codec u8 | plain_len u64 | body`; mode 1
//!   is `1 | nonce | AEAD(codec | plain_len | body) | tag` with the object's
//!   name (hence its kind and number) as associated data, so a sealed object
//!   cannot be swapped for another or replayed under another generation's
//!   name. Compression runs before encryption.
//! - **Containers** are not sealed whole: a restore reads one container's
//!   chunks and GC copies live chunks into a new container, and neither
//!   should decrypt and re-encrypt. Each chunk is compressed and sealed on
//!   its own ([`Sealer::seal_chunk`]) with its kind, codec and fingerprint
//!   as associated data (not the container id, so copy-forward moves sealed
//!   bytes as they are); the container's metadata section is sealed whole
//!   with the container's name and header as associated data (see
//!   `container::format`).
//! - **Unsealed**: the lock (read by `tessera unlock` and a refused writer
//!   before any key; it holds nothing secret), the repository's
//!   [`config`](RepoSeal) (format version, encryption, default compression:
//!   read first, before any key) and the [key slots](keys::KeySlot).
//!
//! Trace mode is unaffected: data containers hold no bytes to seal.

pub mod aead;
pub mod keys;
pub mod zstd;

use crate::backend::{ObjectBytes, ObjectStore};
use crate::error::{Error, ObjectRef, Result};
use crate::fingerprint::Fingerprint;
use crate::ids::{ChunkKind, ContainerId};
use crate::object_key::{KeyKind, ObjectKey};
use aead::Cipher;
pub use aead::CipherKind;
use serde::{Deserialize, Serialize};
use std::cell::RefCell;
use std::sync::Arc;
pub use zstd::{Codec, Compression};

/// Whether stored objects are encrypted, and with which AEAD.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Encryption {
    #[default]
    None,
    /// XAES-256-GCM under a random master key (Argon2id key slots): the
    /// default (hardware AES).
    #[serde(rename = "xaes-256-gcm")]
    Xaes256Gcm,
    /// XChaCha20-Poly1305 under a random master key: for CPUs without AES
    /// instructions.
    Xchacha20Poly1305,
}

impl Encryption {
    pub fn is_encrypted(self) -> bool {
        self != Encryption::None
    }
    pub fn name(self) -> &'static str {
        match self.cipher() {
            None => "none",
            Some(kind) => kind.name(),
        }
    }
    /// The object cipher, when encrypted.
    pub fn cipher(self) -> Option<CipherKind> {
        match self {
            Encryption::None => None,
            Encryption::Xaes256Gcm => Some(CipherKind::Xaes256Gcm),
            Encryption::Xchacha20Poly1305 => Some(CipherKind::Xchacha20Poly1305),
        }
    }
    pub fn from_cipher(kind: Option<CipherKind>) -> Self {
        match kind {
            None => Encryption::None,
            Some(CipherKind::Xaes256Gcm) => Encryption::Xaes256Gcm,
            Some(CipherKind::Xchacha20Poly1305) => Encryption::Xchacha20Poly1305,
        }
    }
}

impl std::fmt::Display for Encryption {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Encryption {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "none" | "off" => Ok(Encryption::None),
            "xaes-256-gcm" | "xaes" | "aes" | "on" | "default" => Ok(Encryption::Xaes256Gcm),
            "xchacha20-poly1305" | "xchacha20" | "chacha" => Ok(Encryption::Xchacha20Poly1305),
            _ => Err(format!(
                "unknown encryption '{s}' (expected xaes-256-gcm, xchacha20-poly1305 or none)"
            )),
        }
    }
}

/// The repository's unsealed `config` object: what must be known before
/// any other object can be read.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RepoSeal {
    /// The repository format version (`crate::version::VERSION`).
    pub version: u32,
    pub repo_id: String,
    pub encryption: Encryption,
    /// Default compression of new chunks (`--compression` overrides it per
    /// backup); metadata objects are compressed unless this is `off`.
    pub compression: Compression,
}

impl RepoSeal {
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec_pretty(self).expect("config serializes")
    }
    pub fn decode(b: &[u8]) -> Result<RepoSeal> {
        // The version first, so a future config with other fields still
        // reports its version rather than a parse error.
        #[derive(Deserialize)]
        struct Versioned {
            version: u32,
        }
        let name = || ObjectRef::Object(ObjectKey::Config);
        let v: Versioned = serde_json::from_slice(b)
            .map_err(|e| Error::corrupt(name(), format!("unreadable: {e}")))?;
        if v.version != crate::version::VERSION {
            return Err(Error::UnsupportedVersion {
                object: name().into(),
                found: v.version,
                supported: crate::version::VERSION,
            });
        }
        serde_json::from_slice(b).map_err(|e| Error::corrupt(name(), format!("unreadable: {e}")))
    }
}

/// Turns plain object bytes into stored bytes and back: compression, then
/// (when keyed) authenticated encryption.
#[derive(Clone, Default)]
pub struct Sealer {
    cipher: Option<Cipher>,
    /// The repository's default compression.
    compression: Compression,
}

const AD_OBJECT: &[u8] = b"tessera object\0";
const AD_CHUNK: &[u8] = b"tessera chunk\0";
const AD_META: &[u8] = b"tessera container metadata\0";
/// `mode | codec | plain_len`.
const FRAME_LEN: usize = 10;
const MODE_PLAIN: u8 = 0;
const MODE_SEALED: u8 = 1;

thread_local! {
    /// Decrypted compressed chunks, before decompression.
    static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

impl Sealer {
    /// No encryption, no compression.
    pub fn identity() -> Self {
        Sealer::default()
    }

    pub fn new(cipher: Option<Cipher>, compression: Compression) -> Self {
        Sealer {
            cipher,
            compression,
        }
    }

    /// Short name for reports.
    pub fn name(&self) -> String {
        format!(
            "compression {} + encryption {}",
            self.compression,
            self.encryption()
        )
    }

    pub fn encryption(&self) -> Encryption {
        Encryption::from_cipher(self.cipher.as_ref().map(Cipher::kind))
    }

    pub fn encrypted(&self) -> bool {
        self.cipher.is_some()
    }

    pub fn compression(&self) -> Compression {
        self.compression
    }

    /// Bytes sealing adds to each chunk and metadata section.
    pub fn overhead(&self) -> usize {
        if self.encrypted() {
            aead::OVERHEAD
        } else {
            0
        }
    }

    /// Seal a whole object stored under `key`.
    pub fn seal(&self, key: &ObjectKey, plain: Vec<u8>) -> Result<Vec<u8>> {
        if self.compression.for_metadata().level().is_none() {
            return Ok(self.seal_uncompressed(key, plain));
        }
        let mut out = Vec::with_capacity(plain.len() / 2 + FRAME_LEN + aead::OVERHEAD);
        out.push(if self.encrypted() {
            MODE_SEALED
        } else {
            MODE_PLAIN
        });
        let start = out.len();
        out.push(0);
        out.extend_from_slice(&(plain.len() as u64).to_le_bytes());
        let codec = self
            .compression
            .for_metadata()
            .compress_into(&plain, &mut out);
        out[start] = codec.code();
        if let Some(c) = &self.cipher {
            c.seal_tail(&object_ad(key), &mut out, start);
        }
        Ok(out)
    }

    /// [`seal`](Self::seal) without compression: the object is built in
    /// `plain`'s own allocation (the bytes moved up past the frame header
    /// and the nonce, one memmove) instead of a second buffer of the same
    /// size. A compacted index segment is hundreds of MB; its copy was a
    /// third of the transient memory at the end of a trace run.
    fn seal_uncompressed(&self, key: &ObjectKey, mut buf: Vec<u8>) -> Vec<u8> {
        let n = buf.len();
        let nonce = if self.encrypted() { aead::NONCE_LEN } else { 0 };
        let head = FRAME_LEN + nonce;
        buf.reserve_exact(head + self.overhead() - nonce);
        buf.resize(n + head, 0);
        buf.copy_within(..n, head);
        buf[0] = if self.encrypted() {
            MODE_SEALED
        } else {
            MODE_PLAIN
        };
        // `mode | nonce | codec | plain_len | plain`, what `seal_tail`
        // makes of `mode | codec | plain_len | plain`.
        buf[1 + nonce] = Codec::Raw.code();
        buf[2 + nonce..head].copy_from_slice(&(n as u64).to_le_bytes());
        if let Some(c) = &self.cipher {
            c.seal_reserved(&object_ad(key), &mut buf, 1);
        }
        buf
    }

    /// Open a whole object read from `key`; a tampered, truncated, moved or
    /// foreign object is `Error::Corrupt` naming it.
    pub fn unseal(&self, key: &ObjectKey, sealed: ObjectBytes) -> Result<ObjectBytes> {
        let bad = |why: String| Error::corrupt(ObjectRef::Object(key.clone()), why);
        let mode = *sealed.first().ok_or_else(|| bad("empty object".into()))?;
        // A raw object is handed out as a view past its frame header: a
        // segment of hundreds of MB is not copied again.
        let framed: ObjectBytes = match (mode, &self.cipher) {
            (MODE_PLAIN, None) => sealed.skip(1),
            (MODE_SEALED, Some(c)) => c
                .open(&object_ad(key), &sealed[1..])
                .map_err(|_| {
                    bad("does not authenticate (tampered, truncated, moved from another name, or sealed with another key)".into())
                })?
                .into(),
            (MODE_SEALED, None) => {
                return Err(bad(
                    "is encrypted, but the repository config says it is not".into(),
                ))
            }
            (MODE_PLAIN, Some(_)) => {
                return Err(bad(
                    "is not encrypted in an encrypted repository (planted or downgraded)".into(),
                ))
            }
            (m, _) => return Err(bad(format!("unknown sealing mode {m}"))),
        };
        if framed.len() < FRAME_LEN - 1 {
            return Err(bad("truncated object frame".into()));
        }
        let len = u64::from_le_bytes(framed[1..9].try_into().unwrap());
        let body_len = framed.len() - 9;
        match Codec::from_code(framed[0]) {
            Some(Codec::Raw) if body_len as u64 == len => Ok(framed.skip(9)),
            Some(Codec::Raw) => Err(bad(format!(
                "object is {body_len} bytes, its frame says {len}"
            ))),
            Some(Codec::Zstd) => {
                if len > 1 << 34 {
                    return Err(bad(format!("implausible object size {len}")));
                }
                let mut out = vec![0u8; len as usize];
                zstd::decompress_exact(&framed[9..], &mut out).map_err(bad)?;
                Ok(out.into())
            }
            None => Err(bad(format!("unknown codec {}", framed[0]))),
        }
    }

    /// Append one chunk, compressed with `compression` when that pays and
    /// sealed, to `out`: a frame of one chunk ([`seal_frame`](Self::seal_frame)).
    pub fn seal_chunk(
        &self,
        kind: ChunkKind,
        fp: &Fingerprint,
        plain: &[u8],
        compression: Compression,
        out: &mut Vec<u8>,
    ) -> Codec {
        self.seal_frame(kind, std::slice::from_ref(fp), plain, compression, out)
    }

    /// Append one frame — the plain bytes of consecutive chunks `fps`, back
    /// to back — compressed with `compression` when that pays and sealed,
    /// to `out`. Returns the codec to record in the frame's entries. The
    /// seal binds the kind, the codec and every fingerprint in order, so a
    /// frame cannot be moved under other entries.
    pub fn seal_frame(
        &self,
        kind: ChunkKind,
        fps: &[Fingerprint],
        plain: &[u8],
        compression: Compression,
        out: &mut Vec<u8>,
    ) -> Codec {
        let start = out.len();
        if self.cipher.is_some() {
            out.resize(start + aead::NONCE_LEN, 0);
        }
        let codec = compression.compress_into(plain, out);
        if let Some(c) = &self.cipher {
            c.seal_reserved(&frame_ad(kind, codec, fps), out, start);
        }
        codec
    }

    /// Open one stored chunk (a frame of one) into `out`.
    pub fn unseal_chunk(
        &self,
        kind: ChunkKind,
        fp: &Fingerprint,
        codec: Codec,
        stored: &[u8],
        out: &mut [u8],
    ) -> std::result::Result<(), String> {
        self.unseal_frame(kind, std::slice::from_ref(fp), codec, stored, out)
    }

    /// Open one stored frame of chunks `fps` into `out` (exactly its plain
    /// length). `Err` says why, for the caller to name the container and
    /// chunk.
    pub fn unseal_frame(
        &self,
        kind: ChunkKind,
        fps: &[Fingerprint],
        codec: Codec,
        stored: &[u8],
        out: &mut [u8],
    ) -> std::result::Result<(), String> {
        const UNAUTHENTIC: &str =
            "does not authenticate (tampered, moved, or sealed with another key)";
        match (&self.cipher, codec) {
            (None, Codec::Raw) if stored.len() == out.len() => {
                out.copy_from_slice(stored);
                Ok(())
            }
            (None, Codec::Raw) => Err("stored length differs from its length".into()),
            (None, Codec::Zstd) => zstd::decompress_exact(stored, out),
            (Some(c), Codec::Raw) => c
                .open_into(&frame_ad(kind, codec, fps), stored, out)
                .map_err(|_| UNAUTHENTIC.into()),
            (Some(c), Codec::Zstd) => SCRATCH.with(|s| {
                let mut s = s.borrow_mut();
                let n = stored
                    .len()
                    .checked_sub(aead::OVERHEAD)
                    .ok_or(UNAUTHENTIC)?;
                // Only resized: every byte is overwritten by the copy of
                // the sealed bytes that opening starts with.
                s.resize(n, 0);
                c.open_into(&frame_ad(kind, codec, fps), stored, &mut s)
                    .map_err(|_| UNAUTHENTIC)?;
                zstd::decompress_exact(&s, out)
            }),
        }
    }

    /// Seal a container's metadata section; `ad` names the container and
    /// carries its header (see `container::format`).
    pub fn seal_meta(&self, ad: &[u8], out: &mut Vec<u8>, start: usize) {
        if let Some(c) = &self.cipher {
            let mut full = AD_META.to_vec();
            full.extend_from_slice(ad);
            c.seal_tail(&full, out, start);
        }
    }

    /// Open a container's metadata section.
    pub fn unseal_meta<'a>(
        &self,
        ad: &[u8],
        sealed: &'a [u8],
    ) -> std::result::Result<std::borrow::Cow<'a, [u8]>, String> {
        match &self.cipher {
            None => Ok(sealed.into()),
            Some(c) => {
                let mut full = AD_META.to_vec();
                full.extend_from_slice(ad);
                c.open(&full, sealed)
                    .map(Into::into)
                    .map_err(|_| "metadata does not authenticate (tampered, moved from another container, or sealed with another key)".into())
            }
        }
    }
}

fn object_ad(key: &ObjectKey) -> Vec<u8> {
    let mut ad = AD_OBJECT.to_vec();
    ad.extend_from_slice(key.name().as_bytes());
    ad
}

/// A frame's associated data: its kind, codec and fingerprints in order
/// (for a frame of one chunk, the same bytes format 8 bound a chunk to).
fn frame_ad(kind: ChunkKind, codec: Codec, fps: &[Fingerprint]) -> Vec<u8> {
    let mut ad = Vec::with_capacity(AD_CHUNK.len() + 2 + 32 * fps.len());
    ad.extend_from_slice(AD_CHUNK);
    ad.push((kind == ChunkKind::Recipe) as u8);
    ad.push(codec.code());
    for fp in fps {
        ad.extend_from_slice(&fp.0);
    }
    ad
}

/// An object store seen through a sealer: the only way the engine reads and
/// writes objects (the lock, config and key slots excepted, see the module
/// doc).
#[derive(Clone)]
pub struct SealedStore {
    store: Arc<dyn ObjectStore>,
    sealer: Arc<Sealer>,
}

impl SealedStore {
    pub fn new(store: Arc<dyn ObjectStore>, sealer: Arc<Sealer>) -> Self {
        SealedStore { store, sealer }
    }

    /// Through the identity sealer (no compression, no encryption).
    pub fn plain(store: Arc<dyn ObjectStore>) -> Self {
        Self::new(store, Arc::new(Sealer::identity()))
    }

    /// The store underneath (for the lock, and for listing and deleting,
    /// which see names only).
    pub fn store(&self) -> &Arc<dyn ObjectStore> {
        &self.store
    }

    pub fn sealer(&self) -> &Arc<Sealer> {
        &self.sealer
    }

    /// Seal and put a whole object (a manifest generation, an index segment).
    pub fn put(&self, key: &ObjectKey, plain: Vec<u8>) -> Result<()> {
        let sealed = self.sealer.seal(key, plain)?;
        self.store.put_owned(key, sealed)
    }

    /// Seal and create a whole object only if no object has its key (how a
    /// manifest generation is published); false if one exists.
    pub fn put_if_absent(&self, key: &ObjectKey, plain: Vec<u8>) -> Result<bool> {
        let sealed = self.sealer.seal(key, plain)?;
        self.store.put_if_absent(key, &sealed)
    }

    /// Get and open a whole object.
    pub fn get(&self, key: &ObjectKey) -> Result<ObjectBytes> {
        let sealed = self.store.get_whole(key, Vec::new())?;
        self.sealer.unseal(key, sealed)
    }

    /// Put a container object, framed by the container codec (whose chunks
    /// and metadata are sealed piecewise, see the module doc).
    pub fn put_container(&self, id: ContainerId, object: &[u8]) -> Result<()> {
        self.store
            .put(&ObjectKey::Container(id), object)
            .map_err(|e| e.about(ObjectRef::Object(ObjectKey::Container(id))))
    }

    /// Read a whole container object into `reuse` (or however the store
    /// serves it cheapest). Errors name the container.
    pub fn get_container(&self, id: ContainerId, reuse: Vec<u8>) -> Result<ObjectBytes> {
        self.store
            .get_whole(&ObjectKey::Container(id), reuse)
            .map_err(|e| e.about(ObjectRef::Object(ObjectKey::Container(id))))
    }

    /// Start reading a container object soon to be read
    /// ([`ObjectStore::prefetch`]).
    pub fn prefetch_container(&self, id: ContainerId) {
        self.store.prefetch(&ObjectKey::Container(id));
    }

    /// Read `len` bytes at `offset` of a container object. Errors name the
    /// container.
    pub fn get_container_range(&self, id: ContainerId, offset: u64, len: u64) -> Result<Vec<u8>> {
        self.store
            .get_range(&ObjectKey::Container(id), offset, len)
            .map_err(|e| e.about(ObjectRef::Object(ObjectKey::Container(id))))
    }

    pub fn list(&self, kind: KeyKind) -> Result<Vec<ObjectKey>> {
        self.store.list(kind)
    }

    pub fn delete(&self, key: &ObjectKey) -> Result<()> {
        self.store.delete(key)
    }

    pub fn barrier(&self) -> Result<()> {
        self.store.barrier()
    }

    pub fn location(&self) -> String {
        self.store.location()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{Generation, MemoryStore};

    fn sealers() -> Vec<Sealer> {
        let key = keys::MasterKey::from_bytes([9; 32]);
        let mut out = Vec::new();
        for c in Compression::NAMED {
            out.push(Sealer::new(None, c));
            for kind in CipherKind::ALL {
                out.push(Sealer::new(Some(key.cipher(kind)), c));
            }
        }
        out
    }

    #[test]
    fn whole_objects_round_trip_and_name_objects_in_errors() {
        let plain: Vec<u8> = (0..20_000u32)
            .flat_map(|i| (i % 100).to_le_bytes())
            .collect();
        for s in sealers() {
            let mem = Arc::new(MemoryStore::new());
            let store = SealedStore::new(mem.clone(), Arc::new(s.clone()));
            let key = ObjectKey::IndexSegment(7);
            store.put(&key, plain.clone()).unwrap();
            assert_eq!(&*store.get(&key).unwrap(), &plain[..], "{}", s.name());
            let stored = mem.get(&key).unwrap();
            if s.compression() != Compression::Off {
                assert!(stored.len() < plain.len() / 4, "{}", s.name());
            }
            // Moved under another name: refused when encrypted.
            let other = ObjectKey::IndexSegment(8);
            mem.put(&other, &stored).unwrap();
            assert_eq!(store.get(&other).is_err(), s.encrypted());
            // Every flipped byte of an encrypted object is refused.
            if s.encrypted() {
                for i in (0..stored.len()).step_by(7) {
                    let mut bad = stored.clone();
                    bad[i] ^= 4;
                    mem.put(&key, &bad).unwrap();
                    let err = store.get(&key).err().unwrap();
                    assert!(
                        err.to_string()
                            .contains("index segment index/0000000000000007"),
                        "{err}"
                    );
                }
                mem.put(&key, &stored[..stored.len() - 1]).unwrap();
                assert!(store.get(&key).is_err());
            }
        }
        let missing = ObjectKey::Manifest(Generation(3));
        let s = SealedStore::plain(Arc::new(MemoryStore::new()));
        let err = s.get(&missing).err().unwrap();
        assert!(matches!(err, Error::MissingObject(_)));
        assert_eq!(err.to_string(), "missing object manifests/0000000000000003");
        let err = s.get_container_range(ContainerId(9), 0, 1).unwrap_err();
        assert_eq!(err.to_string(), "missing object container 0000000000000009");
    }

    /// Without compression a whole object is sealed in the plain bytes'
    /// own buffer (no second buffer of its size): the frame header in
    /// front of the bytes, the same object the copying path builds, and
    /// encrypted objects open again.
    #[test]
    fn uncompressed_objects_are_sealed_in_place() {
        let key = ObjectKey::IndexSegment(3);
        let plain: Vec<u8> = (0..100_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let s = Sealer::new(None, Compression::Off);
        let mut buf = Vec::with_capacity(plain.len() + 64);
        buf.extend_from_slice(&plain);
        let at = buf.as_ptr();
        let sealed = s.seal(&key, buf).unwrap();
        assert_eq!(sealed.as_ptr(), at, "sealed where the plain bytes were");
        let mut want = vec![MODE_PLAIN, Codec::Raw.code()];
        want.extend_from_slice(&(plain.len() as u64).to_le_bytes());
        want.extend_from_slice(&plain);
        assert!(sealed == want);
        let k = keys::MasterKey::from_bytes([3; 32]);
        for kind in CipherKind::ALL {
            let s = Sealer::new(Some(k.cipher(kind)), Compression::Off);
            let sealed = s.seal(&key, plain.clone()).unwrap();
            assert_eq!(sealed.len(), plain.len() + FRAME_LEN + aead::OVERHEAD);
            assert_eq!(sealed[0], MODE_SEALED);
            let opened = s.unseal(&key, sealed.clone().into()).unwrap();
            assert!(*opened == plain[..], "{kind:?}");
            let other = ObjectKey::IndexSegment(4);
            assert!(s.unseal(&other, sealed.into()).is_err(), "{kind:?}");
        }
    }

    /// A large raw object of a local store (an index segment) is handed
    /// out as the store's mapping past the frame header, not a copy; a
    /// frame whose length disagrees is still refused.
    #[test]
    fn a_raw_object_is_a_view_of_what_was_read() {
        let dir = tempfile::tempdir().unwrap();
        let local = Arc::new(crate::backend::LocalStore::create(&dir.path().join("r")).unwrap());
        let store = SealedStore::plain(local.clone());
        let plain: Vec<u8> = (0..(3u32 << 20)).map(|i| (i % 251) as u8).collect();
        let key = ObjectKey::IndexSegment(3);
        store.put(&key, plain.clone()).unwrap();
        let got = store.get(&key).unwrap();
        assert!(got.is_mapped(), "copied out of the mapping");
        assert!(*got == plain[..]);
        let small = ObjectKey::IndexSegment(4);
        store.put(&small, b"tiny".to_vec()).unwrap();
        assert_eq!(&*store.get(&small).unwrap(), b"tiny");
        let mut stored = local.get(&key).unwrap();
        stored.pop();
        local.put(&key, &stored).unwrap();
        let err = store.get(&key).err().unwrap().to_string();
        assert!(err.contains("its frame says"), "{err}");
    }

    #[test]
    fn chunks_round_trip_and_bind_kind_and_fingerprint() {
        let plain =
            b"abcabcabcabcabcabcabcabcabcabcabcabcabcabcabcabcabcabcabcabcabcabcabcabc".repeat(50);
        let fp = crate::HashAlgo::Blake3.hash(&plain);
        for s in sealers() {
            for c in Compression::NAMED {
                let mut out = b"x".to_vec();
                let codec = s.seal_chunk(ChunkKind::Data, &fp, &plain, c, &mut out);
                let mut back = vec![0u8; plain.len()];
                s.unseal_chunk(ChunkKind::Data, &fp, codec, &out[1..], &mut back)
                    .unwrap();
                assert_eq!(back, plain);
                if s.encrypted() {
                    assert!(s
                        .unseal_chunk(ChunkKind::Recipe, &fp, codec, &out[1..], &mut back)
                        .is_err());
                    let other = crate::HashAlgo::Blake3.hash(b"other");
                    assert!(s
                        .unseal_chunk(ChunkKind::Data, &other, codec, &out[1..], &mut back)
                        .is_err());
                }
            }
        }
    }

    #[test]
    fn mixed_modes_are_refused() {
        let key = keys::MasterKey::from_bytes([9; 32]);
        let enc = Sealer::new(Some(key.cipher(CipherKind::Xaes256Gcm)), Compression::Auto);
        let plain = Sealer::identity();
        let k = ObjectKey::Manifest(Generation(2));
        let sealed = enc.seal(&k, b"manifest".to_vec()).unwrap();
        let err = plain.unseal(&k, sealed.into()).err().unwrap().to_string();
        assert!(err.contains("is encrypted"), "{err}");
        let unsealed = plain.seal(&k, b"manifest".to_vec()).unwrap();
        let err = enc.unseal(&k, unsealed.into()).err().unwrap().to_string();
        assert!(err.contains("not encrypted"), "{err}");
    }
}
