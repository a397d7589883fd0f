//! What a cluster id may look like, and how it is read from a query string.
//!
//! The same rule guards every place a cluster id enters a component or the host: the
//! `cluster_id` query parameter of the threshold and diagnostics routes, the push path's
//! request cluster (query, `ingero.cluster.id` header, gRPC metadata), and the threshold
//! store's publish (a report whose id breaks the rule is dropped and counted, so such an id
//! can never be found and never produce headers).
//!
//! Query values are decoded strictly ([`component::text::form_decode`], unlike the lenient
//! `component::api::query_values`): a malformed `%` escape or a value that does not decode
//! to UTF-8 is an error, not a lossy guess, so two different raw values can never name the
//! same cluster.

use std::borrow::Cow;

use crate::http::{PARAM_CLUSTER_ID, REQUEST_HEADER_CLUSTER_ID};
use component::text::{FormDecodeError, form_decode};

/// Longest accepted cluster id, in bytes (Kubernetes object names stop at 253).
pub const MAX_CLUSTER_ID_LEN: usize = 256;

/// Longest accepted node id (`ingero.node.id`), in bytes.
pub const MAX_NODE_ID_LEN: usize = 256;

/// Unicode format characters (general category Cf): invisible characters that change how
/// the text around them is shown (bidi overrides and isolates, zero-width spaces and
/// joiners, the BOM, tag characters), so an id holding one can look like another id.
fn is_format_char(c: char) -> bool {
    matches!(
        c,
        '\u{00AD}'
            | '\u{0600}'..='\u{0605}'
            | '\u{061C}'
            | '\u{06DD}'
            | '\u{070F}'
            | '\u{0890}'..='\u{0891}'
            | '\u{08E2}'
            | '\u{180E}'
            | '\u{200B}'..='\u{200F}'
            | '\u{202A}'..='\u{202E}'
            | '\u{2060}'..='\u{2064}'
            | '\u{2066}'..='\u{206F}'
            | '\u{FEFF}'
            | '\u{FFF9}'..='\u{FFFB}'
            | '\u{110BD}'
            | '\u{110CD}'
            | '\u{13430}'..='\u{1343F}'
            | '\u{1BCA0}'..='\u{1BCA3}'
            | '\u{1D173}'..='\u{1D17A}'
            | '\u{E0001}'
            | '\u{E0020}'..='\u{E007F}'
    )
}

/// The character rule of cluster and node ids: `Err` names what is wrong. Allowed is every
/// character but control characters (C0 incl. CR/LF/TAB/NUL, DEL, C1 incl. NEL), the
/// Unicode line and paragraph separators, and format characters (bidi controls, zero-width
/// characters, the BOM, tags: [`is_format_char`]). Spaces and non-ASCII letters are allowed.
fn check_id_chars(s: &str) -> Result<(), IdCharError> {
    // Fast path: printable ASCII is the common case and needs one byte compare each.
    if s.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        return Ok(());
    }
    for c in s.chars() {
        if c.is_control() || c == '\u{2028}' || c == '\u{2029}' {
            return Err(IdCharError::Control);
        }
        if is_format_char(c) {
            return Err(IdCharError::Format);
        }
    }
    Ok(())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum IdCharError {
    Control,
    Format,
}

/// Check a (decoded) cluster id: non-empty, at most [`MAX_CLUSTER_ID_LEN`] bytes, and made
/// of allowed characters (see `check_id_chars`: no control, line-break or invisible format
/// characters).
pub fn validate_cluster_id(s: &str) -> Result<(), &'static str> {
    if s.is_empty() {
        return Err("cluster_id is empty");
    }
    if s.len() > MAX_CLUSTER_ID_LEN {
        return Err("cluster_id is longer than 256 bytes");
    }
    check_id_chars(s).map_err(|e| match e {
        IdCharError::Control => "cluster_id contains a control character or line break",
        IdCharError::Format => {
            "cluster_id contains an invisible format character (bidi control, zero-width, BOM)"
        }
    })
}

