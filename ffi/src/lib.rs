//! `ingero_fleet`: one C ABI over every Ingero Fleet component, for the Go collector shim
//! (`go-shim/`) and any other host that speaks C.
//!
//! # Design notes
//!
//! - **One library, all components.** Two Rust static libraries in one Go binary collide on
//!   their copies of `std`, so every component is behind this one `staticlib`/`cdylib`, and
//!   every exported symbol starts with `ingero_`.
//! - **Same code as `ingero-fleet`.** Configs are parsed with
//!   [`component::config::parse_yaml`] (YAML or JSON) and built with each crate's `create`,
//!   so both hosts accept and reject exactly the same configs with the same key paths.
//!   Batches are OTLP protobuf (`MetricsData`, which is wire-identical to
//!   `ExportMetricsServiceRequest`) decoded with prost; the processors' `process` / `tick` /
//!   `start` / `shutdown` are the ones the Rust host calls.
//! - **Handles.** `ingero_processor` and `ingero_extension` are opaque; `*_new` / `*_free`
//!   pairs, `*_free(NULL)` is a no-op. A processor is started with a list of extension
//!   handles, which becomes the [`component::Host`] its `start` searches, exactly like
//!   `host.GetExtensions()` in Go.
//! - **Buffers.** Inputs are `(ptr, len)` pairs, checked for NULL and against the
//!   `INGERO_MAX_*` limits. Outputs the library allocates are [`buf::ingero_buf`] (or a struct
//!   of them) and are released only with `ingero_buf_free` / `ingero_http_response_free`.
//!   Outputs are written only when the call succeeds.
//! - **Errors.** Every function returns an append-only numbered [`result::ingero_result`];
//!   `ingero_result_message` describes a code; `ingero_last_error` returns the last failure's
//!   detailed message on the calling thread (config errors: one `key.path: message` per
//!   line). Every call clears it first. A Go caller that needs the message locks its
//!   goroutine to the OS thread for the call pair.
//! - **Panics.** Every exported body runs inside `catch_unwind`: a panic becomes
//!   `INGERO_ERR_PANIC` and never unwinds into C (or aborts the Go collector).
//! - **Pass-through processors.** `ingero` and `nccl_peer_lag` only read the batch, and only
//!   a few metrics of it: for them the batch is decoded selectively ([`select`]: the other
//!   metrics are skipped at the wire level) and `process` reports `modified = false` without
//!   re-encoding (debug builds assert the batch really is unchanged), so the Go side keeps
//!   its own `pmetric.Metrics` and skips an unmarshal. `provider_lookup` enriches the batch; its result is re-encoded and returned
//!   only when it differs from the input.
//!
//! The header `include/ingero_fleet.h` is generated from this crate by a pinned cbindgen
//! (`tests/it/header.rs` fails when it is stale; `INGERO_BLESS=1` rewrites it).

// With the `mimalloc` feature (the Go shim's build) the library's own allocations use
// mimalloc; the host program's malloc is untouched (no `override`). Memory handed to
// callers is freed only through the library's free functions, so it always returns to the
// allocator it came from. Without the feature (C smoke test under ASan) it is the system's.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

pub mod buf;
pub mod cluster;
pub mod extension;
pub mod processor;
pub mod registry;
pub mod result;
pub mod select;

use std::ffi::c_char;

use component::MetricFamily;
use serde::Serialize;

pub use buf::{ingero_buf, ingero_buf_free};
pub use extension::{
    ingero_extension, ingero_http_response, ingero_push_headers, ingero_threshold,
};
pub use processor::{ingero_process_result, ingero_processor};
pub use result::ingero_result;

use crate::buf::{INGERO_MAX_CONFIG_BYTES, INGERO_MAX_NAME_BYTES, input, out, text};
use crate::result::{Failure, INGERO_ERR_INTERNAL, INGERO_OK, guard};

/// The ABI version of this library. It changes whenever a released function, struct or
/// result code changes meaning (additions that old callers cannot observe keep it). A host
/// compares `ingero_abi_version()` with the `INGERO_ABI_VERSION` of the header it was built
/// against and refuses to run on a mismatch.
pub const INGERO_ABI_VERSION: u32 = 1;

const VERSION: &[u8] = concat!(env!("CARGO_PKG_VERSION"), "\0").as_bytes();

/// The ABI version of the linked library (see `INGERO_ABI_VERSION`).
///
/// Thread safety: any thread.
#[unsafe(no_mangle)]
pub extern "C" fn ingero_abi_version() -> u32 {
    INGERO_ABI_VERSION
}

/// The library version (`0.1.0`), a static NUL-terminated string. Do not free it.
///
/// Thread safety: any thread.
#[unsafe(no_mangle)]
pub extern "C" fn ingero_version() -> *const c_char {
    VERSION.as_ptr().cast()
}

/// A static, NUL-terminated description of a result code (`unknown result code` for a
/// number this library does not know). Do not free it.
///
/// Thread safety: any thread.
#[unsafe(no_mangle)]
pub extern "C" fn ingero_result_message(code: u32) -> *const c_char {
    result::message_ptr(code)
}

/// The detailed message of the last failed call on this thread (empty when the last call
/// succeeded). `*out` receives a copy; free it with `ingero_buf_free`. This call does not
/// clear the message.
///
/// Thread safety: per thread.
///
/// # Safety
/// `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ingero_last_error(out_message: *mut ingero_buf) -> ingero_result {
    let msg = result::last_error();
    let code = guard(|| {
        // SAFETY: `out_message` is NULL or aligned and valid for writes, and not accessed by the
        // caller during this call (this function's contract).
        let slot = unsafe { out(out_message, "out_message") }?;
        slot.write(ingero_buf::from_vec(
            msg.clone().map(String::into_bytes).unwrap_or_default(),
        ));
        Ok(INGERO_OK)
    });
    if code == INGERO_OK {
        // `guard` cleared the slot on entry; reading it must not lose it.
        result::set_last_error(msg);
    }
    code
}

/// Validate a config for a component type (`ingero`, `provider_lookup`, `nccl_peer_lag`,
/// `ingero_threshold`) exactly as creating it would, without keeping anything.
/// `INGERO_ERR_INVALID_CONFIG` lists every problem in `ingero_last_error`, one
/// `key.path: message` per line, paths relative to the component.
///
/// Thread safety: any thread.
///
/// # Safety
/// `component_type`/`config` are NULL or valid for their lengths.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ingero_config_validate(
    component_type: *const u8,
    component_type_len: usize,
    config: *const u8,
    config_len: usize,
) -> ingero_result {
    guard(|| {
        // SAFETY: forwarded contract.
        let kind = unsafe {
            text(
                component_type,
                component_type_len,
                INGERO_MAX_NAME_BYTES,
                "component_type",
            )
        }?;
        // SAFETY: forwarded contract.
        let cfg = unsafe { input(config, config_len, INGERO_MAX_CONFIG_BYTES, "config") }?;
        let value = registry::parse_config(cfg)?;
        registry::validate(kind, &value)?;
        Ok(INGERO_OK)
    })
}

pub(crate) fn to_json<T: Serialize + ?Sized>(v: &T) -> Result<Vec<u8>, Failure> {
    serde_json::to_vec(v)
        .map_err(|e| Failure::with(INGERO_ERR_INTERNAL, format!("JSON encoding failed: {e}")))
}

pub(crate) fn families_json(fams: &[MetricFamily]) -> Result<Vec<u8>, Failure> {
    to_json(fams)
}

#[cfg(test)]
mod tests;
