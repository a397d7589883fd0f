//! Selective protobuf decoding for pass-through processors: decode an OTLP metrics batch
//! keeping only the metrics a processor reads (by name), and skip the rest at the wire
//! level without building them.
//!
//! A pass-through processor (`ingero`, `nccl_peer_lag`) only reads a few metrics of each
//! agent push and its output batch is never used (the Go shim keeps its own
//! `pmetric.Metrics`), so decoding the other metrics (their strings, attributes and
//! points) is wasted work: with prost it is most of the call. The result equals a full
//! prost decode with the unread metrics removed from every scope (resources and scopes
//! themselves are kept, also when left without metrics). Skipped metrics are still checked
//! for well-formed wire framing (tags, varints, lengths), not for their content (e.g. UTF-8
//! of their strings), and a known field with the wrong wire type is an error as in prost:
//! the bytes come from the collector's own marshaler, so this only matters for input that
//! was never a valid batch.

use component::otlp::{ExportMetricsServiceRequest, Metric, ResourceMetrics, ScopeMetrics};
use prost::Message;
use prost::bytes::Buf;
use prost::encoding::{DecodeContext, WireType, decode_key, decode_varint, skip_field};
use prost::{DecodeError, bytes::Bytes};

/// Why a batch did not decode.
#[derive(Debug)]
pub enum SelectError {
    /// prost refused a message this module decodes fully (or a framing error it found).
    Decode(DecodeError),
    /// Framing this module checks itself.
    Malformed(String),
}

