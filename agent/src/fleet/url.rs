//! Fleet URLs (spec 1.1, 2.2): a bare `host:port` gets `https` (or `http` when insecure),
//! the path gets `/v1/metrics` or `/api/v1/threshold` unless it already ends with it, and
//! `cluster_id` is set in the query with the other parameters kept, keys sorted, values
//! form-encoded (Go's `url.Values.Encode`) with the `percent-encoding` crate.

use ingero_wire::http as names;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};

/// Decode a query key or value as the collector does (malformed escapes kept as written,
/// bytes that are not UTF-8 replaced): they are re-encoded, never rejected.
fn form_decode(s: &str) -> String {
    component::text::form_decode_lossy(s).into_owned()
}

/// A parsed `scheme://authority/path?query`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BaseUrl {
    pub scheme: String,
    pub authority: String,
    pub path: String,
    pub query: String,
}

/// Parse an endpoint as the flags accept it.
pub fn base_uri(endpoint: &str, insecure: bool) -> Result<BaseUrl, String> {
    let endpoint = endpoint.trim();
    if endpoint.is_empty() {
        return Err("empty URL".into());
    }
    let (scheme, rest) = match endpoint.split_once("://") {
        Some((s, r)) => (s.to_ascii_lowercase(), r),
        None => (
            if insecure { "http" } else { "https" }.to_string(),
            endpoint,
        ),
    };
    if scheme != "http" && scheme != "https" {
        return Err(format!(
            "scheme {scheme:?} is not supported (http or https)"
        ));
    }
    let rest = rest.split('#').next().unwrap_or("");
    let auth_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let authority = &rest[..auth_end];
    if authority.is_empty() {
        return Err(format!("{endpoint:?} has no host"));
    }
    authority
        .parse::<http::uri::Authority>()
        .map_err(|e| format!("invalid host {authority:?}: {e}"))?;
    let after = &rest[auth_end..];
    let (path, query) = match after.split_once('?') {
        Some((p, q)) => (p, q),
        None => (after, ""),
    };
    Ok(BaseUrl {
        scheme,
        authority: authority.to_string(),
        path: path.to_string(),
        query: query.to_string(),
    })
}

/// Go's `url.QueryEscape` leaves only ASCII letters, digits and `-_.~` unescaped.
const QUERY_ESCAPE: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// Encode like Go's `url.QueryEscape`: a space is `+`, every other byte outside
/// [`QUERY_ESCAPE`] is `%XX` (upper-case hex; a literal `+` is `%2B`, so the space
/// replacement cannot collide).
pub fn form_encode(s: &str) -> String {
    utf8_percent_encode(s, QUERY_ESCAPE)
        .to_string()
        .replace("%20", "+")
}

fn build(
    endpoint: &str,
    insecure: bool,
    suffix: &str,
    cluster_id: &str,
) -> Result<http::Uri, String> {
    let base = base_uri(endpoint, insecure)?;
    let mut path = base.path.trim_end_matches('/').to_string();
    if !path.ends_with(suffix) {
        path.push_str(suffix);
    }
    let mut pairs: Vec<(String, String)> = base
        .query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (form_decode(k), form_decode(v)),
            None => (form_decode(p), String::new()),
        })
        .filter(|(k, _)| k != names::PARAM_CLUSTER_ID)
        .collect();
    pairs.push((names::PARAM_CLUSTER_ID.to_string(), cluster_id.to_string()));
    pairs.sort_by(|a, b| a.0.cmp(&b.0));
    let query = pairs
        .iter()
        .map(|(k, v)| format!("{}={}", form_encode(k), form_encode(v)))
        .collect::<Vec<_>>()
        .join("&");
    let s = format!("{}://{}{}?{}", base.scheme, base.authority, path, query);
    s.parse::<http::Uri>()
        .map_err(|e| format!("invalid URL {s:?}: {e}"))
}

