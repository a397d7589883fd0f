//! OTLP metrics bodies as the HTTP receiver decodes them
//! (`collector_host::receiver::decode`): optional gzip, then protobuf or JSON.
//!
//! Invariants checked beyond "no panic":
//! - gzip: an accepted body is never larger than the limit; an oversized one is refused
//!   with `DecompressedTooLarge` (HTTP 413) and nothing else.
//! - every decode error maps to HTTP 400/413/415 with a non-empty message and reason.
//! - protobuf: the receiver's pooled reader (`receiver::otlp_proto`) gives prost's result
//!   or prost's error, also when it decodes into buffers a previous request left in the
//!   pool; a decoded request re-encodes to bytes that decode to the same request (compared
//!   as bytes, so NaN values compare equal).
//! - JSON: a decode into the batch the thread kept, and a replay of the shape of the body
//!   before it (that body itself, or it with its digits changed, handed back unchanged),
//!   give what a decode on a thread with nothing kept or recorded gives.
//! - JSON: a decoded request, re-encoded to protobuf, decodes to the same thing; written
//!   back as OTLP/JSON (opentelemetry-proto's serializer) it is accepted again (unless a
//!   repeated double field holds a non-finite value, which the serializer writes as
//!   `null`), and after that one round (which turns non-finite doubles into absent values)
//!   the JSON round trip is a fixed point.

use collector_host::receiver::decode::{self, BodyEncoding, DecodeError};
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use prost::Message;

/// Decompression limit of the gzip path in the targets (the receiver's default is larger;
/// a small one makes the 413 branch reachable).
pub const GZIP_LIMIT: u64 = 256 * 1024;

/// Protobuf bodies (gzip-compressed ones when they start with the gzip magic).
pub fn otlp_proto(data: &[u8]) {
    for body in bodies(data) {
        same_as_prost(&body);
        if let Ok(req) = decode_checked(BodyEncoding::Protobuf, &body) {
            proto_round_trip(&req);
            json_round_trip(&req);
        }
    }
}

/// OTLP/JSON bodies (gzip-compressed ones when they start with the gzip magic).
pub fn otlp_json(data: &[u8]) {
    for body in bodies(data) {
        same_in_place(&body);
        if let Ok(req) = decode_checked(BodyEncoding::Json, &body) {
            proto_round_trip(&req);
            json_round_trip(&req);
        }
    }
}

/// The pooled reader against prost, twice: the second decode reuses the first one's
/// strings and vectors.
fn same_as_prost(body: &[u8]) {
    use collector_host::receiver::otlp_proto;
    let want = ExportMetricsServiceRequest::decode(body).map(|r| r.encode_to_vec());
    for _ in 0..2 {
        let got = otlp_proto::decode_metrics(body);
        match (&got, &want) {
            (Ok(a), Ok(b)) => assert_eq!(&a.encode_to_vec(), b, "pooled reader differs from prost"),
            (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string()),
            (a, b) => panic!("pooled reader {a:?}, prost {b:?}"),
        }
        if let Ok(req) = got {
            component::recycle::recycle_on_this_thread(req.resource_metrics);
        }
    }
}

/// The JSON decoder reading into a batch the thread kept whole gives what a decode with
/// nothing kept gives (the request, or the error word for word): after an agent push of
/// another shape, and after this body itself.
fn same_in_place(body: &[u8]) {
    let decode = |b: &[u8]| {
        decode::decode_metrics(BodyEncoding::Json, b)
            .map(|r| r.encode_to_vec())
            .map_err(|e| e.to_string())
    };
    // Nothing kept or recorded on this thread.
    let forget = || {
        drop(component::recycle::take_thread_pool());
        collector_host::receiver::otlp_json::forget_shape();
    };
    forget();
    let fresh = decode(body);
    let push = testkit::AgentPush::new("c", "n", 0.5)
        .gpu("NVIDIA H100 80GB HBM3", 8)
        .to_json();
    for earlier in [push.as_bytes(), body] {
        if let Ok(req) = decode::decode_metrics(BodyEncoding::Json, earlier) {
            component::recycle::recycle_on_this_thread(req.resource_metrics);
        }
        assert_eq!(decode(body), fresh, "read in place, not as a fresh decode");
    }
    // Replayed (`otlp_json`'s shape replay): after the body itself, handed back unchanged
    // with its origin, and after it with its digits changed (other values, same shape
    // mostly), and back.
    let shifted: Vec<u8> = body
        .iter()
        .map(|&b| if b.is_ascii_digit() { b'0' + (b - b'0' + 3) % 10 } else { b })
        .collect();
    forget();
    let fresh_shifted = decode(&shifted);
    let give_back = |b: &[u8]| {
        if let Ok(req) = decode::decode_metrics(BodyEncoding::Json, b) {
            let origin = collector_host::receiver::otlp_json::take_origin();
            component::recycle::recycle_on_this_thread_from(req.resource_metrics, origin);
        }
    };
    forget();
    give_back(body);
    assert_eq!(decode(body), fresh, "replayed, not as a fresh decode");
    give_back(body);
    assert_eq!(decode(&shifted), fresh_shifted, "replayed, not as a fresh decode");
    give_back(&shifted);
    assert_eq!(decode(body), fresh, "replayed back, not as a fresh decode");
}

