//! A piece of a file's bytes in at most two slices, and its sparse write.
//!
//! Why: a restore's stream arrives in 1 MiB blocks (`restore/pipe.rs`) and
//! a file's bytes go to their writer as slices of them ([`Input::share`]).
//! Bytes that straddle two blocks were copied into a buffer of their own:
//! one piece of four of every large file and the small files that cross a
//! block's end, 1.3 % of a restore's CPU in `memmove` and about as much in
//! `malloc` (issue 33). Two slices, one from each block, are written in
//! turn instead.
//!
//! [`Input::share`]: super::input::Input::share

use std::fs::File;
use std::io::{self, Seek, SeekFrom, Write};

/// Runs of zeros this long, at this alignment, are left as holes in the
/// restored file rather than written.
pub(crate) const HOLE: usize = 4096;

/// Bytes in two slices, read as one: `head` then `tail`.
#[derive(Clone, Copy, Default)]
pub(crate) struct Parts<'a> {
    head: &'a [u8],
    tail: &'a [u8],
}

impl<'a> Parts<'a> {
    pub(crate) fn one(bytes: &'a [u8]) -> Self {
        Parts {
            head: bytes,
            tail: &[],
        }
    }

    pub(crate) fn two(head: &'a [u8], tail: &'a [u8]) -> Self {
        Parts { head, tail }
    }

    pub(crate) fn len(&self) -> usize {
        self.head.len() + self.tail.len()
    }

    /// Bytes `a..b` of the whole.
    fn range(&self, a: usize, b: usize) -> Parts<'a> {
        let h = self.head.len();
        Parts {
            head: &self.head[a.min(h)..b.min(h)],
            tail: &self.tail[a.max(h) - h..b.max(h) - h],
        }
    }

    /// The first `n` bytes, taken off the front (`None` if there are
    /// fewer).
    pub(crate) fn take(&mut self, n: usize) -> Option<Parts<'a>> {
        if n > self.len() {
            return None;
        }
        let front = self.range(0, n);
        *self = self.range(n, self.len());
        Some(front)
    }

    fn is_zero(&self) -> bool {
        self.head.iter().chain(self.tail).all(|b| *b == 0)
    }

    fn write_to(&self, out: &mut impl Write) -> io::Result<()> {
        for part in [self.head, self.tail] {
            if !part.is_empty() {
                out.write_all(part)?;
            }
        }
        Ok(())
    }
}

/// Write `data`, found at offset `at` of the file, leaving whole aligned
/// blocks of zeros as holes (the file was created empty, so they read as
/// zeros), whichever slices they lie in. Returns whether it left a hole.
pub(crate) fn write_sparse(file: &mut File, data: Parts, at: u64) -> io::Result<bool> {
    let len = data.len();
    let mut holes = false;
    let mut run = 0; // start of the bytes not yet written
    let mut i = 0;
    while i < len {
        let end = len.min(i + HOLE - ((at + i as u64) % HOLE as u64) as usize);
        if end - i == HOLE && data.range(i, end).is_zero() {
            data.range(run, i).write_to(file)?;
            file.seek(SeekFrom::Current(HOLE as i64))?;
            holes = true;
            run = end;
        }
        i = end;
    }
    data.range(run, len).write_to(file)?;
    Ok(holes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::io::Read;
    use std::os::unix::fs::MetadataExt;

    fn flatten(p: Parts) -> Vec<u8> {
        [p.head, p.tail].concat()
    }

    proptest! {
        #[test]
        fn take_and_range_match_the_flat_bytes(
            head in proptest::collection::vec(any::<u8>(), 0..64),
            tail in proptest::collection::vec(any::<u8>(), 0..64),
            cuts in proptest::collection::vec(0usize..40, 0..6),
        ) {
            let flat = [head.clone(), tail.clone()].concat();
            let mut p = Parts::two(&head, &tail);
            let mut at = 0;
            for n in cuts {
                match p.take(n) {
                    Some(front) => {
                        prop_assert_eq!(flatten(front), &flat[at..at + n]);
                        at += n;
                    }
                    None => prop_assert!(at + n > flat.len()),
                }
                prop_assert_eq!(flatten(p), &flat[at..]);
            }
        }

        /// Two slices write the bytes one slice would, holes included.
        #[test]
        fn split_writes_the_same_file_as_whole(
            blocks in proptest::collection::vec(any::<bool>(), 1..8),
            split in 0usize..(8 * HOLE),
            at_block in 0u64..3,
        ) {
            let data: Vec<u8> = blocks
                .iter()
                .enumerate()
                .flat_map(|(i, nonzero)| {
                    (0..HOLE).map(move |j| if *nonzero { (i + j) as u8 | 1 } else { 0 })
                })
                .collect();
            let split = split.min(data.len());
            let dir = tempfile::tempdir().unwrap();
            let write = |name: &str, parts: Parts| {
                let path = dir.path().join(name);
                let mut f = File::create(&path).unwrap();
                let at = at_block * HOLE as u64;
                f.seek(SeekFrom::Start(at)).unwrap();
                let holes = write_sparse(&mut f, parts, at).unwrap();
                f.set_len(at + data.len() as u64).unwrap();
                let mut back = Vec::new();
                File::open(&path).unwrap().read_to_end(&mut back).unwrap();
                (holes, back, std::fs::metadata(&path).unwrap().blocks())
            };
            let whole = write("whole", Parts::one(&data));
            let two = write("two", Parts::two(&data[..split], &data[split..]));
            prop_assert_eq!(&whole.1[at_block as usize * HOLE..], &data[..]);
            prop_assert_eq!(whole.0, blocks.iter().any(|b| !b));
            prop_assert_eq!(whole, two);
        }
    }
}