/// The push URL: `.../v1/metrics?cluster_id=<id>`.
pub fn push_url(endpoint: &str, insecure: bool, cluster_id: &str) -> Result<http::Uri, String> {
    build(endpoint, insecure, names::OTLP_METRICS_PATH, cluster_id)
}

/// The GET fallback URL: `.../api/v1/threshold?cluster_id=<id>`.
pub fn threshold_url(base: &str, insecure: bool, cluster_id: &str) -> Result<http::Uri, String> {
    build(base, insecure, names::THRESHOLD_API_PATH, cluster_id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn push_urls_follow_the_spec_examples() {
        let u = |e, i, c| push_url(e, i, c).unwrap().to_string();
        assert_eq!(
            u("fleet:4318", false, "prod-cluster"),
            "https://fleet:4318/v1/metrics?cluster_id=prod-cluster"
        );
        assert_eq!(
            u("fleet:4318", true, "prod"),
            "http://fleet:4318/v1/metrics?cluster_id=prod"
        );
        assert_eq!(
            u("http://fleet:4318/", false, "a b&c"),
            "http://fleet:4318/v1/metrics?cluster_id=a+b%26c"
        );
        assert_eq!(
            u("https://fleet/v1/metrics", false, "x"),
            "https://fleet/v1/metrics?cluster_id=x"
        );
        assert_eq!(
            u("https://fleet/base/", false, "x"),
            "https://fleet/base/v1/metrics?cluster_id=x"
        );
        assert_eq!(
            u("http://[::1]:4318", false, "x"),
            "http://[::1]:4318/v1/metrics?cluster_id=x"
        );
        // Existing parameters are kept and sorted; an existing cluster_id is replaced.
        assert_eq!(
            u("http://f:1/?z=1&cluster_id=old&a=%2F", false, "new"),
            "http://f:1/v1/metrics?a=%2F&cluster_id=new&z=1"
        );
    }

    #[test]
    fn threshold_urls() {
        assert_eq!(
            threshold_url("fleet:8080", true, "prod")
                .unwrap()
                .to_string(),
            "http://fleet:8080/api/v1/threshold?cluster_id=prod"
        );
        assert_eq!(
            threshold_url("https://fleet:8080/api/v1/threshold", false, "p")
                .unwrap()
                .to_string(),
            "https://fleet:8080/api/v1/threshold?cluster_id=p"
        );
    }

    #[test]
    fn bad_urls_are_rejected() {
        for bad in [
            "",
            "ftp://fleet:21",
            "http://",
            "http:///v1",
            "http://bad host:1",
        ] {
            assert!(push_url(bad, false, "c").is_err(), "{bad:?}");
        }
    }

    #[test]
    fn odd_query_values_are_decoded_leniently_and_re_encoded() {
        let u = |e| push_url(e, false, "c").unwrap().to_string();
        // A malformed escape is kept as written (its % re-encoded); bytes that are not
        // UTF-8 become U+FFFD; `+` and `%20` are both a space, written `+`.
        assert_eq!(
            u("http://f:1/?a=%zz&b=%FF&c2=x+y%20z"),
            "http://f:1/v1/metrics?a=%25zz&b=%EF%BF%BD&c2=x+y+z&cluster_id=c"
        );
        // A key without `=` keeps an empty value; empty pairs are dropped; the fragment
        // is not part of the query.
        assert_eq!(
            u("http://f:1/?flag&&x=1#frag"),
            "http://f:1/v1/metrics?cluster_id=c&flag=&x=1"
        );
        // A cluster id with reserved and non-ASCII characters.
        assert_eq!(
            push_url("f:1", true, "prod/eu ü+~").unwrap().to_string(),
            "http://f:1/v1/metrics?cluster_id=prod%2Feu+%C3%BC%2B~"
        );
    }

    #[test]
    fn form_round_trip() {
        for s in ["plain", "a b", "100%", "ä/ö?=&", "+"] {
            assert_eq!(form_decode(&form_encode(s)), s);
        }
    }
}
