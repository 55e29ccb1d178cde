//! The object-store contract: the [`ObjectStore`] trait every store and
//! wrapper implements, the [`ObjectBytes`] a whole-object read hands out,
//! and the listing helpers built on the trait. In a file of its own so the
//! stores (local, memory, S3) and the wrappers (cache, counting, faults)
//! depend on the contract, not on the folder's `mod.rs` that re-exports them.

use crate::error::Result;
use crate::object_key::{KeyKind, ObjectKey};

/// A whole object as read for a reader that only looks at it. Opaque: a
/// store may hand out its bytes in memory or (a local store) a mapping of
/// the file that holds them. It may stand for a tail of what was read
/// ([`ObjectBytes::skip`]): an unsealed object is its stored bytes past the
/// frame header, not a copy of them.
pub struct ObjectBytes(Repr, usize);

enum Repr {
    Owned(Vec<u8>),
    Mapped(MappedFile),
    /// The memory store's own copy (trace mode reads every container's
    /// metadata many times in GC and restores; a copy each time was half
    /// of a paper-scale run's restore time).
    Shared(std::sync::Arc<Vec<u8>>),
}

/// A mapped file, its descriptor kept for [`ObjectBytes::uncache`].
struct MappedFile {
    map: memmap2::Mmap,
    file: std::fs::File,
}

impl std::ops::Deref for ObjectBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        let all: &[u8] = match &self.0 {
            Repr::Owned(v) => v,
            Repr::Mapped(m) => &m.map,
            Repr::Shared(v) => v,
        };
        &all[self.1..]
    }
}

impl From<Vec<u8>> for ObjectBytes {
    fn from(v: Vec<u8>) -> Self {
        ObjectBytes(Repr::Owned(v), 0)
    }
}

impl ObjectBytes {
    /// Bytes of a mapped file (a [`LocalStore`](super::LocalStore) detail).
    pub(crate) fn mapped(map: memmap2::Mmap, file: std::fs::File) -> Self {
        ObjectBytes(Repr::Mapped(MappedFile { map, file }), 0)
    }

    /// Bytes the memory store keeps (shared, not copied).
    pub(crate) fn shared(v: std::sync::Arc<Vec<u8>>) -> Self {
        ObjectBytes(Repr::Shared(v), 0)
    }

    /// The bytes past the first `n` (no copy: a 400 MB index segment read
    /// whole is not copied again to drop its frame header). `n` is at most
    /// the length.
    pub(crate) fn skip(self, n: usize) -> Self {
        assert!(n <= self.len(), "skipping past the end");
        let start = self.1 + n;
        ObjectBytes(self.0, start)
    }

    /// Whether [`discard`](Self::discard) gives memory back: the bytes are
    /// a mapped file, whose pages the kernel can read again from the file.
    pub(crate) fn is_mapped(&self) -> bool {
        matches!(self.0, Repr::Mapped(_))
    }

    /// Give back the memory of the whole pages inside `range` (of the bytes
    /// this derefs to; partial pages at its ends are kept). Only a mapped
    /// file's pages go: they leave this process's memory, and a later touch
    /// reads them again from the file, the same bytes, since objects are
    /// immutable. Why: a restore under a memory ceiling holds a container
    /// for the few chunks it will still supply, and copying those out cost
    /// more than the read it spares (`restore/trim.rs`). Elsewhere (bytes
    /// in memory) nothing happens.
    pub(crate) fn discard(&self, range: std::ops::Range<usize>) {
        if !self.is_mapped() || range.start >= range.end || range.end > self.len() {
            return;
        }
        let page = page_size();
        let base = self.as_ptr() as usize;
        let start = (base + range.start).next_multiple_of(page);
        let end = (base + range.end) / page * page;
        if start < end {
            // SAFETY: [start, end) lies inside this mapping, which is a
            // shared read-only mapping of a file: MADV_DONTNEED drops its
            // pages from this process and later reads fault them in again
            // from the file (no zero fill, unlike private anonymous memory).
            // Failure only leaves the pages where they are.
            unsafe {
                libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED);
            }
        }
    }

    /// Let the bytes go and, for a mapped file, its pages in the page cache
    /// too (`posix_fadvise(DONTNEED)`, once this process no longer maps
    /// them; pages others map or that are still dirty stay). Bytes in
    /// memory are only dropped.
    ///
    /// Why: a restore reads each container once and writes several times
    /// its size into new files, whose pages the kernel must find. Pages of
    /// a container just read are at hand; on the reference VM a page never
    /// touched before costs more than the copy into it (free pages go back
    /// to the host), and handing the restore's writes the container pages
    /// it is done with took settled restores of a 2.29 GB tree from a
    /// median 3.70 to 3.27 s (docs/LAB.md). Only for objects the caller
    /// will not read again soon: a later read goes to the disk.
    pub(crate) fn uncache(self) {
        let Repr::Mapped(MappedFile { map, file }) = self.0 else {
            return;
        };
        // Unmapped first: the kernel keeps pages a process maps.
        drop(map);
        #[cfg(target_os = "linux")]
        {
            use std::os::fd::AsRawFd;
            // SAFETY: an open descriptor; the advice changes no data.
            unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        }
        drop(file);
    }

    /// The buffer, for the next read to reuse (none for a mapping).
    pub fn into_buffer(self) -> Vec<u8> {
        match self.0 {
            Repr::Owned(mut v) => {
                v.drain(..self.1);
                v
            }
            Repr::Mapped(_) | Repr::Shared(_) => Vec::new(),
        }
    }
}

/// The size of a memory page, as [`ObjectBytes::discard`] gives pages back.
pub(crate) fn page_size() -> usize {
    static PAGE: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *PAGE.get_or_init(|| {
        // SAFETY: sysconf has no preconditions.
        let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        usize::try_from(n)
            .ok()
            .filter(|&n| n.is_power_of_two())
            .unwrap_or(4096)
    })
}

