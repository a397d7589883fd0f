//! Extension handles (`ingero_threshold`): the threshold store's values and push headers for
//! a cluster, the agent and admin HTTP routes, config and telemetry.

use std::sync::Arc;

use ::ingero_extension::{ThresholdExtension, validate_cluster_id};
use component::api::{ApiRequest, ApiResponse};
use component::{ComponentId, EmptyHost, Extension, MetricFamily};

use crate::buf::{
    INGERO_MAX_CONFIG_BYTES, INGERO_MAX_NAME_BYTES, INGERO_MAX_QUERY_BYTES, handle, ingero_buf,
    out, text,
};
use crate::registry;
use crate::result::{
    Failure, INGERO_ERR_INTERNAL, INGERO_ERR_INVALID_ARGUMENT, INGERO_ERR_START,
    INGERO_NO_THRESHOLD, INGERO_OK, guard, guard_void, ingero_result,
};

/// An opaque extension instance (`ingero_threshold`).
#[allow(non_camel_case_types)]
#[derive(Debug)]
pub struct ingero_extension {
    id: ComponentId,
    inner: Arc<ThresholdExtension>,
}

impl ingero_extension {
    pub(crate) fn id(&self) -> &ComponentId {
        &self.id
    }

    pub(crate) fn shared(&self) -> Arc<dyn Extension> {
        self.inner.clone()
    }
}

/// A cluster's deliverable threshold.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
#[allow(non_camel_case_types)]
pub struct ingero_threshold {
    /// Within [0.1, 0.99].
    pub threshold: f64,
    pub quorum_met: bool,
}

/// Capacity of the inline header-value arrays of [`ingero_push_headers`].
pub const INGERO_HEADER_VALUE_CAP: usize = 32;

/// The two push-response header values of a cluster, as text (no allocation).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
#[allow(non_camel_case_types)]
pub struct ingero_push_headers {
    /// Value of `X-Ingero-Threshold` (gRPC `ingero-threshold`): `threshold[0..threshold_len]`.
    pub threshold: [u8; INGERO_HEADER_VALUE_CAP],
    pub threshold_len: usize,
    /// Value of `X-Ingero-Quorum-Met` (gRPC `ingero-quorum-met`): `true` or `false`.
    pub quorum_met: [u8; INGERO_HEADER_VALUE_CAP],
    pub quorum_met_len: usize,
}

/// One routed HTTP response. Release with `ingero_http_response_free`.
#[repr(C)]
#[derive(Debug)]
#[allow(non_camel_case_types)]
pub struct ingero_http_response {
    pub status: u16,
    /// `Content-Type` value.
    pub content_type: ingero_buf,
    /// Extra headers, one `Name: value\n` line each (e.g. `Allow`, `Cache-Control`).
    pub headers: ingero_buf,
    pub body: ingero_buf,
}

/// Create an extension from its id (`ingero_threshold[/name]`) and config (YAML or JSON;
/// empty means defaults). Errors as `ingero_processor_new`. Release with
/// `ingero_extension_free`.
///
/// Thread safety: any thread.
///
/// # Safety
/// `id`/`config` are NULL or valid for their lengths; `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ingero_extension_new(
    id: *const u8,
    id_len: usize,
    config: *const u8,
    config_len: usize,
    out_extension: *mut *mut ingero_extension,
) -> ingero_result {
    guard(|| {
        // SAFETY: forwarded from this function's contract.
        let id = unsafe { text(id, id_len, INGERO_MAX_NAME_BYTES, "id") }?;
        // SAFETY: as above.
        let cfg =
            unsafe { crate::buf::input(config, config_len, INGERO_MAX_CONFIG_BYTES, "config") }?;
        // SAFETY: `out_extension` is NULL or aligned and valid for writes, and not accessed by the
        // caller during this call (this function's contract).
        let slot = unsafe { out(out_extension, "out_extension") }?;
        let id = registry::parse_id(id)?;
        let value = registry::parse_config(cfg)?;
        let inner = registry::build_extension(id.kind(), &value)?;
        slot.write(Box::into_raw(Box::new(ingero_extension { id, inner })));
        Ok(INGERO_OK)
    })
}

