//! The scope of a request and of a resource: the tenant a distribution partitions its data
//! by (Ingero Fleet: the cluster). The host knows no scope of its own; a distribution
//! registers one [`RequestScope`] with its component set, and the host asks it, once per
//! request or resource, where a request names its scope, whether an id is well formed,
//! and how a resource's scope attributes are settled before anything reads the payload.
//!
//! Without a registered scope the host uses [`NoScope`]: every request and resource is
//! unscoped and nothing is refused for its scope.
//!
//! The per-attribute check of the ingest screen ("is this key one of the scope's keys?")
//! runs for every attribute of every push, so it is no trait call: the scope hands out its
//! [`ScopeKey`] once and the host compares keys against it inline.

use std::borrow::Cow;
use std::fmt;

pub use http::{HeaderMap, HeaderName};

use crate::otlp::{KeyValue, get_str};

/// The resource attribute a scope is carried in, and the rule for its aliases: every key
/// that becomes the same Prometheus label (each character outside `[a-zA-Z0-9_]` turned
/// into `_`) names the scope too, since an exporter would merge them into one label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScopeKey {
    key: &'static str,
    label: &'static str,
    /// The label's first 16 bytes as two little-endian words: a key that matches has
    /// exactly these bytes wherever the label has a letter or digit (they map to
    /// themselves); the `_` positions take any separator.
    head: [u64; 2],
    /// The bytes of `head` that count: the label's letters and digits.
    head_mask: [u64; 2],
}

impl ScopeKey {
    /// `key` (ASCII, e.g. `tenant.id`) and its label form (`tenant_id`); the label is
    /// checked at compile time when this runs in a `const`.
    pub const fn new(key: &'static str, label: &'static str) -> Self {
        let k = key.as_bytes();
        let l = label.as_bytes();
        assert!(!k.is_empty() && k.len() == l.len(), "label must map key");
        let mut i = 0;
        while i < k.len() {
            let c = k[i];
            assert!(c.is_ascii(), "a scope key is ASCII");
            let mapped = if c.is_ascii_alphanumeric() || c == b'_' {
                c
            } else {
                b'_'
            };
            assert!(mapped == l[i], "label must be the key's label form");
            i += 1;
        }
        let (mut head, mut head_mask, mut i) = ([0u64; 2], [0u64; 2], 0);
        while i < l.len() && i < 16 {
            if l[i] != b'_' {
                head[i / 8] |= (l[i] as u64) << (8 * (i % 8));
                head_mask[i / 8] |= 0xff << (8 * (i % 8));
            }
            i += 1;
        }
        ScopeKey {
            key,
            label,
            head,
            head_mask,
        }
    }

    /// The attribute key a settled resource carries its scope under.
    pub fn key(&self) -> &'static str {
        self.key
    }

    /// The key's Prometheus label form.
    pub fn label(&self) -> &'static str {
        self.label
    }

    /// Whether `key` becomes this key's label (the key itself or an alias). This runs for
    /// every attribute of every push: the length and a few compares turn away almost
    /// every other key.
    #[inline]
    pub fn matches(&self, key: &str) -> bool {
        let b = key.as_bytes();
        let l = self.label.as_bytes();
        if b.len() != l.len() {
            // Longer: only non-ASCII characters (each one `_`) can make it match. A
            // leading letter or digit maps to itself, so a match starts with that byte.
            return b.len() > l.len()
                && (l[0] == b'_' || b[0] == l[0])
                && !key.is_ascii()
                && maps_char_by_char(key, l);
        }
        // As many bytes as the label has characters: a match is ASCII, one character per
        // byte, so the label's letters and digits sit at the same offsets in the key. Two
        // word compares turn away almost every other key; what passes gets the whole rule.
        let differs = |word: &[u8; 8], i: usize| {
            (u64::from_le_bytes(*word) ^ self.head[i]) & self.head_mask[i] != 0
        };
        if let Some((w0, rest)) = b.split_first_chunk::<8>()
            && (differs(w0, 0) || rest.first_chunk::<8>().is_some_and(|w1| differs(w1, 1)))
        {
            return false;
        }
        // The key itself (the usual spelling) takes one compare instead of the walk.
        b == self.key.as_bytes() || same_length_match(b, l)
    }

    /// The scope a settled resource's attributes name (the value of [`Self::key`]).
    #[inline]
    pub fn of<'a>(&self, attrs: &'a [KeyValue]) -> Option<&'a str> {
        get_str(attrs, self.key)
    }
}

