//! Fleet URLs (spec 1.1, 2.2): a bare `host:port` gets `https` (or `http` when insecure),
//! the path gets `/v1/metrics` or `/api/v1/threshold` unless it already ends with it, and
//! `cluster_id` is set in the query with the other parameters kept, keys sorted, values
//! form-encoded (Go's `url.Values.Encode`).

use component::wire::http as names;

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

fn hex_val(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Decode `application/x-www-form-urlencoded` text (`+` is a space).
fn form_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b'%' if i + 2 < b.len() => match (hex_val(b[i + 1]), hex_val(b[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push(h << 4 | l);
                    i += 3;
                }
                _ => {
                    out.push(b'%');
                    i += 1;
                }
            },
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Encode like Go's `url.QueryEscape`.
pub fn form_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for &b in s.as_bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
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
    fn form_round_trip() {
        for s in ["plain", "a b", "100%", "ä/ö?=&", "+"] {
            assert_eq!(form_decode(&form_encode(s)), s);
        }
    }
}
