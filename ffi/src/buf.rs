//! Byte buffers across the boundary: borrowed `(ptr, len)` inputs with NULL and length
//! checks, and library-owned [`ingero_buf`] outputs freed only by [`ingero_buf_free`].

use std::mem::MaybeUninit;
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

// `slice::from_raw_parts` needs `len * size_of::<T>() <= isize::MAX`: every byte limit
// [`input`] is called with must stay within it (a 32-bit target fails to build here).
const _: () = {
    assert!(INGERO_MAX_NAME_BYTES <= isize::MAX as usize);
    assert!(INGERO_MAX_CONFIG_BYTES <= isize::MAX as usize);
    assert!(INGERO_MAX_QUERY_BYTES <= isize::MAX as usize);
    assert!(INGERO_MAX_BATCH_BYTES <= isize::MAX as usize);
};

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
            // SAFETY: the only non-NULL `ptr` an `ingero_buf` ever gets from this library is
            // `Box::<[u8]>::into_raw` of a boxed slice of exactly `len` bytes (`from_vec`;
            // empty vectors give NULL, and `from_vec` never hands out a zero-length box).
            // The caller guarantees this buffer is such a one, unmodified and not yet
            // released; releasing resets it to `{NULL, 0}` below, so releasing the same
            // struct again is the NULL no-op. So `raw` is a live allocation of the global
            // allocator with the layout of `[u8; len]`, owned by nobody else.
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
        // SAFETY: per this function's contract `buf` is NULL (`as_mut` gives `None`) or
        // points to an aligned, initialised `ingero_buf` (two plain words: every bit pattern
        // is a valid value) that no other thread touches during the call.
        if let Some(b) = unsafe { buf.as_mut() } {
            // SAFETY: the contract says the struct is empty or exactly as this library filled
            // it, which is `release`'s precondition.
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
    // SAFETY: `ptr` is non-NULL (checked above) and a `u8` pointer is always aligned;
    // `len <= max`, and every `max` the callers pass is one of the `INGERO_MAX_*` limits,
    // all at most `isize::MAX` (asserted at compile time above). The caller guarantees `len`
    // readable bytes at `ptr` that nobody writes while the slice lives: every caller is an
    // exported function whose `# Safety` contract says so of its (ptr, len) arguments, and
    // uses the slice only inside that call (it is decoded or copied before returning).
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
    // SAFETY: `text` has exactly `input`'s contract, which its caller upholds.
    let bytes = unsafe { input(ptr, len, max, what) }?;
    std::str::from_utf8(bytes)
        .map_err(|_| Failure::with(INGERO_ERR_INVALID_UTF8, format!("{what}: not valid UTF-8")))
}

/// A required output pointer, as (possibly uninitialised) memory to write the output into
/// with `MaybeUninit::write`: callers from C need not initialise their outputs, and an
/// output is written only on success.
///
/// # Safety
/// `ptr` is NULL or aligned and valid for writes of a `T`, and the caller does not read or
/// write it until the exported call returns (each exported function's `# Safety` contract
/// says this of its output pointers).
pub(crate) unsafe fn out<'a, T>(
    ptr: *mut T,
    what: &str,
) -> Result<&'a mut MaybeUninit<T>, Failure> {
    // SAFETY: NULL gives `None` (an error below). Otherwise, per the contract, `ptr` is
    // aligned, valid for writes and unaliased for the call. `MaybeUninit<T>` has `T`'s layout
    // and any content, uninitialised bytes included, is a valid `MaybeUninit<T>`, so the
    // reference is valid whatever the caller left there (a `&mut T` would not be: an
    // uninitialised `bool` in `ingero_threshold` is an invalid value).
    unsafe { ptr.cast::<MaybeUninit<T>>().as_mut() }.ok_or_else(|| {
        Failure::with(
            INGERO_ERR_NULL_ARGUMENT,
            format!("{what}: output pointer is NULL"),
        )
    })
}

/// A required handle pointer.
///
/// # Safety
/// `ptr` is NULL or a handle this library returned (`Box::into_raw` in the `*_new`
/// functions) and not yet passed to its `*_free`, and no `*_free` of it runs during the
/// call (each exported function's contract and thread-safety note say so).
pub(crate) unsafe fn handle<'a, T>(ptr: *const T, what: &str) -> Result<&'a T, Failure> {
    // SAFETY: NULL gives `None` (an error below). Otherwise, per the contract, `ptr` points
    // to a live, initialised `T` owned by its `Box` until `*_free`, which does not run while
    // this shared reference is in use; handles are only ever read through `&T` (their
    // state is behind interior synchronisation), so no `&mut T` aliases it.
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
        // SAFETY: `b` was just filled by `from_vec`: `ptr` is a live 5-byte allocation.
        assert_eq!(unsafe { slice::from_raw_parts(b.ptr, b.len) }, b"hello");
        // SAFETY: `b` is a valid, exclusively borrowed buffer from this library.
        unsafe { ingero_buf_free(&mut b) };
        assert!(b.ptr.is_null());
        assert_eq!(b.len, 0);
        // SAFETY: `b` is now `{NULL, 0}`, the empty buffer the contract allows.
        unsafe { ingero_buf_free(&mut b) };
        // SAFETY: NULL is allowed.
        unsafe { ingero_buf_free(ptr::null_mut()) };
        let e = ingero_buf::from_vec(Vec::new());
        assert!(e.ptr.is_null());
    }

    #[test]
    fn inputs_check_null_and_length() {
        // SAFETY (all calls below): the pointers are NULL or point to live local arrays, and
        // every length that passes the checks is within the array it describes.
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

    #[test]
    fn outputs_and_handles_reject_null_and_write_uninitialised_memory() {
        // SAFETY: NULL is allowed.
        let e = unsafe { out::<u64>(ptr::null_mut(), "out_x") }.unwrap_err();
        assert_eq!(e.code, INGERO_ERR_NULL_ARGUMENT);
        assert_eq!(e.message.as_deref(), Some("out_x: output pointer is NULL"));
        // SAFETY: NULL is allowed.
        let e = unsafe { handle::<u64>(ptr::null(), "h") }.unwrap_err();
        assert_eq!(e.message.as_deref(), Some("h: handle is NULL"));
        // An uninitialised output is written without being read first.
        let mut slot = MaybeUninit::<(f64, bool)>::uninit();
        // SAFETY: `slot` is aligned, writable and not otherwise used during the call.
        unsafe { out(slot.as_mut_ptr(), "out") }
            .unwrap()
            .write((0.5, true));
        // SAFETY: written just above.
        assert_eq!(unsafe { slot.assume_init() }, (0.5, true));
        let v = 7u64;
        // SAFETY: `v` is live for the whole call.
        assert_eq!(*unsafe { handle(&v, "h") }.unwrap(), 7);
    }
}
