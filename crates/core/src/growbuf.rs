//! Growable arrays of plain values for the in-memory index's entry arrays
//! (issue 36): like a `Vec`, but one may start as a *private mapping of a
//! kept file* instead of fresh memory. An opening that maps the table an
//! earlier one kept reads its page-cache pages in place: no decoding, no
//! fresh anonymous memory (which costs ~1 µs a page on the reference VM),
//! and only the pages a command touches are read at all. Writes go to
//! private copies of the pages they touch (the file is never written), and
//! appends go to zeroed room mapped after the file's bytes. Growing past
//! that room copies the elements into heap memory once.

use std::ptr::NonNull;

const PAGE: usize = 4096;

/// A growable array of `T` (plain values: any bytes of the file are a
/// valid `T`, and all-zero bytes too).
pub(crate) struct GrowBuf<T: Copy> {
    ptr: NonNull<T>,
    len: usize,
    cap: usize,
    /// Bytes of the mapping `ptr` starts (0: heap memory, or none).
    mapped: usize,
}

// SAFETY: GrowBuf owns its memory exclusively, like a Vec<T>.
unsafe impl<T: Copy + Send> Send for GrowBuf<T> {}
unsafe impl<T: Copy + Sync> Sync for GrowBuf<T> {}

impl<T: Copy> Default for GrowBuf<T> {
    fn default() -> Self {
        GrowBuf {
            ptr: NonNull::dangling(),
            len: 0,
            cap: 0,
            mapped: 0,
        }
    }
}

impl<T: Copy> GrowBuf<T> {
    fn layout(cap: usize) -> std::alloc::Layout {
        std::alloc::Layout::array::<T>(cap).expect("array size")
    }

    /// `len` elements read from `file` at `offset` (a multiple of the page
    /// size), privately: writes stay in this process. `room` more elements
    /// can be appended before the array moves to heap memory. The file
    /// must hold the bytes (a file truncated under the mapping is a fault
    /// when read, as for any mapping: kept files are never rewritten).
    #[cfg(unix)]
    pub(crate) fn map_file(
        file: &std::fs::File,
        offset: u64,
        len: usize,
        room: usize,
    ) -> std::io::Result<Self> {
        use std::os::unix::io::AsRawFd;
        assert!(offset.is_multiple_of(PAGE as u64), "page-aligned offset");
        let size = std::mem::size_of::<T>();
        let cap = len + room;
        let total = (cap * size).next_multiple_of(PAGE);
        if total == 0 {
            return Ok(Self::default());
        }
        // SAFETY: a new anonymous mapping, checked for failure: the room
        // (zero pages until written) and the place of the file's bytes.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                total,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let bytes = (len * size).next_multiple_of(PAGE);
        if bytes > 0 {
            // SAFETY: replaces the first pages of the mapping just made
            // (MAP_FIXED over our own range) with the file's, privately.
            let p = unsafe {
                libc::mmap(
                    base,
                    bytes,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_FIXED,
                    file.as_raw_fd(),
                    offset as libc::off_t,
                )
            };
            if p == libc::MAP_FAILED {
                let e = std::io::Error::last_os_error();
                // SAFETY: the mapping made above, with its length.
                unsafe { libc::munmap(base, total) };
                return Err(e);
            }
        }
        Ok(GrowBuf {
            ptr: NonNull::new(base.cast()).expect("mmap returned null"),
            len,
            cap,
            mapped: total,
        })
    }

    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    #[inline]
    pub(crate) fn capacity(&self) -> usize {
        self.cap
    }

    /// Whether the elements are still the kept file's mapping.
    #[cfg(test)]
    pub(crate) fn is_mapped(&self) -> bool {
        self.mapped > 0
    }

    /// Room for at least `additional` more elements (exactly that many
    /// when it has to grow).
    pub(crate) fn reserve_exact(&mut self, additional: usize) {
        let need = self.len.checked_add(additional).expect("array size");
        if need > self.cap {
            self.set_capacity(need);
        }
    }

    /// Move the elements into heap memory of `cap` elements (`cap >= len`).
    fn set_capacity(&mut self, cap: usize) {
        debug_assert!(cap >= self.len);
        if cap == 0 {
            self.free();
            // Not `*self = default()`: that would drop (free) it again.
            self.ptr = NonNull::dangling();
            self.cap = 0;
            self.mapped = 0;
            return;
        }
        let layout = Self::layout(cap);
        let ptr = if self.mapped == 0 && self.cap > 0 {
            // SAFETY: a heap block of this type's layout for `self.cap`;
            // realloc moves large blocks by remapping, without copying.
            unsafe {
                std::alloc::realloc(
                    self.ptr.as_ptr().cast(),
                    Self::layout(self.cap),
                    layout.size(),
                )
            }
        } else {
            // SAFETY: a non-zero size.
            let p = unsafe { std::alloc::alloc(layout) };
            if !p.is_null() {
                // SAFETY: `len` elements to a new block of at least `len`.
                unsafe {
                    std::ptr::copy_nonoverlapping(self.ptr.as_ptr(), p.cast::<T>(), self.len);
                }
                self.free();
            }
            p
        };
        let Some(ptr) = NonNull::new(ptr.cast::<T>()) else {
            std::alloc::handle_alloc_error(layout)
        };
        self.ptr = ptr;
        self.cap = cap;
        self.mapped = 0;
    }

