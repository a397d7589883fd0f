//! OTLP/HTTP body decoding: content type, capped decompression, protobuf or JSON, and the
//! OTLP-style responses (`google.rpc.Status` on error, `Export*ServiceResponse` with
//! partial success otherwise) in the request's own encoding.
//!
//! `Content-Encoding` as otelcol's `confighttp` server accepts it: `gzip`, `zstd`, `zlib`,
//! `deflate` (zlib-wrapped, as otelcol and the OTel SDKs send it; a raw deflate stream
//! without the zlib header is accepted too), `snappy` (block format, or the framed format
//! when the body starts with the framing header, as otelcol auto-detects),
//! `x-snappy-framed` and `lz4` (LZ4 frame format), plus `identity` or none. Every codec
//! stops at the decompressed-size cap, so a decompression bomb costs at most `limit + 1`
//! bytes of output before it is refused with 413.

use std::io::Read;

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use prost::Message;
use serde::de::DeserializeOwned;

/// OTLP/HTTP body encodings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyEncoding {
    Protobuf,
    Json,
}

impl BodyEncoding {
    /// From a `Content-Type` header value (parameters such as `charset` ignored).
    pub fn from_content_type(ct: Option<&str>) -> Option<Self> {
        let ct = ct?;
        // The spellings clients send, matched whole before the general rule below.
        match ct {
            "application/json" => return Some(BodyEncoding::Json),
            "application/x-protobuf" => return Some(BodyEncoding::Protobuf),
            _ => {}
        }
        let ct = match ct.bytes().position(|b| b == b';') {
            Some(i) => &ct[..i],
            None => ct,
        }
        .trim();
        if ct.eq_ignore_ascii_case("application/x-protobuf")
            || ct.eq_ignore_ascii_case("application/protobuf")
        {
            Some(BodyEncoding::Protobuf)
        } else if ct.eq_ignore_ascii_case("application/json") {
            Some(BodyEncoding::Json)
        } else {
            None
        }
    }

    pub fn content_type(self) -> &'static str {
        match self {
            BodyEncoding::Protobuf => "application/x-protobuf",
            BodyEncoding::Json => "application/json",
        }
    }
}

/// Why a body could not be decoded.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DecodeError {
    #[error("request body exceeds the {limit}-byte limit after decompression")]
    DecompressedTooLarge { limit: u64 },
    #[error("invalid gzip body: {0}")]
    BadGzip(String),
    #[error("invalid {encoding} body: {message}")]
    BadCompressed {
        encoding: &'static str,
        message: String,
    },
    #[error(
        "unsupported Content-Encoding {0:?} (supported: gzip, zstd, zlib, deflate, snappy, x-snappy-framed, lz4, identity)"
    )]
    UnsupportedEncoding(String),
    #[error("invalid protobuf body: {0}")]
    BadProtobuf(String),
    #[error("invalid JSON body: {0}")]
    BadJson(String),
}

impl DecodeError {
    /// HTTP status for this error.
    pub fn status(&self) -> u16 {
        match self {
            DecodeError::DecompressedTooLarge { .. } => 413,
            DecodeError::UnsupportedEncoding(_) => 415,
            _ => 400,
        }
    }

    /// Short reason label for the rejected-requests counter.
    pub fn reason(&self) -> &'static str {
        match self {
            DecodeError::DecompressedTooLarge { .. } => "decompressed_too_large",
            DecodeError::BadGzip(_) => "bad_gzip",
            DecodeError::BadCompressed { .. } => "bad_compressed_body",
            DecodeError::UnsupportedEncoding(_) => "unsupported_encoding",
            DecodeError::BadProtobuf(_) => "bad_protobuf",
            DecodeError::BadJson(_) => "bad_json",
        }
    }
}

