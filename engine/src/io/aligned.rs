//! Heap buffers aligned for O_DIRECT: the start address is a multiple of `align` (a power of two,
//! at least 512 for direct I/O) and the capacity is a multiple of it too.
//!
//! Safe code: the buffer is a zeroed heap slice `align - 1` bytes longer than the capacity, and
//! the aligned part starts at the first address in it that is a multiple of `align`. (The slice
//! is never grown, so its address never changes.)

use std::ops::{Deref, DerefMut};

/// An owned, zero-initialised, aligned byte buffer with a length (`len <= capacity`).
pub struct AlignedBuf {
    /// `cap + align - 1` bytes; the aligned part is `bytes[start..start + cap]`.
    bytes: Box<[u8]>,
    start: usize,
    cap: usize,
    align: usize,
    len: usize,
}

impl AlignedBuf {
    /// A zeroed buffer of `capacity` bytes (rounded up to `align`) with length 0. `align` must be
    /// a power of two.
    pub fn new(capacity: usize, align: usize) -> AlignedBuf {
        assert!(align.is_power_of_two(), "alignment {align} is not a power of two");
        let cap = capacity.max(align).div_ceil(align) * align;
        let bytes = vec![0u8; cap + align - 1].into_boxed_slice();
        let addr = bytes.as_ptr() as usize;
        let start = addr.next_multiple_of(align) - addr;
        AlignedBuf { bytes, start, cap, align, len: 0 }
    }

    pub(crate) fn align(&self) -> usize {
        self.align
    }
    pub(crate) fn capacity(&self) -> usize {
        self.cap
    }
    pub(crate) fn len(&self) -> usize {
        self.len
    }
    #[cfg(test)]
    pub(crate) fn as_ptr(&self) -> *const u8 {
        self.full().as_ptr()
    }
    pub(crate) fn as_mut_ptr(&mut self) -> *mut u8 {
        self.full_mut().as_mut_ptr()
    }

    /// Sets the length. Bytes between the old and new length keep whatever they held (all bytes
    /// are always initialised: zeroed at allocation).
    pub(crate) fn set_len(&mut self, len: usize) {
        assert!(len <= self.capacity(), "length {len} beyond capacity {}", self.capacity());
        self.len = len;
    }

    /// Appends bytes; the caller guarantees room (`len + data.len() <= capacity`).
    pub fn extend_from_slice(&mut self, data: &[u8]) {
        let end = self.len + data.len();
        assert!(end <= self.capacity(), "append of {} bytes beyond capacity", data.len());
        let start = self.len;
        self.full_mut()[start..end].copy_from_slice(data);
        self.len = end;
    }

    /// The whole capacity, initialised bytes all.
    pub(crate) fn full(&self) -> &[u8] {
        &self.bytes[self.start..self.start + self.cap]
    }
    pub(crate) fn full_mut(&mut self) -> &mut [u8] {
        &mut self.bytes[self.start..self.start + self.cap]
    }

    /// A copy with a larger capacity (same alignment and contents).
    #[cfg(test)]
    pub(crate) fn grown(&self, capacity: usize) -> AlignedBuf {
        let mut b = AlignedBuf::new(capacity.max(self.capacity()), self.align());
        b.extend_from_slice(self);
        b
    }
}

impl Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.full()[..self.len]
    }
}
impl DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        let len = self.len;
        &mut self.full_mut()[..len]
    }
}

impl std::fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AlignedBuf")
            .field("len", &self.len)
            .field("capacity", &self.capacity())
            .field("align", &self.align())
            .finish()
    }
}

impl Clone for AlignedBuf {
    fn clone(&self) -> Self {
        let mut b = AlignedBuf::new(self.capacity(), self.align());
        b.extend_from_slice(self);
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_and_zeroed() {
        for align in [512usize, 4096] {
            let mut b = AlignedBuf::new(1000, align);
            assert_eq!(b.as_ptr() as usize % align, 0);
            assert_eq!(b.capacity() % align, 0);
            assert!(b.full().iter().all(|&x| x == 0));
            b.extend_from_slice(b"abc");
            assert_eq!(&b[..], b"abc");
            let g = b.grown(10_000);
            assert_eq!(&g[..], b"abc");
            assert_eq!(g.as_ptr() as usize % align, 0);
            let moved = Box::new(g);
            assert_eq!(moved.as_ptr() as usize % align, 0, "moving the buffer keeps its bytes in place");
        }
    }
}