    #[inline]
    pub(crate) fn push(&mut self, v: T) {
        if self.len == self.cap {
            self.reserve_exact((self.cap / 8).max(16));
        }
        // SAFETY: len < cap, inside the allocation or mapping.
        unsafe { self.ptr.as_ptr().add(self.len).write(v) };
        self.len += 1;
    }

    pub(crate) fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    pub(crate) fn clear(&mut self) {
        self.len = 0;
    }

    /// Give back heap room past the elements (a mapping keeps its room:
    /// untouched, it costs no memory).
    pub(crate) fn shrink_to_fit(&mut self) {
        if self.mapped == 0 && self.cap > self.len {
            self.set_capacity(self.len);
        }
    }

    /// The memory past the elements that appends will write.
    pub(crate) fn spare(&self) -> crate::zerobuf::Spare {
        let size = std::mem::size_of::<T>();
        crate::zerobuf::Spare {
            at: self.ptr.as_ptr() as usize + self.len * size,
            bytes: (self.cap - self.len) * size,
        }
    }

    /// The elements as bytes (to write them to a file).
    pub(crate) fn as_bytes(&self) -> &[u8] {
        // SAFETY: len initialized plain values; u8 has no alignment.
        unsafe {
            std::slice::from_raw_parts(
                self.ptr.as_ptr().cast::<u8>(),
                self.len * std::mem::size_of::<T>(),
            )
        }
    }

    fn free(&mut self) {
        if self.mapped > 0 {
            // SAFETY: the mapping made in `map_file`, with its length.
            unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.mapped) };
        } else if self.cap > 0 {
            // SAFETY: the heap block of `cap` elements.
            unsafe { std::alloc::dealloc(self.ptr.as_ptr().cast(), Self::layout(self.cap)) };
        }
    }
}

impl<T: Copy> std::ops::Deref for GrowBuf<T> {
    type Target = [T];
    #[inline]
    fn deref(&self) -> &[T] {
        // SAFETY: ptr holds len initialized elements (or is dangling, len 0).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: Copy> std::ops::DerefMut for GrowBuf<T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as above, and we hold the only reference.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: Copy> Drop for GrowBuf<T> {
    fn drop(&mut self) {
        self.free();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// A mapped array reads the file's values, takes appends in its room
    /// and past it (moving to the heap), and never writes the file.
    #[test]
    #[cfg(unix)]
    fn a_mapped_array_grows_and_leaves_its_file_alone() {
        let mut f = tempfile::tempfile().unwrap();
        let head = vec![7u8; PAGE];
        let vals: Vec<u64> = (0..1000).map(|i| i * 3 + 1).collect();
        f.write_all(&head).unwrap();
        for v in &vals {
            f.write_all(&v.to_ne_bytes()).unwrap();
        }
        f.flush().unwrap();
        let mut a = GrowBuf::<u64>::map_file(&f, PAGE as u64, vals.len(), 100).unwrap();
        assert!(a.is_mapped());
        assert_eq!(&a[..], &vals[..]);
        a[5] = 0;
        for i in 0..500u64 {
            a.push(i);
        }
        assert!(!a.is_mapped(), "grown past its room");
        assert_eq!(a.len(), 1500);
        assert_eq!(a[5], 0);
        assert_eq!(a[4], vals[4]);
        assert!((0..500).all(|i| a[1000 + i] == i as u64));
        a.truncate(10);
        a.shrink_to_fit();
        assert_eq!(a.capacity(), 10);
        // The file still holds what it did.
        let mut back = GrowBuf::<u64>::map_file(&f, PAGE as u64, vals.len(), 0).unwrap();
        assert_eq!(&back[..], &vals[..]);
        back.push(9);
        assert_eq!(back.len(), 1001);
        let empty = GrowBuf::<u64>::map_file(&f, 0, 0, 0).unwrap();
        assert!(empty.is_empty());
    }

    #[test]
    fn a_heap_array_is_a_vec() {
        let mut a = GrowBuf::<[u64; 4]>::default();
        let mut v = Vec::new();
        for i in 0..10_000u64 {
            a.push([i, 1, 2, 3]);
            v.push([i, 1, 2, 3]);
            if i % 3000 == 0 {
                a.reserve_exact(7);
                assert!(a.capacity() >= a.len() + 7);
            }
        }
        assert_eq!(&a[..], &v[..]);
        assert_eq!(a.as_bytes().len(), 10_000 * 32);
        a.clear();
        assert!(a.is_empty());
        a.shrink_to_fit();
        assert_eq!(a.capacity(), 0);
        a.push([1; 4]);
        assert_eq!(&a[..], &[[1; 4]]);
    }
}
