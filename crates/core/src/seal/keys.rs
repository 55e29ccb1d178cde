//! Key material: the master key, the passwords that unlock it, and the key
//! slots that hold it wrapped.
//!
//! A repository has one random 32-byte master key. Two subkeys are derived
//! from it with BLAKE3's key derivation: one keys the object cipher, one
//! keys the chunk fingerprints. Each key slot (`keys/<id>`, unsealed JSON)
//! holds the master key sealed with a key-encryption key derived from a
//! password by Argon2id with the slot's own salt and parameters, so slots
//! can be added and removed without touching any other object, and every
//! password opens the same repository.
//!
//! Key material lives in [`Zeroizing`] buffers (wiped on drop) and has no
//! `Debug` that prints it.

pub use super::aead::random;
use super::aead::{Cipher, CipherKind};
use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use std::fmt;
use zeroize::Zeroizing;

/// Key slots wrap the master key with XChaCha20-Poly1305 whatever the
/// repository's object cipher: a slot is read before the config's cipher
/// matters, and one random nonce per slot is all it needs.
const SLOT_CIPHER: CipherKind = CipherKind::Xchacha20Poly1305;

/// A password, wiped on drop, never printed.
#[derive(Clone)]
pub struct Password(Zeroizing<Vec<u8>>);

impl Password {
    pub fn new(bytes: impl Into<Vec<u8>>) -> Self {
        Password(Zeroizing::new(bytes.into()))
    }
    pub fn bytes(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for Password {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Password(…)")
    }
}

/// Argon2id cost parameters, stored in each key slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KdfParams {
    /// Memory in KiB.
    pub m_kib: u32,
    /// Passes.
    pub t: u32,
    /// Lanes.
    pub p: u32,
}

impl Default for KdfParams {
    /// 64 MiB, 3 passes, 4 lanes: RFC 9106's second recommendation. The
    /// lanes are computed on parallel threads, so every command that opens
    /// an encrypted repository waits for the derivation on all cores
    /// rather than one (the same memory and passes as the 1-lane default
    /// before it; key slots keep the parameters they were made with).
    fn default() -> Self {
        KdfParams {
            m_kib: 64 * 1024,
            t: 3,
            p: 4,
        }
    }
}

impl KdfParams {
    /// The smallest Argon2id allows: for tests only.
    pub const INSECURE_FAST: KdfParams = KdfParams {
        m_kib: 8,
        t: 1,
        p: 1,
    };

    /// Derive a 32-byte key-encryption key from `password` and `salt`.
    pub fn derive(&self, password: &Password, salt: &[u8]) -> Result<Zeroizing<[u8; 32]>> {
        let params = argon2::Params::new(self.m_kib, self.t, self.p, Some(32))
            .map_err(|e| Error::invalid(format!("bad key derivation parameters: {e}")))?;
        let blocks = params.block_count();
        let argon =
            argon2::Argon2::new(argon2::Algorithm::Argon2id, argon2::Version::V0x13, params);
        let mut out = Zeroizing::new([0u8; 32]);
        // The derivation's memory (64 MiB by default) on transparent huge
        // pages, where the kernel grants them: the crate's own allocation
        // takes one fault per 4 KiB page (a quarter of the derivation's
        // time on the reference VM), and its data-dependent passes miss
        // the TLB on nearly every block. Same bytes, same result; freed
        // unwiped on return, as the crate's own allocation is.
        let mut memory = crate::zerobuf::ZeroBuf::<argon2::Block>::zeroed(blocks);
        argon
            .hash_password_into_with_memory(
                password.bytes(),
                salt,
                &mut out[..],
                memory.as_mut_slice(),
            )
            .map_err(|e| Error::invalid(format!("key derivation failed: {e}")))?;
        Ok(out)
    }
}

impl std::str::FromStr for KdfParams {
    type Err = String;
    /// `m=65536,t=3,p=4` (memory in KiB); missing fields keep the default.
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        let mut k = KdfParams::default();
        for part in s.split(',').filter(|p| !p.is_empty()) {
            let (name, v) = part
                .split_once('=')
                .ok_or_else(|| format!("bad KDF parameter '{part}' (expected m=KiB,t=N,p=N)"))?;
            let v: u32 = v
                .parse()
                .map_err(|_| format!("bad KDF parameter value '{part}'"))?;
            match name.trim() {
                "m" => k.m_kib = v,
                "t" => k.t = v,
                "p" => k.p = v,
                _ => {
                    return Err(format!(
                        "unknown KDF parameter '{name}' (expected m, t or p)"
                    ))
                }
            }
        }
        argon2::Params::new(k.m_kib, k.t, k.p, Some(32))
            .map_err(|e| format!("bad KDF parameters '{s}': {e}"))?;
        Ok(k)
    }
}