/// Check a node id (`ingero.node.id`) by the same rule as a cluster id: non-empty, at most
/// [`MAX_NODE_ID_LEN`] bytes, no control, line-break or invisible format characters.
pub fn validate_node_id(s: &str) -> Result<(), &'static str> {
    if s.is_empty() {
        return Err("node id is empty");
    }
    if s.len() > MAX_NODE_ID_LEN {
        return Err("node id is longer than 256 bytes");
    }
    check_id_chars(s).map_err(|e| match e {
        IdCharError::Control => "node id contains a control character or line break",
        IdCharError::Format => {
            "node id contains an invisible format character (bidi control, zero-width, BOM)"
        }
    })
}

/// The `cluster_id` parameter of a query string, decoded and validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClusterIdParam<'a> {
    /// No `cluster_id` parameter (or no query at all).
    Missing,
    /// Exactly one parameter whose value passed [`validate_cluster_id`].
    Valid(Cow<'a, str>),
    /// Present but unusable; the message never contains the offending value.
    Invalid(&'static str),
}

/// Read `cluster_id` from a raw query string (without `?`). Keys are compared after
/// decoding; a repeated key, a malformed escape, invalid UTF-8 or a value failing
/// [`validate_cluster_id`] is [`ClusterIdParam::Invalid`]. `+` decodes to a space, as Go's
/// `url.Values.Encode` writes it.
pub fn cluster_id_from_query(query: Option<&str>) -> ClusterIdParam<'_> {
    match single_param(query, PARAM_CLUSTER_ID) {
        Param::Missing => ClusterIdParam::Missing,
        Param::Repeated => {
            ClusterIdParam::Invalid("query parameter cluster_id given more than once")
        }
        Param::One(raw) => match form_decode(raw) {
            Err(FormDecodeError::Escape) => {
                ClusterIdParam::Invalid("cluster_id has a malformed percent-escape")
            }
            Err(FormDecodeError::Utf8) => ClusterIdParam::Invalid("cluster_id is not valid UTF-8"),
            Ok(id) => match validate_cluster_id(&id) {
                Ok(()) => ClusterIdParam::Valid(id),
                Err(msg) => ClusterIdParam::Invalid(msg),
            },
        },
    }
}

/// Check a cluster id carried in a request header or gRPC metadata value: visible ASCII
/// (0x20..=0x7e) and tab only, as `http::HeaderValue::to_str` accepts, then
/// [`validate_cluster_id`]. The message names neither the header nor the value; callers
/// prefix the header or metadata key.
pub fn header_cluster_id(value: &[u8]) -> Result<&str, &'static str> {
    if !value
        .iter()
        .all(|&b| b == b'\t' || (0x20..0x7f).contains(&b))
    {
        return Err("not visible ASCII");
    }
    let s = std::str::from_utf8(value).map_err(|_| "not visible ASCII")?;
    validate_cluster_id(s)?;
    Ok(s)
}

/// The cluster a push names at the HTTP layer, the one rule both `ingero-fleet` and the Go
/// shim apply: the `cluster_id` query parameter (strictly decoded), else the
/// `ingero.cluster.id` request header. `Err` carries the full 400 message, prefixed with
/// where the bad value came from (`cluster_id: ...` or `ingero.cluster.id header: ...`).
pub fn push_cluster<'a>(
    query: Option<&'a str>,
    header: Option<&'a [u8]>,
) -> Result<Option<Cow<'a, str>>, String> {
    match cluster_id_from_query(query) {
        ClusterIdParam::Valid(v) => return Ok(Some(v)),
        ClusterIdParam::Invalid(e) => return Err(format!("{PARAM_CLUSTER_ID}: {e}")),
        ClusterIdParam::Missing => {}
    }
    match header {
        None => Ok(None),
        Some(h) => header_cluster_id(h)
            .map(|s| Some(Cow::Borrowed(s)))
            .map_err(|e| format!("{REQUEST_HEADER_CLUSTER_ID} header: {e}")),
    }
}

/// One raw (still encoded) query parameter value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Param<'a> {
    Missing,
    One(&'a str),
    Repeated,
}

