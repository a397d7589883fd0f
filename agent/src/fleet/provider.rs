//! Cloud provider detection for `ingero.provider` (spec 6.1): AWS (IMDSv2), then GCP, then
//! Azure metadata services, 500 ms per probe and 1.5 s overall, once at start.

use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Method, Request};
use http_body_util::{BodyExt, Empty, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

pub const PROBE_TIMEOUT: Duration = Duration::from_millis(500);
pub const TOTAL_BUDGET: Duration = Duration::from_millis(1500);
const BODY_CAP: usize = 4096;

/// Where each provider's metadata service lives (overridable for tests).
#[derive(Debug, Clone)]
pub struct Endpoints {
    pub aws: String,
    pub gcp: String,
    pub azure: String,
}

impl Default for Endpoints {
    fn default() -> Self {
        Endpoints {
            aws: "http://169.254.169.254".into(),
            gcp: "http://metadata.google.internal".into(),
            azure: "http://169.254.169.254".into(),
        }
    }
}

/// An AWS instance id: `i-` and 17 lower-case hex digits.
pub fn is_aws_instance_id(s: &str) -> bool {
    s.strip_prefix("i-").is_some_and(|h| {
        h.len() == 17
            && h.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

type Plain = Client<HttpConnector, Empty<Bytes>>;

async fn call(
    client: &Plain,
    method: Method,
    url: &str,
    headers: &[(&str, &str)],
    deadline: Instant,
) -> Option<(u16, String)> {
    let mut b = Request::builder().method(method).uri(url);
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    let req = b.body(Empty::new()).ok()?;
    let left = deadline.checked_duration_since(Instant::now())?;
    let fut = async {
        let resp = client.request(req).await.ok()?;
        let status = resp.status().as_u16();
        let body = Limited::new(resp.into_body(), BODY_CAP)
            .collect()
            .await
            .ok()?
            .to_bytes();
        Some((status, String::from_utf8_lossy(&body).trim().to_string()))
    };
    tokio::time::timeout(PROBE_TIMEOUT.min(left), fut)
        .await
        .ok()
        .flatten()
}

/// Probe the metadata services; `None` when none answers as expected.
pub async fn detect(ep: &Endpoints) -> Option<&'static str> {
    let mut http = HttpConnector::new();
    http.set_connect_timeout(Some(PROBE_TIMEOUT));
    let client: Plain = Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(0)
        .build(http);
    let deadline = Instant::now() + TOTAL_BUDGET;
    let token_url = format!("{}/latest/api/token", ep.aws);
    if let Some((200, token)) = call(
        &client,
        Method::PUT,
        &token_url,
        &[("X-aws-ec2-metadata-token-ttl-seconds", "60")],
        deadline,
    )
    .await
    {
        let id_url = format!("{}/latest/meta-data/instance-id", ep.aws);
        if let Some((200, id)) = call(
            &client,
            Method::GET,
            &id_url,
            &[("X-aws-ec2-metadata-token", &token)],
            deadline,
        )
        .await
            && is_aws_instance_id(&id)
        {
            return Some("aws");
        }
    }
    let gcp_url = format!("{}/computeMetadata/v1/instance/id", ep.gcp);
    if let Some((200, _)) = call(
        &client,
        Method::GET,
        &gcp_url,
        &[("Metadata-Flavor", "Google")],
        deadline,
    )
    .await
    {
        return Some("gcp");
    }
    let az_url = format!("{}/metadata/instance?api-version=2021-02-01", ep.azure);
    if let Some((200, _)) = call(
        &client,
        Method::GET,
        &az_url,
        &[("Metadata", "true")],
        deadline,
    )
    .await
    {
        return Some("azure");
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aws_instance_ids() {
        assert!(is_aws_instance_id("i-0123456789abcdef0"));
        assert!(!is_aws_instance_id("i-0123456789ABCDEF0"));
        assert!(!is_aws_instance_id("i-0123"));
        assert!(!is_aws_instance_id("0123456789abcdef012"));
    }

    #[tokio::test]
    async fn nothing_answers_on_a_closed_port() {
        // Port 9 on loopback (discard) is closed here: every probe fails fast.
        let ep = Endpoints {
            aws: "http://127.0.0.1:9".into(),
            gcp: "http://127.0.0.1:9".into(),
            azure: "http://127.0.0.1:9".into(),
        };
        assert_eq!(detect(&ep).await, None);
    }
}
