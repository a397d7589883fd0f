//! Result codes, the thread-local last-error message, and the panic boundary every exported
//! function runs inside.

use std::cell::RefCell;
use std::ffi::c_char;
use std::panic::{AssertUnwindSafe, catch_unwind};

/// What an `ingero_*` call did. Numbers are append-only: a value, once released, keeps its
/// meaning forever; new codes get new numbers.
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub enum ingero_result {
    /// Success; outputs were written.
    INGERO_OK = 0,
    /// Success without a value: the cluster has no deliverable threshold (cold start or
    /// unknown), so no headers are sent. Outputs were not written.
    INGERO_NO_THRESHOLD = 1,
    /// A required pointer argument was NULL (or a buffer was NULL with a non-zero length).
    INGERO_ERR_NULL_ARGUMENT = 2,
    /// A length exceeds what that argument accepts (see the `INGERO_MAX_*` limits).
    INGERO_ERR_INVALID_LENGTH = 3,
    /// A text argument (type, id, cluster id, path, ...) is not valid UTF-8.
    INGERO_ERR_INVALID_UTF8 = 4,
    /// The component type is not one this library provides.
    INGERO_ERR_UNKNOWN_TYPE = 5,
    /// The config is invalid; `ingero_last_error` has every problem with its key path.
    INGERO_ERR_INVALID_CONFIG = 6,
    /// The metrics bytes are not a valid OTLP `MetricsData` / `ExportMetricsServiceRequest`.
    INGERO_ERR_DECODE = 7,
    /// The component failed to start; `ingero_last_error` says why.
    INGERO_ERR_START = 8,
    /// An argument is well formed but not acceptable (e.g. a malformed cluster id);
    /// `ingero_last_error` says why.
    INGERO_ERR_INVALID_ARGUMENT = 9,
    /// A Rust panic was caught at the boundary; the call had no effect on the outputs.
    INGERO_ERR_PANIC = 10,
    /// An internal limit or invariant failed (a bug); `ingero_last_error` says which.
    INGERO_ERR_INTERNAL = 11,
    /// The type names a processor where an extension was asked for, or the reverse.
    INGERO_ERR_WRONG_KIND = 12,
}

pub use ingero_result::*;

impl ingero_result {
    /// A static, NUL-terminated description.
    pub(crate) fn message(self) -> &'static [u8] {
        match self {
            INGERO_OK => b"ok\0",
            INGERO_NO_THRESHOLD => b"no threshold for this cluster\0",
            INGERO_ERR_NULL_ARGUMENT => b"a required pointer argument was NULL\0",
            INGERO_ERR_INVALID_LENGTH => b"a length argument is out of range\0",
            INGERO_ERR_INVALID_UTF8 => b"a text argument is not valid UTF-8\0",
            INGERO_ERR_UNKNOWN_TYPE => b"unknown component type\0",
            INGERO_ERR_INVALID_CONFIG => b"invalid component config\0",
            INGERO_ERR_DECODE => b"invalid OTLP metrics protobuf\0",
            INGERO_ERR_START => b"component failed to start\0",
            INGERO_ERR_INVALID_ARGUMENT => b"invalid argument\0",
            INGERO_ERR_PANIC => b"a panic was caught in the Rust library\0",
            INGERO_ERR_INTERNAL => b"internal error\0",
            INGERO_ERR_WRONG_KIND => b"component type is of the wrong kind for this call\0",
        }
    }
}

/// A failed call: its code and, where useful, a message for `ingero_last_error`.
#[derive(Debug)]
pub(crate) struct Failure {
    pub code: ingero_result,
    pub message: Option<String>,
}

impl Failure {
    pub fn code(code: ingero_result) -> Self {
        Failure {
            code,
            message: None,
        }
    }

    pub fn with(code: ingero_result, message: impl Into<String>) -> Self {
        Failure {
            code,
            message: Some(message.into()),
        }
    }
}

impl From<ingero_result> for Failure {
    fn from(code: ingero_result) -> Self {
        Failure::code(code)
    }
}

thread_local! {
    static LAST_ERROR: RefCell<Option<String>> = const { RefCell::new(None) };
}

pub(crate) fn set_last_error(msg: Option<String>) {
    // `try_with`: during thread teardown the slot may be gone; losing a message then is fine.
    let _ = LAST_ERROR.try_with(|e| *e.borrow_mut() = msg);
}