/// The repository's master key, and the subkeys derived from it.
pub struct MasterKey(Zeroizing<[u8; 32]>);

impl fmt::Debug for MasterKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("MasterKey(…)")
    }
}

const CTX_CIPHER: &str = "tessera 2026-11 object sealing key";
const CTX_FINGERPRINT: &str = "tessera 2026-11 chunk fingerprint key";
const CTX_SLOT: &[u8] = b"tessera key slot\0";

impl MasterKey {
    pub fn generate() -> Self {
        let mut k = Zeroizing::new([0u8; 32]);
        random(&mut k[..]);
        MasterKey(k)
    }

    pub fn from_bytes(bytes: [u8; 32]) -> Self {
        MasterKey(Zeroizing::new(bytes))
    }

    /// The object cipher of a repository sealed with `kind`.
    pub fn cipher(&self, kind: CipherKind) -> Cipher {
        let k = Zeroizing::new(blake3::derive_key(CTX_CIPHER, &self.0[..]));
        Cipher::new(kind, &k)
    }

    /// The key of the chunk fingerprints.
    pub fn fingerprint_key(&self) -> Zeroizing<[u8; 32]> {
        Zeroizing::new(blake3::derive_key(CTX_FINGERPRINT, &self.0[..]))
    }
}

/// One key slot: the master key wrapped under one password.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeySlot {
    pub id: u64,
    /// `argon2id`.
    pub kdf: String,
    pub params: KdfParams,
    /// Hex.
    pub salt: String,
    /// The master key sealed (hex: nonce | ciphertext | tag), with the
    /// repository id and slot id as associated data.
    pub wrapped: String,
    /// Unix seconds, user and host that added the slot (shown by `key list`).
    pub created: u64,
    #[serde(default)]
    pub user: String,
    #[serde(default)]
    pub host: String,
}

fn slot_ad(repo_id: &str, id: u64) -> Vec<u8> {
    let mut ad = CTX_SLOT.to_vec();
    ad.extend_from_slice(repo_id.as_bytes());
    ad.push(0);
    ad.extend_from_slice(&id.to_le_bytes());
    ad
}

impl KeySlot {
    /// Wrap `master` under `password` as slot `id` of repository `repo_id`.
    pub fn wrap(
        master: &MasterKey,
        password: &Password,
        params: KdfParams,
        repo_id: &str,
        id: u64,
    ) -> Result<KeySlot> {
        let mut salt = [0u8; 32];
        random(&mut salt);
        Self::wrap_with_salt(master, password, params, repo_id, id, &salt)
    }

    pub(crate) fn wrap_with_salt(
        master: &MasterKey,
        password: &Password,
        params: KdfParams,
        repo_id: &str,
        id: u64,
        salt: &[u8],
    ) -> Result<KeySlot> {
        let kek = params.derive(password, salt)?;
        let mut wrapped = Vec::new();
        Cipher::new(SLOT_CIPHER, &kek).seal_into(
            &slot_ad(repo_id, id),
            &master.0[..],
            &mut wrapped,
        );
        Ok(KeySlot {
            id,
            kdf: "argon2id".into(),
            params,
            salt: hex::encode(salt),
            wrapped: hex::encode(wrapped),
            created: crate::clock::now(),
            user: std::env::var("USER").unwrap_or_default(),
            host: gethostname::gethostname().to_string_lossy().into_owned(),
        })
    }