/// Release an extension. NULL is a no-op. Processors started with it keep its store alive.
///
/// Thread safety: no other call may use `extension` concurrently or afterwards.
///
/// # Safety
/// `extension` is NULL or a handle from `ingero_extension_new` not yet freed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ingero_extension_free(extension: *mut ingero_extension) {
    guard_void(|| {
        if !extension.is_null() {
            // SAFETY: per the contract the handle came from `Box::into_raw` and is live.
            drop(unsafe { Box::from_raw(extension) });
        }
    });
}

/// Start the extension (it binds nothing: the host serves its routes). Idempotent.
///
/// Thread safety: any thread.
///
/// # Safety
/// `extension` is NULL or live.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ingero_extension_start(
    extension: *const ingero_extension,
) -> ingero_result {
    guard(|| {
        // SAFETY: `extension` is NULL or a live handle from this library, not freed during
        // this call (this function's contract).
        let e = unsafe { handle(extension, "extension") }?;
        e.inner
            .start(&EmptyHost)
            .map_err(|err| Failure::with(INGERO_ERR_START, format!("{}: {err}", e.id)))?;
        Ok(INGERO_OK)
    })
}

/// Stop the extension. Idempotent; the published thresholds stay readable.
///
/// Thread safety: any thread.
///
/// # Safety
/// `extension` is NULL or live.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ingero_extension_shutdown(
    extension: *const ingero_extension,
) -> ingero_result {
    guard(|| {
        // SAFETY: `extension` is NULL or a live handle from this library, not freed during
        // this call (this function's contract).
        unsafe { handle(extension, "extension") }?.inner.shutdown();
        Ok(INGERO_OK)
    })
}

/// The effective config (defaults filled in) as JSON, e.g.
/// `{"agent_endpoint":"127.0.0.1:8080","admin_endpoint":"127.0.0.1:8081","max_clusters":100000}`.
///
/// Thread safety: any thread.
///
/// # Safety
/// `extension` is NULL or live; `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ingero_extension_config_json(
    extension: *const ingero_extension,
    out_json: *mut ingero_buf,
) -> ingero_result {
    guard(|| {
        // SAFETY: `extension` is NULL or a live handle from this library, not freed during
        // this call (this function's contract).
        let e = unsafe { handle(extension, "extension") }?;
        // SAFETY: `out_json` is NULL or aligned and valid for writes, and not accessed by the
        // caller during this call (this function's contract).
        let slot = unsafe { out(out_json, "out_json") }?;
        slot.write(ingero_buf::from_vec(crate::to_json(e.inner.config())?));
        Ok(INGERO_OK)
    })
}

/// The deliverable threshold of a (decoded) cluster id: `INGERO_OK` with `*out` written, or
/// `INGERO_NO_THRESHOLD` (cold start or unknown cluster). A malformed id is
/// `INGERO_ERR_INVALID_ARGUMENT`.
///
/// Thread safety: any thread, lock-free.
///
/// # Safety
/// `extension` is NULL or live; `cluster_id` NULL or valid for its length; `out` NULL or
/// writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ingero_extension_threshold(
    extension: *const ingero_extension,
    cluster_id: *const u8,
    cluster_id_len: usize,
    out_threshold: *mut ingero_threshold,
) -> ingero_result {
    guard(|| {
        // SAFETY: `extension` is NULL or a live handle from this library, not freed during
        // this call (this function's contract).
        let e = unsafe { handle(extension, "extension") }?;
        // SAFETY: forwarded from this function's contract.
        let id = unsafe {
            text(
                cluster_id,
                cluster_id_len,
                INGERO_MAX_QUERY_BYTES,
                "cluster_id",
            )
        }?;
        // SAFETY: `out_threshold` is NULL or aligned and valid for writes, and not accessed by the
        // caller during this call (this function's contract).
        let slot = unsafe { out(out_threshold, "out_threshold") }?;
        checked_cluster(id)?;
        match e.inner.store().get(id) {
            Some(v) => {
                slot.write(ingero_threshold {
                    threshold: v.threshold(),
                    quorum_met: v.quorum_met(),
                });
                Ok(INGERO_OK)
            }
            None => Ok(INGERO_NO_THRESHOLD),
        }
    })
}