/// [`ScopeKey::matches`] for a key of the label's length: ASCII, a separator where the
/// label has `_`, the label's byte everywhere else.
#[inline(never)]
fn same_length_match(key: &[u8], label: &[u8]) -> bool {
    key.iter().zip(label).all(|(&c, &want)| {
        if want == b'_' {
            c.is_ascii() && !c.is_ascii_alphanumeric()
        } else {
            c == want
        }
    })
}

/// [`ScopeKey::matches`] one character at a time, for keys longer than the label that
/// hold non-ASCII characters (rare: kept out of the inlined check).
#[cold]
#[inline(never)]
fn maps_char_by_char(key: &str, label: &[u8]) -> bool {
    let mut n = 0;
    for c in key.chars() {
        let Some(&want) = label.get(n) else {
            return false;
        };
        let mapped = if c.is_ascii_alphanumeric() || c == '_' {
            c
        } else {
            '_'
        };
        if mapped != char::from(want) {
            return false;
        }
        n += 1;
    }
    n == label.len()
}

/// Where a request may name its scope, as the host's transports see it.
#[derive(Clone, Copy)]
pub enum ScopeSource<'a> {
    /// An OTLP/HTTP export: the raw query string (without `?`) and the request headers.
    Http {
        query: Option<&'a str>,
        headers: &'a HeaderMap,
    },
    /// An OTLP/gRPC export: the request metadata, looked up by key.
    Grpc(&'a dyn Fn(&str) -> Option<&'a [u8]>),
    /// An API request (threshold or diagnostics reads): the raw query string alone.
    Query(Option<&'a str>),
}

impl fmt::Debug for ScopeSource<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ScopeSource::Http { query, .. } => {
                f.debug_struct("Http").field("query", query).finish()
            }
            ScopeSource::Grpc(_) => f.write_str("Grpc"),
            ScopeSource::Query(q) => f.debug_tuple("Query").field(q).finish(),
        }
    }
}

/// Why a resource (or a data point) was refused for its scope: the telemetry `reason`
/// label and the message the client reads in the partial success.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScopeRefusal {
    pub reason: &'static str,
    pub message: Cow<'static, str>,
}

impl fmt::Display for ScopeRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// Everything the host needs to know about the scope a request and a resource belong to.
/// One is registered per binary (`Components::with_request_scope` in `collector-host`);
/// every method runs at most once per request or resource.
pub trait RequestScope: Send + Sync {
    /// A short name for diagnostics (`none`, `cluster`).
    fn name(&self) -> &'static str;

    /// The resource attribute the scope is carried in (`None`: unscoped; the screen then
    /// settles, stamps and compares nothing).
    fn key(&self) -> Option<&ScopeKey>;

    /// The scope a request names, read before its body (`Ok(None)`: it names none).
    /// `Err` is the full client-facing message for a value that is present but malformed;
    /// it never quotes the value.
    fn request_scope<'a>(&self, source: ScopeSource<'a>) -> Result<Option<Cow<'a, str>>, String>;

    /// Check an id (a scoped token's entry, a payload's scope before it names response
    /// metadata); `Err` says what is wrong without quoting it.
    fn validate_id(&self, id: &str) -> Result<(), &'static str>;

    /// The longest id [`Self::validate_id`] accepts, in bytes (0: none): an attribute value
    /// limit must leave room for it.
    fn max_id_len(&self) -> usize;

    /// Settle a resource's scope attributes: refuse conflicting, non-string or malformed
    /// ones (nothing is changed then) and leave exactly one attribute keyed
    /// [`ScopeKey::key`]. `Ok` says whether the resource names a scope.
    fn settle_resource(&self, attrs: &mut Vec<KeyValue>) -> Result<bool, ScopeRefusal>;

    /// Read-only: `Some(names)` when [`Self::settle_resource`] would change nothing and
    /// answer `Ok(names)`; `None` when it might change or refuse them (the default,
    /// always safe). A host that knows its batch unchanged (see
    /// [`crate::recycle::Origin`]) asks this first.
    fn resource_settled(&self, attrs: &[KeyValue]) -> Option<bool> {
        let _ = attrs;
        None
    }

    /// Settle a data point's attributes against its resource's scope (`scope`: the
    /// resource's, else the request's). Called only for a point that has a key
    /// [`ScopeKey::matches`]; `Err` drops the point, and nothing is changed then.
    fn settle_point(
        &self,
        attrs: &mut Vec<KeyValue>,
        scope: Option<&str>,
    ) -> Result<(), ScopeRefusal>;

    /// Further checks of a settled metrics resource (Fleet: its node id); `Err` drops the
    /// resource with its points.
    fn check_metrics_resource(&self, attrs: &[KeyValue]) -> Result<(), ScopeRefusal> {
        let _ = attrs;
        Ok(())
    }
}