    /// The master key if `password` opens this slot; `None` if it does not
    /// (a wrong password, or a slot of another repository).
    pub fn unwrap(&self, password: &Password, repo_id: &str) -> Result<Option<MasterKey>> {
        let bad = |why: &str| Error::corrupt(format!("key slot {}", self.id), why.to_string());
        if self.kdf != "argon2id" {
            return Err(bad("unknown key derivation (expected argon2id)"));
        }
        // A planted slot must not make every open allocate without bound.
        if self.params.m_kib > 4 << 20 || self.params.t > 64 || self.params.p > 64 {
            return Err(bad("implausible key derivation parameters"));
        }
        let salt = hex::decode(&self.salt).map_err(|_| bad("bad salt"))?;
        let wrapped = hex::decode(&self.wrapped).map_err(|_| bad("bad wrapped key"))?;
        let kek = self.params.derive(password, &salt)?;
        let mut key = Zeroizing::new([0u8; 32]);
        match Cipher::new(SLOT_CIPHER, &kek).open_into(
            &slot_ad(repo_id, self.id),
            &wrapped,
            &mut key[..],
        ) {
            Ok(()) => Ok(Some(MasterKey(key))),
            Err(_) => Ok(None),
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec_pretty(self).expect("key slot serializes")
    }

    pub fn decode(b: &[u8], name: &str) -> Result<KeySlot> {
        serde_json::from_slice(b)
            .map_err(|e| Error::corrupt(name.to_string(), format!("unreadable key slot: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Known answer for the key derivation (Argon2id v1.3, 32-byte output):
    /// pins the algorithm, version and parameter mapping.
    #[test]
    fn argon2id_known_answer() {
        let k = KdfParams {
            m_kib: 32,
            t: 3,
            p: 4,
        };
        let out = k.derive(&Password::new(vec![1u8; 32]), &[2u8; 16]).unwrap();
        assert_eq!(hex::encode(&out[..]), ARGON2ID_KAT);
    }

    /// The derivation on memory of its own (huge pages) gives what the
    /// crate's own allocation gives, at parameters large enough for the
    /// mapped path (over 2 MiB) and with several lanes.
    #[test]
    fn derivation_memory_changes_nothing() {
        for (m_kib, t, p) in [(4096, 1, 1), (3072, 2, 3), (8, 1, 1), (32, 3, 4)] {
            let k = KdfParams { m_kib, t, p };
            let password = Password::new(b"correct horse".to_vec());
            let salt = [7u8; 32];
            let params = argon2::Params::new(m_kib, t, p, Some(32)).unwrap();
            let mut want = [0u8; 32];
            argon2::Argon2::new(argon2::Algorithm::Argon2id, argon2::Version::V0x13, params)
                .hash_password_into(password.bytes(), &salt, &mut want)
                .unwrap();
            assert_eq!(*k.derive(&password, &salt).unwrap(), want, "{k:?}");
        }
    }

    /// Computed independently (OpenSSL's Argon2id).
    const ARGON2ID_KAT: &str = "03aab965c12001c9d7d0d2de33192c0494b684bb148196d73c1df1acaf6d0c2e";

    #[test]
    fn slots_open_with_their_password_only() {
        let m = MasterKey::generate();
        let p = Password::new("correct horse");
        let slot = KeySlot::wrap(&m, &p, KdfParams::INSECURE_FAST, "repo", 1).unwrap();
        let back = slot.unwrap(&p, "repo").unwrap().unwrap();
        assert_eq!(*back.0, *m.0);
        assert!(slot
            .unwrap(&Password::new("wrong"), "repo")
            .unwrap()
            .is_none());
        assert!(slot.unwrap(&p, "other repo").unwrap().is_none());
        let mut moved = slot.clone();
        moved.id = 2;
        assert!(moved.unwrap(&p, "repo").unwrap().is_none());
        let decoded = KeySlot::decode(&slot.encode(), "keys/1").unwrap();
        assert_eq!(decoded, slot);
        assert!(!format!("{:?}{:?}", p, m).contains("horse"));
    }

    /// The lanes run on parallel threads (the crate's `parallel` feature):
    /// the key must be Argon2id's all the same. Expected keys from the
    /// reference implementation (Debian's `argon2` 0~20171227:
    /// `echo -n "correct horse" | argon2 saltsaltsaltsalt -id -t 3 -m 10 -p N -l 32 -r`).
    #[test]
    fn derivation_matches_the_reference_implementation_for_one_and_four_lanes() {
        let pw = Password::new("correct horse");
        for (p, want) in [
            (
                4,
                "1908c9ffc5ebce354c394986093693200a963fa9a576b59e1c2c49cf84c39797",
            ),
            (
                1,
                "954a1c5d06fe554720f1a79e529d0268e978618c7e215ac49466cc8d5c4e0a80",
            ),
        ] {
            let k = KdfParams {
                m_kib: 1024,
                t: 3,
                p,
            }
            .derive(&pw, b"saltsaltsaltsalt")
            .unwrap();
            let hex: String = k.iter().map(|b| format!("{b:02x}")).collect();
            assert_eq!(hex, want, "{p} lanes");
        }
        assert_eq!(KdfParams::default().p, 4);
    }

    #[test]
    fn kdf_params_parse() {
        assert_eq!(
            "m=1024,t=2,p=1".parse::<KdfParams>().unwrap(),
            KdfParams {
                m_kib: 1024,
                t: 2,
                p: 1
            }
        );
        assert!("m=1".parse::<KdfParams>().is_err());
        assert!("x=1".parse::<KdfParams>().is_err());
    }
}