/// The push-response header values for a (decoded, validated) cluster id: `INGERO_OK` with
/// both values, or `INGERO_NO_THRESHOLD` (send neither header). Counted in the extension's
/// `ingero_threshold_headers_total{outcome="set"|"absent"}` exactly as the Rust host counts
/// a push. A malformed id is `INGERO_ERR_INVALID_ARGUMENT` (not counted: the host refuses
/// such a request before any lookup).
///
/// Thread safety: any thread, lock-free (the push hot path).
///
/// # Safety
/// As `ingero_extension_threshold`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ingero_extension_push_headers(
    extension: *const ingero_extension,
    cluster_id: *const u8,
    cluster_id_len: usize,
    out_headers: *mut ingero_push_headers,
) -> ingero_result {
    guard(|| {
        // SAFETY: `extension` is NULL or a live handle from this library, not freed during
        // this call (this function's contract).
        let e = unsafe { handle(extension, "extension") }?;
        // SAFETY: forwarded from this function's contract.
        let id = unsafe {
            text(
                cluster_id,
                cluster_id_len,
                INGERO_MAX_QUERY_BYTES,
                "cluster_id",
            )
        }?;
        // SAFETY: `out_headers` is NULL or aligned and valid for writes, and not accessed by the
        // caller during this call (this function's contract).
        let slot = unsafe { out(out_headers, "out_headers") }?;
        checked_cluster(id)?;
        let Some(h) = e.inner.store().push_headers(id) else {
            return Ok(INGERO_NO_THRESHOLD);
        };
        let mut headers = ingero_push_headers {
            threshold: [0; INGERO_HEADER_VALUE_CAP],
            threshold_len: 0,
            quorum_met: [0; INGERO_HEADER_VALUE_CAP],
            quorum_met_len: 0,
        };
        headers.threshold_len = copy_inline(h.threshold.as_bytes(), &mut headers.threshold)?;
        headers.quorum_met_len = copy_inline(h.quorum_met.as_bytes(), &mut headers.quorum_met)?;
        slot.write(headers);
        Ok(INGERO_OK)
    })
}

fn copy_inline(src: &[u8], dst: &mut [u8; INGERO_HEADER_VALUE_CAP]) -> Result<usize, Failure> {
    let target = dst.get_mut(..src.len()).ok_or_else(|| {
        Failure::with(
            INGERO_ERR_INTERNAL,
            format!(
                "header value of {} bytes exceeds the inline capacity",
                src.len()
            ),
        )
    })?;
    target.copy_from_slice(src);
    Ok(src.len())
}

fn checked_cluster(id: &str) -> Result<(), Failure> {
    validate_cluster_id(id).map_err(|m| Failure::with(INGERO_ERR_INVALID_ARGUMENT, m))
}

/// Answer a request to the agent listener (`agent_endpoint`): `GET /api/v1/threshold`.
/// `query` is the raw query string without `?` (`(NULL, 0)` when none). `*out` receives the
/// complete response; release it with `ingero_http_response_free`.
///
/// Thread safety: any thread.
///
/// # Safety
/// `extension` NULL or live; the text arguments NULL or valid for their lengths; `out` NULL
/// or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ingero_extension_route_agent(
    extension: *const ingero_extension,
    method: *const u8,
    method_len: usize,
    path: *const u8,
    path_len: usize,
    query: *const u8,
    query_len: usize,
    out_response: *mut ingero_http_response,
) -> ingero_result {
    // SAFETY: forwarded contract.
    unsafe {
        route(
            extension,
            (method, method_len),
            (path, path_len),
            (query, query_len),
            out_response,
            Listener::Agent,
        )
    }
}