impl std::fmt::Display for SelectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SelectError::Decode(e) => e.fmt(f),
            SelectError::Malformed(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for SelectError {}

impl From<DecodeError> for SelectError {
    fn from(e: DecodeError) -> Self {
        SelectError::Decode(e)
    }
}

/// Field numbers of the messages walked here (opentelemetry/proto/metrics/v1).
const REQUEST_RESOURCE_METRICS: u32 = 1;
const RM_RESOURCE: u32 = 1;
const RM_SCOPE_METRICS: u32 = 2;
const RM_SCHEMA_URL: u32 = 3;
const SM_SCOPE: u32 = 1;
const SM_METRICS: u32 = 2;
const SM_SCHEMA_URL: u32 = 3;
const METRIC_NAME: u32 = 1;

/// Decode `bytes` keeping only metrics whose name is in `names`.
pub fn decode_selected(
    bytes: &[u8],
    names: &[&str],
) -> Result<ExportMetricsServiceRequest, SelectError> {
    let mut req = ExportMetricsServiceRequest::default();
    walk(bytes, |tag, wt, buf| match (tag, wt) {
        (REQUEST_RESOURCE_METRICS, WireType::LengthDelimited) => {
            let body = take_len(buf)?;
            req.resource_metrics.push(resource_metrics(body, names)?);
            Ok(())
        }
        (REQUEST_RESOURCE_METRICS, _) => Err(wrong_wire_type(wt)),
        _ => skip(wt, tag, buf),
    })?;
    Ok(req)
}

fn resource_metrics(bytes: &[u8], names: &[&str]) -> Result<ResourceMetrics, SelectError> {
    let mut rm = ResourceMetrics::default();
    walk(bytes, |tag, wt, buf| match (tag, wt) {
        (RM_RESOURCE, WireType::LengthDelimited) => {
            let body = take_len(buf)?;
            // Repeated occurrences of a message field merge (protobuf semantics).
            rm.resource
                .get_or_insert_with(Default::default)
                .merge(body)?;
            Ok(())
        }
        (RM_SCOPE_METRICS, WireType::LengthDelimited) => {
            let body = take_len(buf)?;
            rm.scope_metrics.push(scope_metrics(body, names)?);
            Ok(())
        }
        (RM_SCHEMA_URL, WireType::LengthDelimited) => {
            rm.schema_url = string(take_len(buf)?)?;
            Ok(())
        }
        (RM_RESOURCE | RM_SCOPE_METRICS | RM_SCHEMA_URL, _) => Err(wrong_wire_type(wt)),
        _ => skip(wt, tag, buf),
    })?;
    Ok(rm)
}

fn scope_metrics(bytes: &[u8], names: &[&str]) -> Result<ScopeMetrics, SelectError> {
    let mut sm = ScopeMetrics::default();
    walk(bytes, |tag, wt, buf| match (tag, wt) {
        (SM_SCOPE, WireType::LengthDelimited) => {
            let body = take_len(buf)?;
            sm.scope.get_or_insert_with(Default::default).merge(body)?;
            Ok(())
        }
        (SM_METRICS, WireType::LengthDelimited) => {
            let body = take_len(buf)?;
            if metric_name_is_one_of(body, names)? {
                sm.metrics.push(Metric::decode(body)?);
            }
            Ok(())
        }
        (SM_SCHEMA_URL, WireType::LengthDelimited) => {
            sm.schema_url = string(take_len(buf)?)?;
            Ok(())
        }
        (SM_SCOPE | SM_METRICS | SM_SCHEMA_URL, _) => Err(wrong_wire_type(wt)),
        _ => skip(wt, tag, buf),
    })?;
    Ok(sm)
}

/// Whether the encoded `Metric` is named one of `names`. Walks the whole message (so its
/// framing is checked) and uses the last `name` field, as a decoder would.
fn metric_name_is_one_of(bytes: &[u8], names: &[&str]) -> Result<bool, SelectError> {
    let mut name: &[u8] = b"";
    walk(bytes, |tag, wt, buf| match (tag, wt) {
        (METRIC_NAME, WireType::LengthDelimited) => {
            name = take_len(buf)?;
            Ok(())
        }
        (METRIC_NAME, _) => Err(wrong_wire_type(wt)),
        _ => skip(wt, tag, buf),
    })?;
    Ok(names.iter().any(|n| n.as_bytes() == name))
}

/// Call `field` for every (tag, wire type) of the message in `bytes`; `field` consumes the
/// field's value from the buffer.
fn walk<'a>(
    mut bytes: &'a [u8],
    mut field: impl FnMut(u32, WireType, &mut &'a [u8]) -> Result<(), SelectError>,
) -> Result<(), SelectError> {
    while bytes.has_remaining() {
        let (tag, wt) = decode_key(&mut bytes)?;
        field(tag, wt, &mut bytes)?;
    }
    Ok(())
}

/// The body of a length-delimited field, advancing past it.
fn take_len<'a>(buf: &mut &'a [u8]) -> Result<&'a [u8], SelectError> {
    let len = decode_varint(buf)?;
    let len = usize::try_from(len)
        .ok()
        .filter(|&l| l <= buf.len())
        .ok_or_else(|| SelectError::Malformed("buffer underflow".into()))?;
    let (body, rest) = buf.split_at(len);
    *buf = rest;
    Ok(body)
}

/// A known field with another wire type than its declaration (prost refuses these too).
fn wrong_wire_type(wt: WireType) -> SelectError {
    SelectError::Malformed(format!(
        "invalid wire type: {wt:?} (expected LengthDelimited)"
    ))
}

fn skip(wt: WireType, tag: u32, buf: &mut &[u8]) -> Result<(), SelectError> {
    Ok(skip_field(wt, tag, buf, DecodeContext::default())?)
}

fn string(bytes: &[u8]) -> Result<String, SelectError> {
    std::str::from_utf8(bytes).map(str::to_owned).map_err(|_| {
        SelectError::Malformed("invalid string value: data is not UTF-8 encoded".into())
    })
}