/// Undo `Content-Encoding`, refusing to produce more than `limit` bytes.
pub fn decompress(
    encoding: Option<&str>,
    body: bytes::Bytes,
    limit: u64,
) -> Result<bytes::Bytes, DecodeError> {
    let enc = encoding
        .map(|e| e.trim().to_ascii_lowercase())
        .unwrap_or_default();
    match enc.as_str() {
        "" | "identity" => Ok(body),
        "gzip" | "x-gzip" => {
            read_capped(flate2::read::MultiGzDecoder::new(&body[..]), &body, limit).map_err(|e| {
                match e {
                    DecodeError::BadCompressed { message, .. } => DecodeError::BadGzip(message),
                    e => e,
                }
            })
        }
        "zlib" | "deflate" => {
            let name = if enc == "zlib" { "zlib" } else { "deflate" };
            if has_zlib_header(&body) {
                read_capped(flate2::read::ZlibDecoder::new(&body[..]), &body, limit)
            } else {
                read_capped(flate2::read::DeflateDecoder::new(&body[..]), &body, limit)
            }
            .map_err(|e| e.named(name))
        }
        "zstd" => {
            let mut dec =
                zstd::stream::read::Decoder::with_buffer(&body[..]).map_err(|e| bad("zstd", &e))?;
            // A frame may ask for a window of up to 2 GiB; bodies this receiver takes need
            // far less (zstd's levels 1-19 use at most 8 MiB).
            dec.window_log_max(ZSTD_WINDOW_LOG_MAX)
                .map_err(|e| bad("zstd", &e))?;
            read_capped(dec, &body, limit).map_err(|e| e.named("zstd"))
        }
        "snappy" if !body.starts_with(SNAPPY_FRAMING_HEADER) => snappy_block(&body, limit),
        "snappy" | "x-snappy-framed" => {
            read_capped(snap::read::FrameDecoder::new(&body[..]), &body, limit)
                .map_err(|e| e.named("snappy"))
        }
        "lz4" => read_capped(lz4_flex::frame::FrameDecoder::new(&body[..]), &body, limit)
            .map_err(|e| e.named("lz4")),
        other => Err(DecodeError::UnsupportedEncoding(other.to_string())),
    }
}

/// Largest zstd window accepted: 16 MiB.
const ZSTD_WINDOW_LOG_MAX: u32 = 24;

/// The stream identifier chunk every framed snappy stream starts with.
const SNAPPY_FRAMING_HEADER: &[u8] = b"\xff\x06\x00\x00sNaPpY";

fn bad(encoding: &'static str, e: &dyn std::fmt::Display) -> DecodeError {
    DecodeError::BadCompressed {
        encoding,
        message: e.to_string(),
    }
}

impl DecodeError {
    /// A decompression error of [`read_capped`] with the codec's name.
    fn named(self, encoding: &'static str) -> Self {
        match self {
            DecodeError::BadCompressed { message, .. } => {
                DecodeError::BadCompressed { encoding, message }
            }
            e => e,
        }
    }
}

/// RFC 1950 header: compression method 8 (deflate), window size at most 32 KiB, and the
/// check bits that make the first two bytes a multiple of 31.
fn has_zlib_header(b: &[u8]) -> bool {
    match b {
        [cmf, flg, ..] => {
            cmf & 0x0f == 8 && cmf >> 4 <= 7 && (u16::from(*cmf) << 8 | u16::from(*flg)) % 31 == 0
        }
        _ => false,
    }
}

/// Read a decoder to its end, at most `limit` bytes (one more tells a bomb from a body of
/// exactly `limit` bytes).
fn read_capped(dec: impl Read, body: &[u8], limit: u64) -> Result<bytes::Bytes, DecodeError> {
    let mut out = Vec::with_capacity(body.len().saturating_mul(4).min(limit as usize));
    dec.take(limit.saturating_add(1))
        .read_to_end(&mut out)
        .map_err(|e| bad("compressed", &e))?;
    if out.len() as u64 > limit {
        return Err(DecodeError::DecompressedTooLarge { limit });
    }
    Ok(out.into())
}

/// Snappy block format: the decoded length is in the header, so a bomb is refused before
/// anything is allocated for it.
fn snappy_block(body: &[u8], limit: u64) -> Result<bytes::Bytes, DecodeError> {
    let len = snap::raw::decompress_len(body).map_err(|e| bad("snappy", &e))?;
    if len as u64 > limit {
        return Err(DecodeError::DecompressedTooLarge { limit });
    }
    snap::raw::Decoder::new()
        .decompress_vec(body)
        .map(bytes::Bytes::from)
        .map_err(|e| bad("snappy", &e))
}