/// Answer a request to the admin listener (`admin_endpoint`): `GET /api/v1/diagnostics`.
/// Same arguments and rules as `ingero_extension_route_agent`.
///
/// Thread safety: any thread.
///
/// # Safety
/// As `ingero_extension_route_agent`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ingero_extension_route_admin(
    extension: *const ingero_extension,
    method: *const u8,
    method_len: usize,
    path: *const u8,
    path_len: usize,
    query: *const u8,
    query_len: usize,
    out_response: *mut ingero_http_response,
) -> ingero_result {
    // SAFETY: forwarded contract.
    unsafe {
        route(
            extension,
            (method, method_len),
            (path, path_len),
            (query, query_len),
            out_response,
            Listener::Admin,
        )
    }
}

#[derive(Clone, Copy)]
enum Listener {
    Agent,
    Admin,
}

/// # Safety
/// As `ingero_extension_route_agent`.
unsafe fn route(
    extension: *const ingero_extension,
    method: (*const u8, usize),
    path: (*const u8, usize),
    query: (*const u8, usize),
    out_response: *mut ingero_http_response,
    listener: Listener,
) -> ingero_result {
    guard(|| {
        // SAFETY: `extension` is NULL or a live handle from this library, not freed during
        // this call (this function's contract).
        let e = unsafe { handle(extension, "extension") }?;
        // SAFETY: forwarded contract.
        let method = unsafe { text(method.0, method.1, INGERO_MAX_NAME_BYTES, "method") }?;
        // SAFETY: forwarded contract.
        let path = unsafe { text(path.0, path.1, INGERO_MAX_NAME_BYTES, "path") }?;
        // SAFETY: forwarded contract.
        let query = unsafe { text(query.0, query.1, INGERO_MAX_QUERY_BYTES, "query") }?;
        // SAFETY: `out_response` is NULL or aligned and valid for writes, and not accessed by the
        // caller during this call (this function's contract).
        let slot = unsafe { out(out_response, "out_response") }?;
        let req = ApiRequest {
            method,
            path,
            query: (!query.is_empty()).then_some(query),
        };
        let resp = match listener {
            Listener::Agent => e.inner.route_agent(&req),
            Listener::Admin => e.inner.route_admin(&req),
        };
        slot.write(http_response(resp));
        Ok(INGERO_OK)
    })
}

fn http_response(resp: ApiResponse) -> ingero_http_response {
    let mut headers = String::new();
    for (name, value) in &resp.headers {
        headers.push_str(name);
        headers.push_str(": ");
        headers.push_str(value);
        headers.push('\n');
    }
    ingero_http_response {
        status: resp.status,
        content_type: ingero_buf::from_vec(resp.content_type.as_bytes().to_vec()),
        headers: ingero_buf::from_vec(headers.into_bytes()),
        body: ingero_buf::from_vec(resp.body),
    }
}

/// Release the buffers of a routed response and reset it. NULL is a no-op; freeing twice
/// through the same struct is safe.
///
/// Thread safety: do not free the same response from two threads at once.
///
/// # Safety
/// `response` is NULL or a response filled by this library and not modified since.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ingero_http_response_free(response: *mut ingero_http_response) {
    guard_void(|| {
        // SAFETY: the caller passes NULL or a valid, exclusively used response.
        if let Some(r) = unsafe { response.as_mut() } {
            // SAFETY: its buffers came from this library.
            unsafe {
                r.content_type.release();
                r.headers.release();
                r.body.release();
            }
            r.status = 0;
        }
    });
}

/// The extension's self-metrics as JSON (same shape as `ingero_processor_telemetry_json`).
///
/// Thread safety: any thread.
///
/// # Safety
/// `extension` NULL or live; `out` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ingero_extension_telemetry_json(
    extension: *const ingero_extension,
    out_json: *mut ingero_buf,
) -> ingero_result {
    guard(|| {
        // SAFETY: `extension` is NULL or a live handle from this library, not freed during
        // this call (this function's contract).
        let e = unsafe { handle(extension, "extension") }?;
        // SAFETY: `out_json` is NULL or aligned and valid for writes, and not accessed by the
        // caller during this call (this function's contract).
        let slot = unsafe { out(out_json, "out_json") }?;
        let mut fams: Vec<MetricFamily> = Vec::new();
        e.inner.telemetry(&mut fams);
        slot.write(ingero_buf::from_vec(crate::families_json(&fams)?));
        Ok(INGERO_OK)
    })
}