impl fmt::Debug for dyn RequestScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RequestScope({})", self.name())
    }
}

/// No scope: nothing names one and nothing is refused for one.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoScope;

impl RequestScope for NoScope {
    fn name(&self) -> &'static str {
        "none"
    }

    fn key(&self) -> Option<&ScopeKey> {
        None
    }

    fn request_scope<'a>(&self, _: ScopeSource<'a>) -> Result<Option<Cow<'a, str>>, String> {
        Ok(None)
    }

    fn validate_id(&self, _: &str) -> Result<(), &'static str> {
        Ok(())
    }

    fn max_id_len(&self) -> usize {
        0
    }

    fn settle_resource(&self, _: &mut Vec<KeyValue>) -> Result<bool, ScopeRefusal> {
        Ok(false)
    }

    fn resource_settled(&self, _: &[KeyValue]) -> Option<bool> {
        Some(false)
    }

    fn settle_point(&self, _: &mut Vec<KeyValue>, _: Option<&str>) -> Result<(), ScopeRefusal> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::otlp::kv_str;

    const TENANT: ScopeKey = ScopeKey::new("acme.tenant.id", "acme_tenant_id");

    /// The rule spelled out one character at a time: the reference for the byte checks.
    fn maps_to_label(key: &str, label: &str) -> bool {
        let mapped: String = key
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        mapped == label
    }

    #[test]
    fn the_byte_checks_agree_with_the_character_rule() {
        let base = TENANT.key();
        let swaps = [
            ".",
            "_",
            "-",
            "/",
            " ",
            "x",
            "C",
            "\u{e9}",
            "\u{20ac}",
            "\u{1f600}",
            "",
            "..",
        ];
        let mut keys = vec![
            String::new(),
            base.to_string(),
            "acme.tenant.idx".to_string(),
            "other.thing.id".to_string(),
            "acme\u{e9}tenant.id".to_string(),
        ];
        for i in 0..base.len() {
            for s in swaps {
                keys.push(format!("{}{s}{}", &base[..i], &base[i + 1..]));
                keys.push(format!("{}{s}{}", &base[..i], &base[i..]));
            }
        }
        for s in swaps {
            keys.push(format!("{s}{base}"));
            keys.push(format!("{base}{s}"));
        }
        let mut matched = 0;
        for k in &keys {
            let want = maps_to_label(k, TENANT.label());
            assert_eq!(TENANT.matches(k), want, "{k:?}");
            matched += usize::from(want);
        }
        assert!(matched > 10, "{matched}");
        // A label that starts with `_` takes any separator first.
        let under = ScopeKey::new(".x", "_x");
        assert!(under.matches("-x") && under.matches("_x") && !under.matches("yx"));
        // Keys shorter than the 8-byte head word, and a head as long as the word.
        let short = ScopeKey::new("ab.c", "ab_c");
        for (k, want) in [
            ("ab-c", true),
            ("ab_c", true),
            ("ax.c", false),
            ("ab.d", false),
        ] {
            assert_eq!(short.matches(k), want, "{k}");
        }
        let long = ScopeKey::new("abcdefghij.k", "abcdefghij_k");
        for (k, want) in [
            ("abcdefghij/k", true),
            ("abcdefgXij.k", false),
            ("abcdefghiX.k", false),
        ] {
            assert_eq!(long.matches(k), want, "{k}");
        }
    }

    #[test]
    fn the_key_reads_a_settled_resource() {
        let attrs = [kv_str("a", "1"), kv_str(TENANT.key(), "t1")];
        assert_eq!(TENANT.of(&attrs), Some("t1"));
        assert_eq!(TENANT.of(&attrs[..1]), None);
    }

    #[test]
    fn no_scope_names_and_refuses_nothing() {
        let s: &dyn RequestScope = &NoScope;
        assert!(s.key().is_none());
        let h = HeaderMap::new();
        assert_eq!(
            s.request_scope(ScopeSource::Http {
                query: Some("cluster_id=a"),
                headers: &h
            }),
            Ok(None)
        );
        assert_eq!(s.request_scope(ScopeSource::Query(Some("x=1"))), Ok(None));
        assert_eq!(s.validate_id(""), Ok(()));
        let mut attrs = vec![kv_str("anything.id", "\r\n")];
        assert_eq!(s.settle_resource(&mut attrs), Ok(false));
        assert_eq!(s.settle_point(&mut attrs, None), Ok(()));
        assert_eq!(s.check_metrics_resource(&attrs), Ok(()));
        assert_eq!(attrs.len(), 1);
        assert_eq!(format!("{s:?}"), "RequestScope(none)");
    }
}
