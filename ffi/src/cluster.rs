//! Which cluster a push names, decided exactly as the `ingero-fleet` receivers decide it, so
//! the Go middleware refuses and accepts the same requests:
//!
//! 1. the `cluster_id` query parameter (percent-decoded; given twice, empty, over 256 bytes
//!    or with control characters: refused with 400);
//! 2. else the `ingero.cluster.id` request header (gRPC: `cluster_id`, then
//!    `ingero.cluster.id` metadata): visible ASCII and the same id rule;
//! 3. else the first resource's `ingero.cluster.id` attribute that passes the id rule (the
//!    host checks it with `ingero_validate_cluster_id`).

use ingero_extension::{header_cluster_id, validate_cluster_id};

use crate::buf::{INGERO_MAX_QUERY_BYTES, ingero_buf, input, out, text};
use crate::result::{Failure, INGERO_ERR_INVALID_ARGUMENT, INGERO_OK, guard, ingero_result};

/// The cluster named by a raw query string (without `?`): `INGERO_OK` with `*out` holding the
/// decoded id, or empty when the query has no `cluster_id`. A malformed or repeated
/// parameter is `INGERO_ERR_INVALID_ARGUMENT`, with the message the Rust host answers 400
/// with (`cluster_id: ...`) in `ingero_last_error`.
///
/// Thread safety: any thread.
///
/// # Safety
/// `query` NULL or valid for `query_len` bytes; `out` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ingero_query_cluster(
    query: *const u8,
    query_len: usize,
    out_cluster_id: *mut ingero_buf,
) -> ingero_result {
    guard(|| {
        // SAFETY: forwarded contract.
        let query = unsafe { text(query, query_len, INGERO_MAX_QUERY_BYTES, "query") }?;
        // SAFETY: `out_cluster_id` is NULL or aligned and valid for writes, and not accessed by the
        // caller during this call (this function's contract).
        let slot = unsafe { out(out_cluster_id, "out_cluster_id") }?;
        let id = query_cluster(query)?;
        slot.write(ingero_buf::from_vec(
            id.map(String::into_bytes).unwrap_or_default(),
        ));
        Ok(INGERO_OK)
    })
}

fn query_cluster(query: &str) -> Result<Option<String>, Failure> {
    // The host's rule, message for message (`ingero_extension::push_cluster`).
    ingero_extension::push_cluster(Some(query), None)
        .map(|c| c.map(|c| c.into_owned()))
        .map_err(|e| Failure::with(INGERO_ERR_INVALID_ARGUMENT, e))
}

/// Check a cluster id taken from a request header or gRPC metadata value: visible ASCII
/// (and tab) only, then the id rule. `INGERO_ERR_INVALID_ARGUMENT` with the reason (without
/// the header name; the host prefixes `ingero.cluster.id header: ` or `KEY metadata: `).
///
/// Thread safety: any thread.
///
/// # Safety
/// `value` NULL or valid for `value_len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ingero_validate_header_cluster_id(
    value: *const u8,
    value_len: usize,
) -> ingero_result {
    guard(|| {
        // SAFETY: forwarded contract.
        let bytes = unsafe { input(value, value_len, INGERO_MAX_QUERY_BYTES, "value") }?;
        header_cluster_id(bytes).map_err(|e| Failure::with(INGERO_ERR_INVALID_ARGUMENT, e))?;
        Ok(INGERO_OK)
    })
}

/// Check a decoded cluster id (e.g. a resource attribute): non-empty, at most 256 bytes, no
/// control characters or line breaks. `INGERO_ERR_INVALID_ARGUMENT` with the reason.
///
/// Thread safety: any thread.
///
/// # Safety
/// `cluster_id` NULL or valid for `cluster_id_len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ingero_validate_cluster_id(
    cluster_id: *const u8,
    cluster_id_len: usize,
) -> ingero_result {
    guard(|| {
        // SAFETY: forwarded contract.
        let s = unsafe {
            text(
                cluster_id,
                cluster_id_len,
                INGERO_MAX_QUERY_BYTES,
                "cluster_id",
            )
        }?;
        validate_cluster_id(s).map_err(|e| Failure::with(INGERO_ERR_INVALID_ARGUMENT, e))?;
        Ok(INGERO_OK)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_rules_match_the_rust_host() {
        assert_eq!(
            query_cluster("cluster_id=prod").unwrap().as_deref(),
            Some("prod")
        );
        assert_eq!(query_cluster("").unwrap(), None);
        assert_eq!(query_cluster("x=1").unwrap(), None);
        assert_eq!(
            query_cluster("cluster_id=b+c%2Dd").unwrap().as_deref(),
            Some("b c-d")
        );
        for (q, msg) in [
            ("cluster_id=", "cluster_id: cluster_id is empty"),
            (
                "cluster_id=a&cluster_id=b",
                "cluster_id: query parameter cluster_id given more than once",
            ),
            (
                "cluster_id=a%0d%0aX-Evil:%201",
                "cluster_id: cluster_id contains a control character or line break",
            ),
        ] {
            let e = query_cluster(q).unwrap_err();
            assert_eq!(e.code, INGERO_ERR_INVALID_ARGUMENT);
            assert_eq!(e.message.as_deref(), Some(msg), "{q}");
        }
    }
}
