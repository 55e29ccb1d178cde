//! Authenticated encryption: XChaCha20-Poly1305 (RustCrypto) with a fresh
//! random 24-byte nonce per sealed piece, so nonces never need a counter
//! that survives crashes or is shared between writers.
//!
//! Sealed piece: `nonce (24) | ciphertext | tag (16)`. What the piece is
//! (its object name and kind, or a chunk's kind and fingerprint) is the
//! associated data: a piece moved under another name fails to open.

use chacha20poly1305::aead::{AeadInOut, KeyInit};
use chacha20poly1305::{Tag, XChaCha20Poly1305, XNonce};
use zeroize::Zeroizing;

pub const NONCE_LEN: usize = 24;
pub const TAG_LEN: usize = 16;
/// Bytes a sealed piece adds to its plaintext.
pub const OVERHEAD: usize = NONCE_LEN + TAG_LEN;

/// The object cipher, keyed by a subkey of the master key (zeroized on
/// drop by the crate).
#[derive(Clone)]
pub struct Cipher {
    aead: XChaCha20Poly1305,
}

/// A piece that does not open: tampered, truncated, moved, or sealed with
/// another key. Callers name the object.
#[derive(Debug, PartialEq, Eq)]
pub struct Unauthentic;

impl Cipher {
    pub fn new(key: &[u8; 32]) -> Self {
        let key = Zeroizing::new(*key);
        Cipher {
            aead: XChaCha20Poly1305::new_from_slice(&key[..]).expect("32-byte key"),
        }
    }

    /// Seal in place what `out` holds from `start` on: insert a random
    /// nonce before it and append the tag.
    pub fn seal_tail(&self, ad: &[u8], out: &mut Vec<u8>, start: usize) {
        let mut nonce = [0u8; NONCE_LEN];
        super::keys::random(&mut nonce);
        out.splice(start..start, nonce);
        let tag = self
            .aead
            .encrypt_inout_detached(
                &XNonce::from(nonce),
                ad,
                (&mut out[start + NONCE_LEN..]).into(),
            )
            .expect("message within XChaCha20-Poly1305 limits");
        out.extend_from_slice(&tag);
    }

    /// Append `plain`, sealed, to `out`.
    pub fn seal_into(&self, ad: &[u8], plain: &[u8], out: &mut Vec<u8>) {
        let start = out.len();
        out.reserve(plain.len() + OVERHEAD);
        out.extend_from_slice(plain);
        self.seal_tail(ad, out, start);
    }

    /// Open a sealed piece into `out`, which must be exactly the plaintext's
    /// length (`sealed.len() - OVERHEAD`).
    pub fn open_into(&self, ad: &[u8], sealed: &[u8], out: &mut [u8]) -> Result<(), Unauthentic> {
        if sealed.len() < OVERHEAD || out.len() != sealed.len() - OVERHEAD {
            return Err(Unauthentic);
        }
        let (nonce, rest) = sealed.split_at(NONCE_LEN);
        let (ct, tag) = rest.split_at(rest.len() - TAG_LEN);
        out.copy_from_slice(ct);
        let tag = Tag::try_from(tag).map_err(|_| Unauthentic)?;
        let nonce = XNonce::try_from(nonce).map_err(|_| Unauthentic)?;
        self.aead
            .decrypt_inout_detached(&nonce, ad, out.into(), &tag)
            .map_err(|_| Unauthentic)
    }

    /// Open a sealed piece into a new buffer.
    pub fn open(&self, ad: &[u8], sealed: &[u8]) -> Result<Vec<u8>, Unauthentic> {
        let n = sealed.len().checked_sub(OVERHEAD).ok_or(Unauthentic)?;
        let mut out = vec![0u8; n];
        self.open_into(ad, sealed, &mut out)?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seals_opens_and_refuses_tampering() {
        let c = Cipher::new(&[7u8; 32]);
        let mut out = b"head".to_vec();
        c.seal_into(b"ad", b"hello world", &mut out);
        assert_eq!(out.len(), 4 + 11 + OVERHEAD);
        let sealed = &out[4..];
        assert_eq!(c.open(b"ad", sealed).unwrap(), b"hello world");
        assert_eq!(c.open(b"other ad", sealed), Err(Unauthentic));
        assert_eq!(
            Cipher::new(&[8u8; 32]).open(b"ad", sealed),
            Err(Unauthentic)
        );
        for i in 0..sealed.len() {
            let mut bad = sealed.to_vec();
            bad[i] ^= 1;
            assert_eq!(c.open(b"ad", &bad), Err(Unauthentic), "flip at {i}");
        }
        for n in 0..sealed.len() {
            assert!(c.open(b"ad", &sealed[..n]).is_err());
        }
        // Two seals of the same plaintext differ (random nonces).
        let mut again = Vec::new();
        c.seal_into(b"ad", b"hello world", &mut again);
        assert_ne!(again, sealed);
    }

    /// Known answer: a fixed key, nonce and associated data (the format's
    /// pieces are nonce | ciphertext | tag; this pins the cipher and layout).
    #[test]
    fn known_answer() {
        let c = Cipher::new(&[0x42; 32]);
        let mut sealed = vec![0x24u8; NONCE_LEN];
        let mut body = b"tessera".to_vec();
        let tag = c
            .aead
            .encrypt_inout_detached(
                &XNonce::from([0x24u8; NONCE_LEN]),
                b"containers/0000000000000001",
                (&mut body[..]).into(),
            )
            .unwrap();
        sealed.extend_from_slice(&body);
        sealed.extend_from_slice(&tag);
        assert_eq!(hex::encode(&sealed[NONCE_LEN..]), KAT_CIPHERTEXT_AND_TAG,);
        assert_eq!(
            c.open(b"containers/0000000000000001", &sealed).unwrap(),
            b"tessera"
        );
    }

    /// Computed independently (HChaCha20 + ChaCha20-Poly1305 of another library).
    const KAT_CIPHERTEXT_AND_TAG: &str = "d13ba4160b562d923fdbaaa1df6f01a0c2a4a07f2b573b";
}