/// Reference semantics (tests): a full decode with the unread metrics removed.
#[doc(hidden)]
pub fn decode_full_then_filter(
    bytes: &[u8],
    names: &[&str],
) -> Result<ExportMetricsServiceRequest, DecodeError> {
    let mut req = ExportMetricsServiceRequest::decode(Bytes::copy_from_slice(bytes))?;
    for rm in &mut req.resource_metrics {
        for sm in &mut rm.scope_metrics {
            sm.metrics.retain(|m| names.contains(&m.name.as_str()));
        }
    }
    Ok(req)
}

#[cfg(test)]
mod tests {
    use super::*;
    use component::otlp::{kv_str, resource_attrs};
    use testkit::AgentPush;

    const HEALTH: &[&str] = &[component::wire::metric::HEALTH_SCORE];

    fn batch(n: usize) -> Vec<u8> {
        let mut req = ExportMetricsServiceRequest::default();
        for i in 0..n {
            req.resource_metrics.extend(
                AgentPush::new("c", &format!("n{i}"), 0.9)
                    .to_proto()
                    .resource_metrics,
            );
        }
        req.encode_to_vec()
    }

    #[test]
    fn keeps_exactly_the_named_metrics_with_resources_and_scopes() {
        let b = batch(3);
        let got = decode_selected(&b, HEALTH).unwrap();
        assert_eq!(got, decode_full_then_filter(&b, HEALTH).unwrap());
        assert_eq!(got.resource_metrics.len(), 3);
        let names: Vec<&str> = got
            .resource_metrics
            .iter()
            .flat_map(|rm| &rm.scope_metrics)
            .flat_map(|sm| &sm.metrics)
            .map(|m| m.name.as_str())
            .collect();
        assert_eq!(names, vec![HEALTH[0]; 3]);
        assert_eq!(
            component::otlp::get_str(resource_attrs(&got.resource_metrics[1]), "ingero.node.id"),
            Some("n1")
        );
        // No names: resources and scopes only.
        let none = decode_selected(&b, &[]).unwrap();
        assert_eq!(none, decode_full_then_filter(&b, &[]).unwrap());
    }

    #[test]
    fn repeated_singular_fields_follow_protobuf_rules() {
        // Two `resource` fields merge (attributes concatenate); the last `name` wins.
        let a = ResourceMetrics {
            resource: Some(component::otlp::Resource {
                attributes: vec![kv_str("a", "1")],
                ..Default::default()
            }),
            ..Default::default()
        };
        let mut b = ResourceMetrics {
            resource: Some(component::otlp::Resource {
                attributes: vec![kv_str("b", "2")],
                ..Default::default()
            }),
            ..Default::default()
        };
        b.scope_metrics.push(ScopeMetrics {
            metrics: vec![Metric {
                name: HEALTH[0].into(),
                ..Default::default()
            }],
            ..Default::default()
        });
        let mut rm_bytes = a.encode_to_vec();
        rm_bytes.extend(b.encode_to_vec());
        let mut req = Vec::new();
        prost::encoding::bytes::encode(REQUEST_RESOURCE_METRICS, &rm_bytes, &mut req);
        let got = decode_selected(&req, HEALTH).unwrap();
        assert_eq!(got, decode_full_then_filter(&req, HEALTH).unwrap());
        assert_eq!(
            got.resource_metrics[0]
                .resource
                .as_ref()
                .unwrap()
                .attributes
                .len(),
            2
        );

        let mut m = Metric {
            name: "other".into(),
            ..Default::default()
        }
        .encode_to_vec();
        prost::encoding::string::encode(METRIC_NAME, &HEALTH[0].to_string(), &mut m);
        assert!(metric_name_is_one_of(&m, HEALTH).unwrap());
    }

    #[test]
    fn truncated_input_is_an_error_never_a_panic() {
        let b = batch(2);
        for cut in 0..b.len() {
            let r = decode_selected(&b[..cut], HEALTH);
            if let Ok(v) = &r {
                // A cut on a field boundary is a valid (shorter) message.
                assert_eq!(v, &decode_full_then_filter(&b[..cut], HEALTH).unwrap());
            }
        }
    }
}
