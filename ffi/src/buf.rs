//! Byte buffers across the boundary: borrowed `(ptr, len)` inputs with NULL and length
//! checks, and library-owned [`ingero_buf`] outputs freed only by [`ingero_buf_free`].

use std::ptr;
use std::slice;

use crate::result::{
    Failure, INGERO_ERR_INVALID_LENGTH, INGERO_ERR_INVALID_UTF8, INGERO_ERR_NULL_ARGUMENT,
    guard_void,
};

/// Longest accepted component type or id, HTTP method or path, in bytes.
pub const INGERO_MAX_NAME_BYTES: usize = 4096;
/// Longest accepted config document, in bytes (64 MiB).
pub const INGERO_MAX_CONFIG_BYTES: usize = 67_108_864;
/// Longest accepted query string or cluster id argument, in bytes (64 KiB).
pub const INGERO_MAX_QUERY_BYTES: usize = 65_536;
/// Largest accepted metrics batch, in bytes (2 GiB).
pub const INGERO_MAX_BATCH_BYTES: usize = 2_147_483_648;
/// Most extensions one `ingero_processor_start` call accepts.
pub const INGERO_MAX_EXTENSIONS: usize = 1024;

/// A byte buffer owned by the library. Release it with [`ingero_buf_free`] and nothing
/// else. An empty buffer is `{NULL, 0}`.
#[repr(C)]
#[derive(Debug)]
#[allow(non_camel_case_types)]
pub struct ingero_buf {
    pub ptr: *mut u8,
    pub len: usize,
}

impl ingero_buf {
    pub(crate) const EMPTY: ingero_buf = ingero_buf {
        ptr: ptr::null_mut(),
        len: 0,
    };

    /// Hand `bytes` over to the caller.
    pub(crate) fn from_vec(bytes: Vec<u8>) -> ingero_buf {
        if bytes.is_empty() {
            return ingero_buf::EMPTY;
        }
        let boxed: Box<[u8]> = bytes.into_boxed_slice();
        let len = boxed.len();
        let ptr = Box::into_raw(boxed).cast::<u8>();
        ingero_buf { ptr, len }
    }

    /// Take back what [`ingero_buf::from_vec`] handed out and reset `self` to empty.
    ///
    /// # Safety
    /// `self` must be empty or exactly what `from_vec` returned, not yet released.
    pub(crate) unsafe fn release(&mut self) {
        if !self.ptr.is_null() {
            let raw = ptr::slice_from_raw_parts_mut(self.ptr, self.len);
            // SAFETY: per the contract, `raw` came from `Box::<[u8]>::into_raw` with this
            // exact length and has not been freed.
            drop(unsafe { Box::from_raw(raw) });
        }
        *self = ingero_buf::EMPTY;
    }
}

/// Free a buffer the library returned and reset it to `{NULL, 0}`. `buf == NULL` and an
/// empty buffer are no-ops, so freeing twice through the same struct is safe.
///
/// Thread safety: do not free the same buffer from two threads at once.
///
/// # Safety
/// `buf` is NULL or points to an `ingero_buf` that is empty or was filled by this library
/// and not modified since.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ingero_buf_free(buf: *mut ingero_buf) {
    guard_void(|| {
        // SAFETY: the caller passes NULL or a valid, exclusively used `ingero_buf`.
        if let Some(b) = unsafe { buf.as_mut() } {
            // SAFETY: per the contract the buffer came from this library.
            unsafe { b.release() };
        }
    });
}

/// Borrow a `(ptr, len)` input. `(NULL, 0)` is the empty slice; `(NULL, n > 0)` is
/// `INGERO_ERR_NULL_ARGUMENT`; `len > max` is `INGERO_ERR_INVALID_LENGTH`.
///
/// # Safety
/// When non-NULL, `ptr` must be valid for reads of `len` bytes for the duration of the call.
pub(crate) unsafe fn input<'a>(
    ptr: *const u8,
    len: usize,
    max: usize,
    what: &str,
) -> Result<&'a [u8], Failure> {
    if len > max {
        return Err(Failure::with(
            INGERO_ERR_INVALID_LENGTH,
            format!("{what}: length {len} exceeds the limit of {max} bytes"),
        ));
    }
    if ptr.is_null() {
        return if len == 0 {
            Ok(&[])
        } else {
            Err(Failure::with(
                INGERO_ERR_NULL_ARGUMENT,
                format!("{what}: NULL pointer with length {len}"),
            ))
        };
    }
    // SAFETY: non-NULL, `len <= max <= isize::MAX`, and the caller guarantees validity.
    Ok(unsafe { slice::from_raw_parts(ptr, len) })
}

/// Borrow a UTF-8 text input (same rules as [`input`]).
///
/// # Safety
/// As [`input`].
pub(crate) unsafe fn text<'a>(
    ptr: *const u8,
    len: usize,
    max: usize,
    what: &str,
) -> Result<&'a str, Failure> {
    // SAFETY: forwarded contract.
    let bytes = unsafe { input(ptr, len, max, what) }?;
    std::str::from_utf8(bytes)
        .map_err(|_| Failure::with(INGERO_ERR_INVALID_UTF8, format!("{what}: not valid UTF-8")))
}

/// A required output pointer.
pub(crate) fn out<'a, T>(ptr: *mut T, what: &str) -> Result<&'a mut T, Failure> {
    // SAFETY: the caller of the exported function passes NULL or a valid, writable `T`;
    // NULL is rejected here.
    unsafe { ptr.as_mut() }.ok_or_else(|| {
        Failure::with(
            INGERO_ERR_NULL_ARGUMENT,
            format!("{what}: output pointer is NULL"),
        )
    })
}

/// A required handle pointer.
pub(crate) fn handle<'a, T>(ptr: *const T, what: &str) -> Result<&'a T, Failure> {
    // SAFETY: the caller passes NULL or a live handle from this library; NULL is rejected.
    unsafe { ptr.as_ref() }
        .ok_or_else(|| Failure::with(INGERO_ERR_NULL_ARGUMENT, format!("{what}: handle is NULL")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_round_trip_and_free_twice_safely() {
        let mut b = ingero_buf::from_vec(b"hello".to_vec());
        assert_eq!(b.len, 5);
        assert_eq!(unsafe { slice::from_raw_parts(b.ptr, b.len) }, b"hello");
        unsafe { ingero_buf_free(&mut b) };
        assert!(b.ptr.is_null());
        assert_eq!(b.len, 0);
        unsafe { ingero_buf_free(&mut b) };
        unsafe { ingero_buf_free(ptr::null_mut()) };
        let e = ingero_buf::from_vec(Vec::new());
        assert!(e.ptr.is_null());
    }

    #[test]
    fn inputs_check_null_and_length() {
        assert_eq!(unsafe { input(ptr::null(), 0, 10, "x") }.unwrap(), b"");
        let e = unsafe { input(ptr::null(), 3, 10, "x") }.unwrap_err();
        assert_eq!(e.code, INGERO_ERR_NULL_ARGUMENT);
        let data = [1u8, 2, 3];
        let e = unsafe { input(data.as_ptr(), usize::MAX, 10, "x") }.unwrap_err();
        assert_eq!(e.code, INGERO_ERR_INVALID_LENGTH);
        assert!(e.message.unwrap().contains("x: length"));
        let bad = [0xffu8, 0xfe];
        let e = unsafe { text(bad.as_ptr(), 2, 10, "id") }.unwrap_err();
        assert_eq!(e.code, INGERO_ERR_INVALID_UTF8);
    }
}