/// Decode an OTLP request message in the given encoding (JSON through opentelemetry-proto's
/// serde impls; metrics use [`decode_metrics`]).
pub fn decode<T: Message + Default + DeserializeOwned>(
    enc: BodyEncoding,
    body: &[u8],
) -> Result<T, DecodeError> {
    match enc {
        BodyEncoding::Protobuf => {
            T::decode(body).map_err(|e| DecodeError::BadProtobuf(e.to_string()))
        }
        BodyEncoding::Json => {
            serde_json::from_slice(body).map_err(|e| DecodeError::BadJson(e.to_string()))
        }
    }
}

/// Decode an `ExportMetricsServiceRequest`: protobuf through the pooled reader of
/// [`super::otlp_proto`] (prost's result and errors, prost's allocations avoided), JSON
/// through the streaming decoder of [`super::otlp_json`] (no serde `Content` buffering; its
/// doc lists where it differs from [`decode`]).
pub fn decode_metrics(
    enc: BodyEncoding,
    body: &[u8],
) -> Result<ExportMetricsServiceRequest, DecodeError> {
    match enc {
        BodyEncoding::Protobuf => super::otlp_proto::decode_metrics(body)
            .map_err(|e| DecodeError::BadProtobuf(e.to_string())),
        BodyEncoding::Json => {
            super::otlp_json::decode_metrics(body).map_err(|e| DecodeError::BadJson(e.to_string()))
        }
    }
}

/// Encode an OTLP response message in the given encoding.
pub fn encode<T: Message + serde::Serialize>(enc: BodyEncoding, msg: &T) -> Vec<u8> {
    match enc {
        BodyEncoding::Protobuf => msg.encode_to_vec(),
        BodyEncoding::Json => serde_json::to_vec(msg).unwrap_or_else(|_| b"{}".to_vec()),
    }
}

/// `google.rpc.Status` as OTLP/HTTP error bodies carry it.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RpcStatus {
    #[prost(int32, tag = "1")]
    pub code: i32,
    #[prost(string, tag = "2")]
    pub message: String,
}

/// gRPC status code used in error bodies for an HTTP status.
fn grpc_code_for(http: u16) -> i32 {
    match http {
        400 | 413 | 415 => 3, // INVALID_ARGUMENT
        404 => 5,             // NOT_FOUND
        405 => 12,            // UNIMPLEMENTED
        429 => 8,             // RESOURCE_EXHAUSTED
        503 => 14,            // UNAVAILABLE
        _ => 13,              // INTERNAL
    }
}