pub(crate) fn last_error() -> Option<String> {
    LAST_ERROR.try_with(|e| e.borrow().clone()).ok().flatten()
}

/// Run an entry point's body inside the panic boundary. The thread's last error is cleared
/// first and set again on failure (to the failure's message, else the code's description).
pub(crate) fn guard(body: impl FnOnce() -> Result<ingero_result, Failure>) -> ingero_result {
    set_last_error(None);
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(code)) => code,
        Ok(Err(f)) => {
            let msg = f.message.unwrap_or_else(|| describe(f.code).to_string());
            set_last_error(Some(msg));
            f.code
        }
        Err(payload) => {
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| (*s).to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "non-string panic payload".to_string());
            set_last_error(Some(format!("panic caught at the C ABI boundary: {what}")));
            INGERO_ERR_PANIC
        }
    }
}

/// The same boundary for functions with no result to report (`*_free`).
pub(crate) fn guard_void(body: impl FnOnce()) {
    if catch_unwind(AssertUnwindSafe(body)).is_err() {
        set_last_error(Some(
            "panic caught at the C ABI boundary while freeing".into(),
        ));
    }
}

/// The description of a code without its trailing NUL.
pub(crate) fn describe(code: ingero_result) -> &'static str {
    let m = code.message();
    std::str::from_utf8(m.strip_suffix(b"\0").unwrap_or(m)).unwrap_or("")
}

pub(crate) fn message_ptr(code: u32) -> *const c_char {
    let known = [
        INGERO_OK,
        INGERO_NO_THRESHOLD,
        INGERO_ERR_NULL_ARGUMENT,
        INGERO_ERR_INVALID_LENGTH,
        INGERO_ERR_INVALID_UTF8,
        INGERO_ERR_UNKNOWN_TYPE,
        INGERO_ERR_INVALID_CONFIG,
        INGERO_ERR_DECODE,
        INGERO_ERR_START,
        INGERO_ERR_INVALID_ARGUMENT,
        INGERO_ERR_PANIC,
        INGERO_ERR_INTERNAL,
        INGERO_ERR_WRONG_KIND,
    ];
    let msg: &'static [u8] = known
        .iter()
        .find(|c| **c as u32 == code)
        .map_or(b"unknown result code\0", |c| c.message());
    msg.as_ptr().cast()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_message_is_nul_terminated_and_unique() {
        let mut seen = std::collections::HashSet::new();
        for code in 0..=12u32 {
            let p = message_ptr(code);
            // SAFETY: `message_ptr` returns a pointer into a `&'static [u8]` literal that
            // ends in its only NUL (the test checks every code's message this way).
            let s = unsafe { std::ffi::CStr::from_ptr(p) }.to_str().unwrap();
            assert!(!s.is_empty() && s != "unknown result code", "{code}");
            assert!(seen.insert(s), "duplicate message {s}");
        }
        let p = message_ptr(9999);
        assert_eq!(
            // SAFETY: as above: the static, NUL-terminated fallback message.
            unsafe { std::ffi::CStr::from_ptr(p) }.to_str().unwrap(),
            "unknown result code"
        );
    }

    #[test]
    fn codes_keep_their_numbers() {
        // Append-only: these numbers are part of the ABI.
        assert_eq!(INGERO_OK as u32, 0);
        assert_eq!(INGERO_NO_THRESHOLD as u32, 1);
        assert_eq!(INGERO_ERR_NULL_ARGUMENT as u32, 2);
        assert_eq!(INGERO_ERR_INVALID_CONFIG as u32, 6);
        assert_eq!(INGERO_ERR_PANIC as u32, 10);
        assert_eq!(INGERO_ERR_WRONG_KIND as u32, 12);
    }

    #[test]
    fn a_panic_becomes_a_code_and_a_message() {
        let code = guard(|| panic!("boom {}", 7));
        assert_eq!(code, INGERO_ERR_PANIC);
        assert!(last_error().unwrap().contains("boom 7"));
        // The next call clears it.
        assert_eq!(guard(|| Ok(INGERO_OK)), INGERO_OK);
        assert_eq!(last_error(), None);
    }

    #[test]
    fn a_failure_without_message_reports_the_code_description() {
        let code = guard(|| Err(Failure::code(INGERO_ERR_NULL_ARGUMENT)));
        assert_eq!(code, INGERO_ERR_NULL_ARGUMENT);
        assert_eq!(
            last_error().as_deref(),
            Some("a required pointer argument was NULL")
        );
    }
}
