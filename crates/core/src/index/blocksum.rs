//! Block checksums of a kept run set's large files (issue 36), verified on
//! first access instead of at every opening: an opening that read and
//! checksummed every run and container list whole paid for the whole index
//! (22 GB at 305 M entries) to answer one lookup. Each file of a set is
//! cut into [`BLOCK`]-byte blocks, each with its XXH3-64 (kept in a small
//! meta file checked whole at opening); a reader checks a block the first
//! time it touches it and remembers that it did.
//!
//! A damaged block is never read as data: [`Damage`] removes the set's
//! `state` (so the next opening rebuilds it from the index segments) and
//! is returned as an error where the caller can fail (a merge, a flush) or
//! raised as a panic where it cannot (a lookup, which must not answer
//! "absent" for a key it could not read).

use crate::error::Error;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Bytes per checked block: a run probe reads 1.25 KiB, a container list
/// ~16 KiB; 64 KiB hashes in a few microseconds and keeps the sums at an
/// 8192th of the file.
pub const BLOCK: usize = 64 << 10;

/// The checksum of one block.
#[inline]
pub fn sum(block: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(block)
}

/// The checksum of every [`BLOCK`] of `bytes` (the last one may be short).
pub fn sums_of(bytes: &[u8]) -> Vec<u64> {
    bytes.chunks(BLOCK).map(sum).collect()
}

/// Blocks a file of `len` bytes has.
pub fn blocks_in(len: u64) -> u64 {
    len.div_ceil(BLOCK as u64)
}

/// A damaged block of a kept file.
#[derive(Debug)]
pub struct Damage {
    pub file: PathBuf,
    pub what: String,
    /// The `state` of the set the file came from, removed so that the
    /// next opening rebuilds.
    pub state: Option<Arc<PathBuf>>,
}

impl Damage {
    fn drop_state(&self) {
        if let Some(s) = &self.state {
            let _ = std::fs::remove_file(s.as_path());
        }
    }

    fn text(&self) -> String {
        format!(
            "the kept on-disk index is damaged ({}: {}); it is removed and the next opening rebuilds it from the index segments",
            self.file.display(),
            self.what
        )
    }

    /// As an error (the set's state removed).
    pub fn error(self) -> Error {
        self.drop_state();
        Error::corrupt(self.file.display().to_string(), self.text())
    }

    /// Fail loudly where no error can be returned (the set's state
    /// removed): a lookup must not answer from bytes it could not verify.
    pub fn fail(self) -> ! {
        self.drop_state();
        panic!("{}", self.text())
    }
}

/// A kept file's block checksums and which blocks were verified.
pub struct BlockSums {
    sums: Box<[u64]>,
    /// One bit per block, set once verified (racing verifiers both hash;
    /// the bit only saves repeating it).
    checked: Box<[AtomicU64]>,
    /// Names the file in a [`Damage`].
    path: PathBuf,
    state: Arc<PathBuf>,
}

impl BlockSums {
    /// Sums of the file at `path` (for the bytes it is mapped as), from the
    /// set whose `state` is removed if a block is damaged.
    pub fn new(sums: Vec<u64>, path: &Path, state: Arc<PathBuf>) -> BlockSums {
        let words = sums.len().div_ceil(64);
        BlockSums {
            sums: sums.into_boxed_slice(),
            checked: (0..words).map(|_| AtomicU64::new(0)).collect(),
            path: path.to_path_buf(),
            state,
        }
    }

    /// Blocks it covers.
    pub fn blocks(&self) -> usize {
        self.sums.len()
    }

    /// Verify the blocks of `bytes` (the whole file) that `from..to`
    /// touches, each once.
    #[inline]
    pub fn check(&self, bytes: &[u8], from: usize, to: usize) -> Result<(), Damage> {
        if to <= from {
            return Ok(());
        }
        for b in from / BLOCK..=(to - 1) / BLOCK {
            let bit = 1u64 << (b % 64);
            if self.checked[b / 64].load(Ordering::Acquire) & bit == 0 {
                self.verify(bytes, b)?;
                self.checked[b / 64].fetch_or(bit, Ordering::Release);
            }
        }
        Ok(())
    }

    /// Verify every block not verified yet.
    pub fn check_all(&self, bytes: &[u8]) -> Result<(), Damage> {
        self.check(bytes, 0, bytes.len())
    }

    #[cold]
    fn verify(&self, bytes: &[u8], b: usize) -> Result<(), Damage> {
        let damage = |what: String| Damage {
            file: self.path.clone(),
            what,
            state: Some(Arc::clone(&self.state)),
        };
        let want = self
            .sums
            .get(b)
            .ok_or_else(|| damage(format!("block {b} past its checksums")))?;
        let block = &bytes[b * BLOCK..((b + 1) * BLOCK).min(bytes.len())];
        if sum(block) != *want {
            return Err(damage(format!("block {b} checksum mismatch")));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each block is checked on first touch; a flipped byte is found in
    /// the block a read touches, not in the others; the set's state goes.
    #[test]
    fn a_damaged_block_is_found_when_touched() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        std::fs::write(&state, b"s").unwrap();
        let mut bytes: Vec<u8> = (0..3 * BLOCK + 100).map(|i| (i * 7) as u8).collect();
        let sums = BlockSums::new(sums_of(&bytes), Path::new("run-x"), Arc::new(state.clone()));
        assert_eq!(sums.blocks(), 4);
        assert!(sums.check(&bytes, 10, 20).is_ok());
        bytes[2 * BLOCK + 5] ^= 1;
        // Block 0 was verified before: not hashed again.
        assert!(sums.check(&bytes, 0, BLOCK).is_ok());
        assert!(sums.check(&bytes, 3 * BLOCK, 3 * BLOCK + 100).is_ok());
        let d = sums.check(&bytes, BLOCK + 10, 2 * BLOCK + 10).unwrap_err();
        assert!(d.what.contains("block 2"), "{d:?}");
        assert!(state.exists());
        let e = d.error();
        assert!(e.to_string().contains("run-x"), "{e}");
        assert!(!state.exists(), "the state is removed");
        assert!(sums.check_all(&bytes).is_err());
    }
}