/// Find the raw value of `key`. Keys are matched after decoding (`cluster%5Fid` is
/// `cluster_id`); a key that does not decode never matches.
pub fn single_param<'a>(query: Option<&'a str>, key: &str) -> Param<'a> {
    let Some(query) = query else {
        return Param::Missing;
    };
    let mut found = Param::Missing;
    // Split at the ASCII bytes `&` and `=` by position (a query is short: the general
    // pattern searchers cost more to set up than the scan).
    let pairs = query
        .as_bytes()
        .split(|&b| b == b'&')
        .scan(0usize, |start, p| {
            let pair = &query[*start..*start + p.len()];
            *start += p.len() + 1;
            Some(pair)
        })
        .filter(|p| !p.is_empty());
    for pair in pairs {
        let (k, v) = match pair.bytes().position(|b| b == b'=') {
            Some(i) => (&pair[..i], &pair[i + 1..]),
            None => (pair, ""),
        };
        let matches = match form_decode(k) {
            Ok(k) => k == key,
            Err(_) => false,
        };
        if matches {
            found = match found {
                Param::Missing => Param::One(v),
                _ => return Param::Repeated,
            };
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`single_param`] as `str::split` spells it: the reference the byte scan must match.
    fn single_param_by_split<'a>(query: Option<&'a str>, key: &str) -> Param<'a> {
        let Some(query) = query else {
            return Param::Missing;
        };
        let mut found = Param::Missing;
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            if form_decode(k).is_ok_and(|k| k == key) {
                found = match found {
                    Param::Missing => Param::One(v),
                    _ => return Param::Repeated,
                };
            }
        }
        found
    }

    #[test]
    fn the_query_scan_agrees_with_splitting() {
        for q in [
            "",
            "&",
            "&&",
            "cluster_id",
            "cluster_id=",
            "cluster_id=a",
            "cluster_id=a=b",
            "x=1&cluster_id=a",
            "cluster_id=a&&x=1&",
            "cluster_id=a&cluster_id=b",
            "cluster%5Fid=a",
            "cluster%zzid=a&cluster_id=b",
            "=a&cluster_id",
            "\u{e9}=\u{e9}&cluster_id=\u{30af}",
        ] {
            for key in ["cluster_id", "x", ""] {
                assert_eq!(
                    single_param(Some(q), key),
                    single_param_by_split(Some(q), key),
                    "{q:?} {key:?}"
                );
            }
        }
        assert_eq!(single_param(None, "cluster_id"), Param::Missing);
    }

    #[test]
    fn ordinary_ids_are_valid() {
        for id in [
            "prod-cluster",
            "a",
            "cluster_01.us-east-1",
            "with space",
            "ünïcödé-クラスタ",
            &"x".repeat(MAX_CLUSTER_ID_LEN),
        ] {
            assert_eq!(validate_cluster_id(id), Ok(()), "{id:?}");
        }
    }

    #[test]
    fn empty_long_and_control_ids_are_rejected() {
        assert_eq!(validate_cluster_id(""), Err("cluster_id is empty"));
        assert_eq!(
            validate_cluster_id(&"x".repeat(MAX_CLUSTER_ID_LEN + 1)),
            Err("cluster_id is longer than 256 bytes")
        );
        // 86 three-byte characters = 258 bytes: the cap counts bytes, not characters.
        assert!(validate_cluster_id(&"ク".repeat(86)).is_err());
        for bad in [
            "a\r\nX-Ingero-Threshold: 0",
            "a\nb",
            "a\rb",
            "tab\there",
            "nul\0",
            "del\x7f",
            "nel\u{85}",
            "ls\u{2028}",
            "ps\u{2029}",
            "esc\x1b[31m",
        ] {
            assert!(validate_cluster_id(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn look_alike_ids_are_rejected() {
        for bad in [
            "prod\u{202E}dorp",
            "prod\u{200B}",
            "pr\u{200D}od",
            "\u{FEFF}prod",
            "prod\u{2066}x\u{2069}",
            "prod\u{00AD}",
            "tag\u{E0041}",
        ] {
            assert_eq!(
                validate_cluster_id(bad),
                Err(
                    "cluster_id contains an invisible format character (bidi control, zero-width, BOM)"
                ),
                "{bad:?}"
            );
            assert!(validate_node_id(bad).is_err(), "{bad:?}");
        }
        for bad in ["n\r1", "n\t1", "n\u{0}1", "n\n"] {
            assert_eq!(
                validate_node_id(bad),
                Err("node id contains a control character or line break")
            );
        }
        assert_eq!(validate_node_id(""), Err("node id is empty"));
        assert!(validate_node_id(&"n".repeat(MAX_NODE_ID_LEN + 1)).is_err());
        for ok in ["gpu-node-01.example.com", "ノード 1", "n_1:a"] {
            assert_eq!(validate_node_id(ok), Ok(()), "{ok:?}");
        }
    }

    #[test]
    fn push_cluster_prefers_the_query_then_the_header() {
        assert_eq!(
            push_cluster(Some("cluster_id=q"), Some(b"h"))
                .unwrap()
                .as_deref(),
            Some("q")
        );
        assert_eq!(
            push_cluster(Some("x=1"), Some(b"h")).unwrap().as_deref(),
            Some("h")
        );
        assert_eq!(push_cluster(None, None).unwrap(), None);
        assert_eq!(
            push_cluster(Some("cluster_id=a&cluster_id=b"), Some(b"h")).unwrap_err(),
            "cluster_id: query parameter cluster_id given more than once"
        );
        assert_eq!(
            push_cluster(None, Some(b"a\xffb")).unwrap_err(),
            "ingero.cluster.id header: not visible ASCII"
        );
        assert_eq!(
            push_cluster(None, Some(b"")).unwrap_err(),
            "ingero.cluster.id header: cluster_id is empty"
        );
        // A header with a tab passes `to_str` but not the id rule.
        assert_eq!(
            push_cluster(None, Some(b"a\tb")).unwrap_err(),
            "ingero.cluster.id header: cluster_id contains a control character or line break"
        );
    }

    #[test]
    fn query_param_is_decoded_strictly() {
        assert_eq!(
            cluster_id_from_query(Some("cluster_id=prod")),
            ClusterIdParam::Valid(Cow::Borrowed("prod"))
        );
        assert_eq!(
            cluster_id_from_query(Some("a=1&cluster_id=prod%2Deu+west&z")),
            ClusterIdParam::Valid(Cow::Owned("prod-eu west".into()))
        );
        assert_eq!(
            cluster_id_from_query(Some("cluster%5Fid=k")),
            ClusterIdParam::Valid(Cow::Borrowed("k"))
        );
        assert_eq!(
            cluster_id_from_query(Some("cluster_id=%E3%82%AF")),
            ClusterIdParam::Valid(Cow::Owned("ク".into()))
        );
    }

    #[test]
    fn missing_and_invalid_params_are_told_apart() {
        assert_eq!(cluster_id_from_query(None), ClusterIdParam::Missing);
        assert_eq!(cluster_id_from_query(Some("")), ClusterIdParam::Missing);
        assert_eq!(
            cluster_id_from_query(Some("other=1")),
            ClusterIdParam::Missing
        );
        assert_eq!(
            cluster_id_from_query(Some("cluster_idx=1")),
            ClusterIdParam::Missing
        );
        let invalid = |q: &str| match cluster_id_from_query(Some(q)) {
            ClusterIdParam::Invalid(m) => m,
            other => panic!("{q:?} gave {other:?}"),
        };
        assert_eq!(invalid("cluster_id="), "cluster_id is empty");
        assert_eq!(invalid("cluster_id"), "cluster_id is empty");
        assert_eq!(
            invalid("cluster_id=a&cluster_id=a"),
            "query parameter cluster_id given more than once"
        );
        assert_eq!(
            invalid("cluster_id=a&cluster%5fid=b"),
            "query parameter cluster_id given more than once"
        );
        assert_eq!(
            invalid("cluster_id=a%zz"),
            "cluster_id has a malformed percent-escape"
        );
        assert_eq!(
            invalid("cluster_id=a%4"),
            "cluster_id has a malformed percent-escape"
        );
        assert_eq!(
            invalid("cluster_id=%ff%fe"),
            "cluster_id is not valid UTF-8"
        );
        assert_eq!(
            invalid("cluster_id=%C0%AF"),
            "cluster_id is not valid UTF-8"
        );
        assert_eq!(
            invalid("cluster_id=a%0D%0AX-Ingero-Threshold:%200"),
            "cluster_id contains a control character or line break"
        );
        assert_eq!(
            invalid("cluster_id=a%00"),
            "cluster_id contains a control character or line break"
        );
        assert_eq!(
            invalid(&format!(
                "cluster_id={}",
                "y".repeat(MAX_CLUSTER_ID_LEN + 1)
            )),
            "cluster_id is longer than 256 bytes"
        );
    }
}