/// An error body in the request's encoding; JSON when the request's encoding is unknown
/// (readable by any client, and protobuf clients always declare their content type).
pub fn error_body(
    enc: Option<BodyEncoding>,
    http_status: u16,
    message: &str,
) -> (Vec<u8>, &'static str) {
    let status = RpcStatus {
        code: grpc_code_for(http_status),
        message: message.to_string(),
    };
    match enc {
        Some(BodyEncoding::Protobuf) => (
            status.encode_to_vec(),
            BodyEncoding::Protobuf.content_type(),
        ),
        _ => (
            serde_json::to_vec(
                &serde_json::json!({"code": status.code, "message": status.message}),
            )
            .unwrap_or_default(),
            BodyEncoding::Json.content_type(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use component::otlp::ExportMetricsServiceRequest;
    use std::io::Write;

    fn gzip(data: &[u8]) -> bytes::Bytes {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(data).unwrap();
        e.finish().unwrap().into()
    }

    #[test]
    fn content_types() {
        assert_eq!(
            BodyEncoding::from_content_type(Some("application/json; charset=utf-8")),
            Some(BodyEncoding::Json)
        );
        assert_eq!(
            BodyEncoding::from_content_type(Some("Application/X-Protobuf")),
            Some(BodyEncoding::Protobuf)
        );
        assert_eq!(BodyEncoding::from_content_type(Some("text/plain")), None);
        assert_eq!(BodyEncoding::from_content_type(None), None);
    }

    #[test]
    fn gzip_bomb_is_refused_at_the_cap() {
        let zeros = vec![0u8; 10 * 1024 * 1024];
        let bomb = gzip(&zeros);
        assert!(
            bomb.len() < 64 * 1024,
            "bomb compresses well: {}",
            bomb.len()
        );
        let err = decompress(Some("gzip"), bomb.clone(), 1024 * 1024).unwrap_err();
        assert_eq!(
            err,
            DecodeError::DecompressedTooLarge { limit: 1024 * 1024 }
        );
        assert_eq!(err.status(), 413);
        let ok = decompress(Some("gzip"), bomb, 20 * 1024 * 1024).unwrap();
        assert_eq!(ok.len(), zeros.len());
    }

    /// Every codec otelcol's receiver accepts, as a client would compress.
    fn compress(codec: &str, data: &[u8]) -> bytes::Bytes {
        let out = match codec {
            "gzip" => gzip(data).to_vec(),
            "zlib" | "deflate" => {
                let mut e =
                    flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
                e.write_all(data).unwrap();
                e.finish().unwrap()
            }
            "raw-deflate" => {
                let mut e =
                    flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::default());
                e.write_all(data).unwrap();
                e.finish().unwrap()
            }
            "zstd" => zstd::stream::encode_all(data, 3).unwrap(),
            "snappy" => snap::raw::Encoder::new().compress_vec(data).unwrap(),
            "x-snappy-framed" => {
                let mut e = snap::write::FrameEncoder::new(Vec::new());
                e.write_all(data).unwrap();
                e.into_inner().unwrap()
            }
            "lz4" => {
                let mut e = lz4_flex::frame::FrameEncoder::new(Vec::new());
                e.write_all(data).unwrap();
                e.finish().unwrap()
            }
            other => panic!("no compressor for {other}"),
        };
        out.into()
    }

    /// (Content-Encoding header, compressor) pairs: every accepted encoding.
    const CODECS: [(&str, &str); 9] = [
        ("gzip", "gzip"),
        ("zlib", "zlib"),
        ("deflate", "deflate"),
        ("deflate", "raw-deflate"),
        ("zstd", "zstd"),
        ("snappy", "snappy"),
        ("snappy", "x-snappy-framed"),
        ("x-snappy-framed", "x-snappy-framed"),
        ("lz4", "lz4"),
    ];

    #[test]
    fn every_codec_round_trips_an_agent_push() {
        let body = testkit::AgentPush::new("prod", "n1", 0.9).to_proto_bytes();
        for (header, codec) in CODECS {
            let packed = compress(codec, &body);
            assert_ne!(&packed[..], &body[..]);
            let plain = decompress(Some(header), packed, 1 << 20)
                .unwrap_or_else(|e| panic!("{header} ({codec}): {e}"));
            assert_eq!(&plain[..], &body[..], "{header} ({codec})");
        }
    }

    /// One decompression bomb per codec: 10 MiB of zeros, refused at a 1 MiB cap with 413.
    #[test]
    fn a_bomb_is_refused_at_the_cap_for_every_codec() {
        let zeros = vec![0u8; 10 * 1024 * 1024];
        for (header, codec) in CODECS {
            let bomb = compress(codec, &zeros);
            assert!(bomb.len() < 1024 * 1024, "{codec} bomb: {}", bomb.len());
            let err = decompress(Some(header), bomb.clone(), 1024 * 1024).unwrap_err();
            assert_eq!(
                err,
                DecodeError::DecompressedTooLarge { limit: 1024 * 1024 },
                "{header} ({codec})"
            );
            assert_eq!(err.status(), 413);
            let ok = decompress(Some(header), bomb, 20 * 1024 * 1024).unwrap();
            assert_eq!(
                ok.len(),
                zeros.len(),
                "{header} ({codec}) under a larger cap"
            );
        }
    }

    #[test]
    fn garbage_under_every_codec_is_a_400_naming_it() {
        for header in [
            "gzip",
            "zlib",
            "deflate",
            "zstd",
            "snappy",
            "x-snappy-framed",
            "lz4",
        ] {
            let err = decompress(
                Some(header),
                bytes::Bytes::from_static(b"\x78\x9c not really compressed at all"),
                1 << 20,
            )
            .unwrap_err();
            assert_eq!(err.status(), 400, "{header}: {err}");
            let name = if header == "x-snappy-framed" {
                "snappy"
            } else {
                header
            };
            assert!(err.to_string().contains(name), "{header}: {err}");
        }
    }

    #[test]
    fn bad_encodings_are_named() {
        for enc in ["br", "compress", "gzip, zstd"] {
            assert!(matches!(
                decompress(Some(enc), bytes::Bytes::new(), 10),
                Err(DecodeError::UnsupportedEncoding(_))
            ));
        }
        assert!(matches!(
            decompress(Some("gzip"), bytes::Bytes::from_static(b"not gzip"), 10),
            Err(DecodeError::BadGzip(_))
        ));
    }

    #[test]
    fn agent_json_decodes_with_its_quirks() {
        let body = testkit::AgentPush::new("prod", "gpu-node-01", 0.92)
            .gpu("NVIDIA H100 80GB HBM3", 8)
            .to_json();
        let req = decode_metrics(BodyEncoding::Json, body.as_bytes()).unwrap();
        let expected = testkit::json_to_proto(&body);
        assert_eq!(req.resource_metrics, expected);
        let generic: ExportMetricsServiceRequest =
            decode(BodyEncoding::Json, body.as_bytes()).unwrap();
        assert_eq!(generic, req);
        let pb = decode_metrics(BodyEncoding::Protobuf, &req.encode_to_vec()).unwrap();
        assert_eq!(pb, req);
    }

    #[test]
    fn int64_as_string_and_number_both_decode() {
        let body = r#"{"resourceMetrics":[{"scopeMetrics":[{"metrics":[{"name":"x","sum":{"dataPoints":[
            {"timeUnixNano":1700000000000000000,"asInt":"42"},{"timeUnixNano":"5","asInt":7}],
            "aggregationTemporality":2,"isMonotonic":true}}]}]}]}"#;
        let req = decode_metrics(BodyEncoding::Json, body.as_bytes()).unwrap();
        let pts =
            component::otlp::number_points(&req.resource_metrics[0].scope_metrics[0].metrics[0]);
        assert_eq!(pts[0].time_unix_nano, 1_700_000_000_000_000_000);
        assert_eq!(component::otlp::point_value(&pts[0]), Some(42.0));
        assert_eq!(pts[1].time_unix_nano, 5);
    }

    /// Fuzzing regression (fuzz target otlp_proto): a double written with 17 significant
    /// digits came back one ULP off from the JSON decoder, so OTLP/JSON clients got a
    /// different value than they sent, and protobuf -> JSON -> protobuf was not stable.
    #[test]
    fn json_doubles_decode_exactly() {
        for v in [
            1.3362956004754228e91_f64,
            0.1 + 0.2,
            f64::MIN_POSITIVE,
            f64::MAX,
            5e-324,
        ] {
            let body = format!(
                r#"{{"resourceMetrics":[{{"scopeMetrics":[{{"metrics":[{{"name":"x","gauge":{{"dataPoints":[{{"asDouble":{v:e}}}]}}}}]}}]}}]}}"#
            );
            let req = decode_metrics(BodyEncoding::Json, body.as_bytes()).unwrap();
            let pts = component::otlp::number_points(
                &req.resource_metrics[0].scope_metrics[0].metrics[0],
            );
            assert_eq!(
                component::otlp::point_value(&pts[0]).map(f64::to_bits),
                Some(v.to_bits()),
                "{body}"
            );
        }
    }

    #[test]
    fn truncated_protobuf_is_an_error_not_a_panic() {
        let bytes = testkit::AgentPush::new("c", "n", 0.5).to_proto_bytes();
        for cut in [1, bytes.len() / 2, bytes.len() - 1] {
            let r: Result<ExportMetricsServiceRequest, _> =
                decode(BodyEncoding::Protobuf, &bytes[..cut]);
            assert!(r.is_err(), "cut at {cut}");
            assert!(decode_metrics(BodyEncoding::Protobuf, &bytes[..cut]).is_err());
        }
    }

    #[test]
    fn bad_metrics_json_is_a_bad_json_error() {
        let e = decode_metrics(BodyEncoding::Json, b"{\"resourceMetrics\": [").unwrap_err();
        assert!(
            matches!(&e, DecodeError::BadJson(m) if m.contains("line 1")),
            "{e}"
        );
        assert_eq!((e.status(), e.reason()), (400, "bad_json"));
    }

    #[test]
    fn error_bodies_follow_the_request_encoding() {
        let (b, ct) = error_body(Some(BodyEncoding::Json), 400, "bad");
        assert_eq!(ct, "application/json");
        assert_eq!(
            String::from_utf8(b).unwrap(),
            r#"{"code":3,"message":"bad"}"#
        );
        let (b, ct) = error_body(Some(BodyEncoding::Protobuf), 413, "big");
        assert_eq!(ct, "application/x-protobuf");
        let s = RpcStatus::decode(&b[..]).unwrap();
        assert_eq!((s.code, s.message.as_str()), (3, "big"));
    }
}