/// The input itself, plus its decompression when it looks like gzip.
fn bodies(data: &[u8]) -> Vec<Vec<u8>> {
    let mut out = vec![data.to_vec()];
    if data.starts_with(&[0x1f, 0x8b]) {
        match decode::decompress(
            Some("gzip"),
            bytes::Bytes::copy_from_slice(data),
            GZIP_LIMIT,
        ) {
            Ok(plain) => {
                assert!(
                    plain.len() as u64 <= GZIP_LIMIT,
                    "decompress returned {} bytes over the {GZIP_LIMIT}-byte limit",
                    plain.len()
                );
                out.push(plain.to_vec());
            }
            Err(e) => {
                assert!(
                    matches!(
                        e,
                        DecodeError::BadGzip(_) | DecodeError::DecompressedTooLarge { .. }
                    ),
                    "unexpected gzip error {e:?}"
                );
                check_error(&e);
            }
        }
    }
    out
}

fn check_error(e: &DecodeError) {
    assert!(
        matches!(e.status(), 400 | 413 | 415),
        "status {} for {e:?}",
        e.status()
    );
    assert!(!e.reason().is_empty());
    assert!(!e.to_string().is_empty());
}

fn decode_checked(
    enc: BodyEncoding,
    body: &[u8],
) -> Result<ExportMetricsServiceRequest, DecodeError> {
    let r = decode::decode_metrics(enc, body);
    if let Err(e) = &r {
        check_error(e);
        let want = match enc {
            BodyEncoding::Protobuf => "bad_protobuf",
            BodyEncoding::Json => "bad_json",
        };
        assert_eq!(e.reason(), want, "{e}");
    }
    r
}

/// Protobuf encoding is a fixed point after one decode.
fn proto_round_trip(req: &ExportMetricsServiceRequest) {
    let bytes = req.encode_to_vec();
    let again = decode::decode_metrics(BodyEncoding::Protobuf, &bytes)
        .unwrap_or_else(|e| panic!("re-encoded request does not decode: {e}"));
    assert_eq!(
        again.encode_to_vec(),
        bytes,
        "protobuf round trip changed the request"
    );
}

/// What the generic serializer writes is accepted by the streaming JSON decoder, and one
/// normalising round later the JSON round trip is a fixed point.
fn json_round_trip(req: &ExportMetricsServiceRequest) {
    let Ok(json1) = serde_json::to_vec(req) else {
        return;
    };
    let r2 = match decode::decode_metrics(BodyEncoding::Json, &json1) {
        Ok(r) => r,
        // The serializer writes a non-finite double inside a repeated field
        // (`explicitBounds`, `bucketCounts`...) as `null`, which the decoder refuses by
        // design (`null` as an array element; module doc of `receiver::otlp_json`).
        Err(e) if e.to_string().contains("invalid type: null, expected f64") => return,
        Err(e) => panic!(
            "serialized request is refused by the JSON decoder: {e}\n{}",
            String::from_utf8_lossy(&json1)
        ),
    };
    let Ok(json2) = serde_json::to_vec(&r2) else {
        return;
    };
    let r3 = decode::decode_metrics(BodyEncoding::Json, &json2)
        .unwrap_or_else(|e| panic!("second JSON round refused: {e}"));
    assert_eq!(
        r3.encode_to_vec(),
        r2.encode_to_vec(),
        "JSON round trip is not a fixed point:\n{}\n{}",
        String::from_utf8_lossy(&json1),
        String::from_utf8_lossy(&json2)
    );
}