pub trait ObjectStore: Send + Sync {
    /// Read a whole object. A missing key is `Error::MissingObject` naming
    /// the key.
    fn get(&self, key: &ObjectKey) -> Result<Vec<u8>>;
    /// [`get`](Self::get) into `buf`, replacing its contents. A buffer that
    /// is reused from read to read is not faulted in again: restores read
    /// hundreds of 4 MiB containers, and fresh pages cost as much as the copy.
    fn get_into(&self, key: &ObjectKey, buf: &mut Vec<u8>) -> Result<()> {
        *buf = self.get(key)?;
        Ok(())
    }
    /// Read a whole object to look at it, into `reuse` or however the store
    /// serves it cheapest (a local store maps large files).
    fn get_whole(&self, key: &ObjectKey, reuse: Vec<u8>) -> Result<ObjectBytes> {
        let mut buf = reuse;
        self.get_into(key, &mut buf)?;
        Ok(buf.into())
    }
    /// Read `len` bytes at `offset`. Reading past the end is `Error::Corrupt`
    /// (the object is shorter than its header promised).
    fn get_range(&self, key: &ObjectKey, offset: u64, len: u64) -> Result<Vec<u8>>;
    /// Size of an object in bytes.
    fn size(&self, key: &ObjectKey) -> Result<u64>;
    /// Store `data` under `key` atomically (all or nothing). Overwrites an
    /// existing object of the same key (used only for leftovers and tests).
    fn put(&self, key: &ObjectKey, data: &[u8]) -> Result<()>;
    /// [`put`](Self::put) an owned buffer: a store that keeps objects in
    /// memory takes it without copying (index segments run to hundreds of MB).
    fn put_owned(&self, key: &ObjectKey, data: Vec<u8>) -> Result<()> {
        self.put(key, &data)
    }
    /// Create `key` only if it does not exist; false if it already existed.
    /// Durable on return: this is how a writer publishes (the lock).
    fn put_if_absent(&self, key: &ObjectKey, data: &[u8]) -> Result<bool>;
    /// Keys of one kind, sorted by name; names under the kind's prefix that
    /// do not parse come back as [`ObjectKey::Stray`].
    fn list(&self, kind: KeyKind) -> Result<Vec<ObjectKey>>;
    /// Delete an object; deleting a missing object is not an error.
    fn delete(&self, key: &ObjectKey) -> Result<()>;
    /// Make every `put` and `delete` so far durable.
    fn barrier(&self) -> Result<()>;
    /// Human-readable location, for messages.
    fn location(&self) -> String;
    /// Clean up what interrupted puts left behind (a local store's temporary
    /// files, an object store's incomplete uploads); returns how many. Only
    /// the writer holding the lock may call it.
    fn clean_interrupted(&self) -> Result<usize> {
        Ok(0)
    }
    /// Start reading an object the caller will read soon, without waiting
    /// for it and without holding it in this process (a local store asks
    /// the kernel to read the file into the page cache). A hint: nothing
    /// happens where it does not apply, and failures are ignored.
    fn prefetch(&self, _key: &ObjectKey) {}
}

impl<B: ObjectStore + ?Sized> ObjectStore for std::sync::Arc<B> {
    fn get(&self, key: &ObjectKey) -> Result<Vec<u8>> {
        (**self).get(key)
    }
    fn get_into(&self, key: &ObjectKey, buf: &mut Vec<u8>) -> Result<()> {
        (**self).get_into(key, buf)
    }
    fn get_whole(&self, key: &ObjectKey, reuse: Vec<u8>) -> Result<ObjectBytes> {
        (**self).get_whole(key, reuse)
    }
    fn get_range(&self, key: &ObjectKey, offset: u64, len: u64) -> Result<Vec<u8>> {
        (**self).get_range(key, offset, len)
    }
    fn size(&self, key: &ObjectKey) -> Result<u64> {
        (**self).size(key)
    }
    fn put(&self, key: &ObjectKey, data: &[u8]) -> Result<()> {
        (**self).put(key, data)
    }
    fn put_owned(&self, key: &ObjectKey, data: Vec<u8>) -> Result<()> {
        (**self).put_owned(key, data)
    }
    fn put_if_absent(&self, key: &ObjectKey, data: &[u8]) -> Result<bool> {
        (**self).put_if_absent(key, data)
    }
    fn list(&self, kind: KeyKind) -> Result<Vec<ObjectKey>> {
        (**self).list(kind)
    }
    fn delete(&self, key: &ObjectKey) -> Result<()> {
        (**self).delete(key)
    }
    fn barrier(&self) -> Result<()> {
        (**self).barrier()
    }
    fn location(&self) -> String {
        (**self).location()
    }
    fn prefetch(&self, key: &ObjectKey) {
        (**self).prefetch(key)
    }
    fn clean_interrupted(&self) -> Result<usize> {
        (**self).clean_interrupted()
    }
}

/// Every object of every kind, sorted by name (for tests and tools that
/// look at a whole repository).
pub fn list_all(store: &dyn ObjectStore) -> Result<Vec<ObjectKey>> {
    let mut all = Vec::new();
    for kind in KeyKind::ALL {
        all.extend(store.list(kind)?);
    }
    all.sort();
    Ok(all)
}

/// Names of `kind` among `names` (listed under its prefix), as keys.
pub(crate) fn keys_of(kind: KeyKind, names: impl IntoIterator<Item = String>) -> Vec<ObjectKey> {
    names
        .into_iter()
        .filter(|n| KeyKind::of_name(n) == Some(kind))
        .map(|n| ObjectKey::parse(&n))
        .collect()
}
