//! Zero-initialized arrays for the index's large random-access tables (the
//! in-memory table's slots, the on-disk index's Bloom filter). A large one
//! is an anonymous mapping advised to use transparent huge pages: such a
//! table is far larger than the TLB's reach, and with 4 KiB pages every
//! random probe adds a page walk (two-dimensional under a hypervisor) that
//! costs as much as the probe itself.

use std::ptr::NonNull;

/// Arrays of at least this many bytes are mapped with huge pages.
const MAP_BYTES: usize = 2 << 20;

/// A zero-initialized array of `T` (for which all-zero bytes are a valid value).
pub(crate) struct ZeroBuf<T: Copy> {
    ptr: NonNull<T>,
    len: usize,
    mapped: bool,
}

// SAFETY: ZeroBuf owns its allocation exclusively, like a Box<[T]>.
unsafe impl<T: Copy + Send> Send for ZeroBuf<T> {}
unsafe impl<T: Copy + Sync> Sync for ZeroBuf<T> {}

impl<T: Copy> ZeroBuf<T> {
    fn layout(len: usize) -> std::alloc::Layout {
        std::alloc::Layout::from_size_align(len * std::mem::size_of::<T>(), 64).expect("table size")
    }

    /// `len` zeroed elements; T must be valid as zeros.
    pub(crate) fn zeroed(len: usize) -> Self {
        if len == 0 {
            return ZeroBuf {
                ptr: NonNull::dangling(),
                len,
                mapped: false,
            };
        }
        let bytes = len * std::mem::size_of::<T>();
        if bytes >= MAP_BYTES {
            // SAFETY: an anonymous private mapping, checked for failure;
            // the kernel hands it out zero-filled and page aligned.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    bytes,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            if p != libc::MAP_FAILED {
                #[cfg(target_os = "linux")]
                // SAFETY: advice on the range just mapped; failure is harmless.
                unsafe {
                    libc::madvise(p, bytes, libc::MADV_HUGEPAGE);
                }
                return ZeroBuf {
                    ptr: NonNull::new(p.cast()).expect("mmap returned null"),
                    len,
                    mapped: true,
                };
            }
        }
        let layout = Self::layout(len);
        // SAFETY: the layout has a non-zero size.
        let p = unsafe { std::alloc::alloc_zeroed(layout) };
        let Some(ptr) = NonNull::new(p.cast()) else {
            std::alloc::handle_alloc_error(layout)
        };
        ZeroBuf {
            ptr,
            len,
            mapped: false,
        }
    }

    /// `len` elements read from `file` at `offset` (page-aligned),
    /// privately: writes copy the pages they touch, the file is never
    /// written (the kept in-memory table's slots, see [`crate::growbuf`]).
    #[cfg(unix)]
    pub(crate) fn map_file(file: &std::fs::File, offset: u64, len: usize) -> std::io::Result<Self> {
        use std::os::unix::io::AsRawFd;
        if len == 0 {
            return Ok(Self::zeroed(0));
        }
        assert!(offset.is_multiple_of(4096), "page-aligned offset");
        // SAFETY: a new private file mapping, checked for failure.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len * std::mem::size_of::<T>(),
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE,
                file.as_raw_fd(),
                offset as libc::off_t,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(ZeroBuf {
            ptr: NonNull::new(p.cast()).expect("mmap returned null"),
            len,
            mapped: true,
        })
    }

    /// A copy of `v` (large ones on huge pages, as [`zeroed`](Self::zeroed)).
    pub(crate) fn from_slice(v: &[T]) -> Self {
        let mut b = Self::zeroed(v.len());
        b.as_mut_slice().copy_from_slice(v);
        b
    }

    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    #[inline]
    pub(crate) fn as_ptr(&self) -> *const T {
        self.ptr.as_ptr()
    }

    #[inline]
    pub(crate) fn as_slice(&self) -> &[T] {
        // SAFETY: ptr points to len initialized (zeroed or written) elements.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    #[inline]
    pub(crate) fn as_mut_slice(&mut self) -> &mut [T] {
        // SAFETY: as above, and we hold the only reference.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

/// A range of memory (address, bytes) a table is about to fill.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Spare {
    pub(crate) at: usize,
    pub(crate) bytes: usize,
}

impl Spare {
    pub(crate) fn of<T>(s: &[T]) -> Spare {
        Spare {
            at: s.as_ptr() as usize,
            bytes: std::mem::size_of_val(s),
        }
    }
}

/// Fault in the pages of `ranges` as if written, without changing what
/// they hold (`MADV_POPULATE_WRITE`), so the thread that fills them later
/// does not stop at each fresh page: on the reference VM a fresh page
/// costs ~1 µs (0.2–1 GB/s), as much as the load that fills it. Meant for
/// another thread, while the owner fills the memory: populating changes
/// no byte, so it races with nothing; a range freed meanwhile only makes
/// the call fail, and a failure is ignored (the filler faults as before).
pub(crate) fn populate(ranges: &[Spare]) {
    #[cfg(target_os = "linux")]
    for r in ranges {
        let page = 4096;
        let start = r.at.next_multiple_of(page);
        let end = (r.at + r.bytes) / page * page;
        // In slices of 16 MiB: the owner meets populated pages early, and
        // no single call holds the address space's locks for long.
        let mut at = start;
        while at < end {
            let n = (end - at).min(16 << 20);
            // SAFETY: advice on whole pages of a live allocation; it
            // writes no byte, and an unmapped range is only an error.
            let r = unsafe { libc::madvise(at as *mut libc::c_void, n, libc::MADV_POPULATE_WRITE) };
            if r != 0 {
                return;
            }
            at += n;
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = ranges;
}

impl<T: Copy> Drop for ZeroBuf<T> {
    fn drop(&mut self) {
        if self.mapped {
            // SAFETY: the mapping made in `zeroed`, with its length.
            unsafe {
                libc::munmap(
                    self.ptr.as_ptr().cast(),
                    self.len * std::mem::size_of::<T>(),
                );
            }
        } else if self.len > 0 {
            // SAFETY: allocated in `zeroed` with this layout.
            unsafe { std::alloc::dealloc(self.ptr.as_ptr().cast(), Self::layout(self.len)) }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Populating memory already written, not yet touched, or of a
    /// vector's spare room changes no byte of it.
    #[test]
    fn populating_keeps_what_memory_holds() {
        let mut b = ZeroBuf::<u64>::zeroed(MAP_BYTES / 8 * 3);
        for (i, x) in b.as_mut_slice().iter_mut().enumerate().step_by(1000) {
            *x = i as u64 + 1;
        }
        let mut v: Vec<u64> = Vec::with_capacity(1 << 20);
        v.extend(0..1000);
        let room = Spare {
            at: v.as_ptr() as usize + v.len() * 8,
            bytes: (v.capacity() - v.len()) * 8,
        };
        populate(&[Spare::of(b.as_slice()), room]);
        for (i, &x) in b.as_slice().iter().enumerate() {
            assert_eq!(x, if i % 1000 == 0 { i as u64 + 1 } else { 0 });
        }
        assert!(v.iter().copied().eq(0..1000));
        v.extend(1000..2000);
        assert!(v.iter().copied().eq(0..2000));
    }

    /// Empty, heap-sized and mapped buffers start zeroed and hold what is
    /// written; `from_slice` copies exactly.
    #[test]
    fn zeroed_and_copied_buffers_of_every_size() {
        for len in [
            0usize,
            1,
            100,
            MAP_BYTES / 8 - 1,
            MAP_BYTES / 8,
            3 * MAP_BYTES / 8 + 5,
        ] {
            let mut b = ZeroBuf::<u64>::zeroed(len);
            assert_eq!(b.len(), len);
            assert!(b.as_slice().iter().all(|&w| w == 0), "{len}");
            for (i, w) in b.as_mut_slice().iter_mut().enumerate() {
                *w = i as u64 * 3;
            }
            let v: Vec<u64> = (0..len as u64).map(|i| i * 3).collect();
            assert_eq!(b.as_slice(), &v[..]);
            let c = ZeroBuf::from_slice(&v);
            assert_eq!(c.as_slice(), &v[..]);
        }
    }
}
