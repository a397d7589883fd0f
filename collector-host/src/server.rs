//! One HTTP server loop for every listener of the host: HTTP/1.1 and h2c (or HTTPS with
//! ALPN h2/http1.1), a cap on open connections and on connections per client address, a
//! deadline for the first byte and an idle limit ([`crate::conn_guard`]), a header-read
//! timeout, and a graceful drain on shutdown.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::conn_guard::{BusyGuard, ConnTable, Guarded};

/// Response bodies: complete ([`response`]) or streamed ([`streaming_response`]).
pub type Body = BoxBody<Bytes, std::io::Error>;
pub type BoxFut = Pin<Box<dyn Future<Output = Response<Body>> + Send>>;
/// A request handler: the request and the peer address in, a complete response out.
pub type Handler = Arc<dyn Fn(Request<Incoming>, SocketAddr) -> BoxFut + Send + Sync>;

/// Per-listener limits.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// Listener name for logs and counters (`otlp/http`, `ingero_threshold/agent`, ...).
    pub name: String,
    pub header_read_timeout: Duration,
    /// 0 = unlimited.
    pub max_connections: usize,
    /// Serve TLS with this listener's (reloadable) certificate; `None` = plaintext.
    pub tls: Option<Arc<crate::tls::ListenerTls>>,
    /// First-byte deadline, idle limit, per-client-address cap.
    pub lifecycle: crate::conn_guard::Lifecycle,
}

/// Connection-level counters of one listener (exported by [`crate::telemetry`]).
#[derive(Debug, Default)]
pub struct ListenerStats {
    pub listener: String,
    pub accepted: AtomicU64,
    /// Closed at accept because `max_connections` were open.
    pub refused_over_cap: AtomicU64,
    /// Closed at accept because the client address had `max_connections_per_client` open.
    pub refused_per_client: AtomicU64,
    /// Closed because no byte came within `first_byte_timeout` (of accept, or of the end
    /// of the TLS handshake).
    pub closed_first_byte_timeout: AtomicU64,
    /// Closed because no request was in service or started for `idle_timeout`.
    pub closed_idle_timeout: AtomicU64,
    /// Idle connections closed to make room for a new one at `max_connections` or
    /// `max_connections_per_client`.
    pub closed_evicted: AtomicU64,
    /// Open now (each open HTTP/1.1 keep-alive connection holds hyper's read and write
    /// buffers, about 16 KiB once it has carried a request).
    pub open: AtomicU64,
    /// Requests refused by [`host_guard`] (a name that is not this machine's, or not in
    /// the listener's `allowed_hosts`).
    pub refused_host: AtomicU64,
}

/// Counts one open connection until dropped.
#[derive(Debug)]
pub(crate) struct OpenConnection(Arc<ListenerStats>);

impl OpenConnection {
    pub(crate) fn new(stats: &Arc<ListenerStats>) -> Self {
        stats.accepted.fetch_add(1, Relaxed);
        stats.open.fetch_add(1, Relaxed);
        OpenConnection(stats.clone())
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Relaxed);
    }
}

/// Resolve and bind `host:port` (port 0 picks a free port).
pub async fn bind(endpoint: &str) -> std::io::Result<TcpListener> {
    let (host, port) = crate::config::model::parse_endpoint(endpoint)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), port))
        .await?
        .collect();
    let mut last = None;
    for addr in addrs {
        match TcpListener::bind(addr).await {
            Ok(l) => return Ok(l),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other(format!("{endpoint}: no address to bind"))))
}

/// Serve `handler` on `listener` until `shutdown` turns true, then stop accepting and give
/// open connections `drain` to finish their in-flight requests.
pub async fn serve(
    listener: TcpListener,
    opts: ServerOptions,
    handler: Handler,
    mut shutdown: watch::Receiver<bool>,
    drain: Duration,
    stats: Arc<ListenerStats>,
) {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(opts.header_read_timeout)
        .keep_alive(true);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(256);
    let builder = Arc::new(builder);
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let table = ConnTable::new(
        opts.max_connections,
        opts.lifecycle.max_connections_per_client,
        None,
    );
    let lifecycle = opts.lifecycle;
    while let Some((stream, peer)) = accept(&listener, &mut shutdown, &opts.name).await {
        let Some(slot) = table.admit(peer.ip(), &stats) else {
            drop(stream);
            continue;
        };
        let open = OpenConnection::new(&stats);
        let _ = stream.set_nodelay(true);
        let h = handler.clone();
        let busy = slot.busy();
        let b = busy.clone();
        let svc = service_fn(move |req| {
            let h = h.clone();
            let in_service = b.enter();
            async move {
                let r = h(req, peer).await;
                Ok::<_, Infallible>(hold_while_streaming(r, in_service))
            }
        });
        let name = opts.name.clone();
        let Some(tls) = opts.tls.clone() else {
            let stream = Guarded::new(stream, lifecycle, busy, stats.clone(), Some(slot));
            let conn = builder
                .serve_connection_with_upgrades(TokioIo::new(stream), svc)
                .into_owned();
            let conn = graceful.watch(conn);
            tokio::spawn(async move {
                if let Err(e) = conn.await {
                    tracing::debug!(listener = %name, peer = %peer, error = %e, "connection ended with error");
                }
                drop(open);
            });
            continue;
        };
        // TLS: the handshake runs in the connection's task (bounded by its timeout), so a
        // slow or hostile client never holds up the accept loop.
        let builder = builder.clone();
        let watcher = graceful.watcher();
        let shutdown = shutdown.clone();
        let stats = stats.clone();
        tokio::spawn(async move {
            let Some(stream) = tls.accept(stream, peer).await else {
                return;
            };
            if *shutdown.borrow() {
                return;
            }
            // The first-byte deadline starts again once the handshake is done.
            let stream = Guarded::new(stream, lifecycle, busy, stats, Some(slot));
            let conn = builder
                .serve_connection_with_upgrades(TokioIo::new(stream), svc)
                .into_owned();
            if let Err(e) = watcher.watch(conn).await {
                tracing::debug!(listener = %name, peer = %peer, error = %e, "connection ended with error");
            }
            drop(open);
        });
    }
    drop(listener);
    if tokio::time::timeout(drain, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(listener = %opts.name, "drain timed out; closing remaining connections");
    }
}

/// A response whose body is streamed keeps its request in service until the body is
/// done, so a long scrape page is never idle; a complete body ends it now.
fn hold_while_streaming(r: Response<Body>, in_service: BusyGuard) -> Response<Body> {
    use hyper::body::Body as _;
    if r.body().size_hint().exact().is_some() {
        return r;
    }
    r.map(|body| {
        HeldBody {
            body,
            _in_service: in_service,
        }
        .boxed()
    })
}

/// A body that holds its request's [`BusyGuard`] until dropped.
struct HeldBody {
    body: Body,
    _in_service: BusyGuard,
}

impl hyper::body::Body for HeldBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

/// The next connection on `listener`, or `None` once `shutdown` turns true. Accept errors
/// (EMFILE and friends) are logged and retried after a short pause instead of spinning.
pub async fn accept(
    listener: &TcpListener,
    shutdown: &mut watch::Receiver<bool>,
    name: &str,
) -> Option<(tokio::net::TcpStream, SocketAddr)> {
    loop {
        let accepted = tokio::select! {
            r = listener.accept() => r,
            _ = shutdown.wait_for(|v| *v) => return None,
        };
        match accepted {
            Ok(x) => return Some(x),
            Err(e) => {
                tracing::warn!(listener = %name, error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// A complete response with a body and content type.
/// Whether a request naming `host` (its Host header or HTTP/2 authority, port included)
/// may reach a loopback listener that takes no token: an IP address, `localhost` or a
/// `*.localhost` name, or a name without a dot (a local alias). A web page whose own name
/// (`attacker.example`) was rebound to 127.0.0.1 sends that name and is refused, so it
/// cannot read the listener through the victim's browser.
pub fn host_allowed(host: &str) -> bool {
    let name = if let Some(rest) = host.strip_prefix('[') {
        return rest.split_once(']').is_some_and(|(ip, port)| {
            ip.parse::<std::net::Ipv6Addr>().is_ok()
                && (port.is_empty()
                    || port
                        .strip_prefix(':')
                        .is_some_and(|p| p.bytes().all(|b| b.is_ascii_digit())))
        });
    } else {
        match host.rsplit_once(':') {
            Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
            _ => host,
        }
    };
    // Compared without a lower-cased copy, cheapest test first (the answer is the same
    // in any order): most names are dotless aliases or IPv4 addresses.
    let name = name.strip_suffix('.').unwrap_or(name);
    let b = name.as_bytes();
    const LOCALHOST: &[u8] = b".localhost";
    !name.is_empty()
        && (!b.contains(&b'.')
            || b.eq_ignore_ascii_case(&LOCALHOST[1..])
            || (b.len() >= LOCALHOST.len()
                && b[b.len() - LOCALHOST.len()..].eq_ignore_ascii_case(LOCALHOST))
            || is_plain_ipv4(b)
            || name.parse::<std::net::IpAddr>().is_ok())
}

/// Whether `b` is a dotted-quad IPv4 address in the form the standard parser takes (four
/// decimal parts of 1-3 digits, at most 255, no leading zero): a quick answer for the
/// usual Host of a loopback client, before the general parser.
fn is_plain_ipv4(b: &[u8]) -> bool {
    let mut parts = 0;
    for part in b.split(|&c| c == b'.') {
        parts += 1;
        let ok = match *part {
            [d] => d.is_ascii_digit(),
            [d1, d2] => (b'1'..=b'9').contains(&d1) && d2.is_ascii_digit(),
            [d1, d2, d3] => {
                (b'1'..=b'2').contains(&d1)
                    && d2.is_ascii_digit()
                    && d3.is_ascii_digit()
                    && (u16::from(d1 - b'0') * 100
                        + u16::from(d2 - b'0') * 10
                        + u16::from(d3 - b'0'))
                        <= 255
            }
            _ => false,
        };
        if !ok || parts > 4 {
            return false;
        }
    }
    parts == 4
}

/// The names a listener's requests may be addressed to.
#[derive(Debug, Clone)]
pub enum HostCheck {
    /// An open loopback listener: what [`host_allowed`] accepts.
    Local,
    /// A listener with `allowed_hosts`: IP addresses and the listed names, and with
    /// `local` (an open loopback listener) what [`host_allowed`] accepts too.
    Listed {
        hosts: component::listen_addr::AllowedHosts,
        local: bool,
    },
}

impl HostCheck {
    pub fn allows(&self, host: &str) -> bool {
        match self {
            HostCheck::Local => host_allowed(host),
            HostCheck::Listed { hosts, local } => {
                hosts.allows(host) || (*local && host_allowed(host))
            }
        }
    }

    fn refusal(&self) -> &'static str {
        match self {
            HostCheck::Local => {
                "this listener takes no token and answers only requests addressed to \
                 an IP address or localhost (Host header refused)\n"
            }
            HostCheck::Listed { .. } => {
                "this listener answers only requests addressed to an IP address or a name \
                 in its allowed_hosts (Host header refused)\n"
            }
        }
    }
}

/// Refuse (403, counted in `stats`) the requests whose host `check` refuses; a request
/// that names no host (HTTP/1.0) passes.
pub fn host_guard(handler: Handler, stats: Arc<ListenerStats>, check: HostCheck) -> Handler {
    let guard = HOST_GUARDS.fetch_add(1, Relaxed);
    Arc::new(move |req: Request<Incoming>, peer| {
        // Checked in place (the header borrowed, not copied): `None` names no host.
        let host = match req.uri().authority() {
            Some(a) => Some(a.as_str().as_bytes()),
            None => req.headers().get(http::header::HOST).map(|h| h.as_bytes()),
        };
        let allowed = host.map(|h| {
            LAST_ALLOWED_HOST.with(|memo| HostMemo::allows(memo, guard, h, |h| check.allows(h)))
        });
        match allowed {
            Some(false) => {
                stats.refused_host.fetch_add(1, Relaxed);
                let text = check.refusal();
                Box::pin(async move { response(403, "text/plain; charset=utf-8", text) })
            }
            _ => handler(req, peer),
        }
    })
}

/// Numbers the host guards, so that a memo entry names the guard (and so the check)
/// that accepted it; a guard built later (a reload) never reads another's entry.
static HOST_GUARDS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// The last host a guard accepted on this worker thread. A client sends the same
    /// Host on every request of a connection (and most clients of a listener send the
    /// same one), so the check itself runs when the host changes, not on every request.
    static LAST_ALLOWED_HOST: std::cell::RefCell<HostMemo> =
        const { std::cell::RefCell::new(HostMemo { guard: u64::MAX, len: 0, bytes: [0; HostMemo::MAX] }) };
}

/// One remembered accepted host: the guard's number and the host's exact bytes.
struct HostMemo {
    guard: u64,
    len: usize,
    bytes: [u8; HostMemo::MAX],
}

impl HostMemo {
    /// Longer hosts are checked every time (names are usually much shorter).
    const MAX: usize = 64;

    /// Whether `check` allows `host` (as text; a host that is not UTF-8 is checked in its
    /// lossy form, which no check accepts), answered from `memo` when `guard` accepted
    /// exactly these bytes last on this thread. Only acceptances are remembered: a
    /// refused host is checked again each time.
    fn allows(
        memo: &std::cell::RefCell<HostMemo>,
        guard: u64,
        host: &[u8],
        check: impl Fn(&str) -> bool,
    ) -> bool {
        if let Ok(m) = memo.try_borrow()
            && m.guard == guard
            && m.bytes.get(..m.len) == Some(host)
        {
            return true;
        }
        let ok = match std::str::from_utf8(host) {
            Ok(h) => check(h),
            Err(_) => check(&String::from_utf8_lossy(host)),
        };
        if ok
            && host.len() <= Self::MAX
            && let Ok(mut m) = memo.try_borrow_mut()
        {
            m.bytes[..host.len()].copy_from_slice(host);
            m.len = host.len();
            m.guard = guard;
        }
        ok
    }
}

pub fn response(status: u16, content_type: &str, body: impl Into<Bytes>) -> Response<Body> {
    let body = Full::new(body.into())
        .map_err(|never| match never {})
        .boxed();
    let mut r = Response::new(body);
    *r.status_mut() =
        http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR);
    if let Some(v) = content_type_value(content_type) {
        r.headers_mut().insert(http::header::CONTENT_TYPE, v);
    }
    r
}

/// The header value of a content type: the usual ones are constants (no validation, no
/// copy: every OTLP answer carries one), others are checked and copied.
fn content_type_value(content_type: &str) -> Option<http::HeaderValue> {
    const JSON: http::HeaderValue = http::HeaderValue::from_static("application/json");
    const PROTOBUF: http::HeaderValue = http::HeaderValue::from_static("application/x-protobuf");
    const TEXT: http::HeaderValue = http::HeaderValue::from_static("text/plain; charset=utf-8");
    match content_type {
        "application/json" => Some(JSON),
        "application/x-protobuf" => Some(PROTOBUF),
        "text/plain; charset=utf-8" => Some(TEXT),
        other => http::HeaderValue::from_str(other).ok(),
    }
}

/// A 200 whose body is streamed from `chunks` (sent with chunked transfer encoding on
/// HTTP/1.1). An `Err` item aborts the response: the connection is closed without the
/// final chunk, so the client sees a failed request, never a silently short page.
pub fn streaming_response(
    content_type: &str,
    chunks: tokio::sync::mpsc::Receiver<Result<Bytes, std::io::Error>>,
) -> Response<Body> {
    use tokio_stream::StreamExt;
    let frames = tokio_stream::wrappers::ReceiverStream::new(chunks).map(|c| c.map(Frame::data));
    let mut r = Response::new(StreamBody::new(frames).boxed());
    if let Ok(v) = http::HeaderValue::from_str(content_type) {
        r.headers_mut().insert(http::header::CONTENT_TYPE, v);
    }
    r
}

/// Adapt a component route (`component::api`) to a hyper handler. Bodies of requests to
/// these GET-only routes are ignored.
pub fn api_handler<F>(route: F) -> Handler
where
    F: Fn(&component::api::ApiRequest<'_>) -> component::api::ApiResponse + Send + Sync + 'static,
{
    let route = Arc::new(route);
    Arc::new(move |req: Request<Incoming>, _peer| {
        let route = route.clone();
        Box::pin(async move {
            let api = component::api::ApiRequest {
                method: req.method().as_str(),
                path: req.uri().path(),
                query: req.uri().query(),
            };
            let out = route(&api);
            let mut r = response(out.status, out.content_type, out.body);
            for (k, v) in out.headers {
                if let Ok(v) = http::HeaderValue::from_str(&v) {
                    r.headers_mut().insert(k, v);
                }
            }
            r
        })
    })
}

#[cfg(test)]
mod tests {
    use super::host_allowed;

    /// The quick IPv4 check agrees with the standard parser wherever it says yes.
    #[test]
    fn plain_ipv4_is_a_subset_of_the_standard_parser() {
        for yes in [
            "127.0.0.1",
            "0.0.0.0",
            "255.255.255.255",
            "10.1.2.3",
            "199.9.10.200",
        ] {
            assert!(super::is_plain_ipv4(yes.as_bytes()), "{yes}");
            assert!(yes.parse::<std::net::Ipv4Addr>().is_ok(), "{yes}");
        }
        for no in [
            "256.0.0.1",
            "01.2.3.4",
            "1.2.3",
            "1.2.3.4.5",
            "1..2.3",
            "1.2.3.",
            "a.b.c.d",
            "1.2.3.1000",
            "300.1.1.1",
            "",
        ] {
            assert!(!super::is_plain_ipv4(no.as_bytes()), "{no}");
        }
        for n in 0..=255u16 {
            for text in [n.to_string(), format!("0{n}")] {
                let addr = format!("1.{text}.2.3");
                assert_eq!(
                    super::is_plain_ipv4(addr.as_bytes()),
                    addr.parse::<std::net::Ipv4Addr>().is_ok(),
                    "{addr}"
                );
            }
        }
    }

    /// The memo answers only for the guard and the exact bytes it accepted: another
    /// guard, another host, a refused host or a host too long to keep run the check.
    #[test]
    fn the_host_memo_answers_only_what_the_same_guard_accepted() {
        use std::cell::{Cell, RefCell};
        let memo = RefCell::new(super::HostMemo {
            guard: u64::MAX,
            len: 0,
            bytes: [0; super::HostMemo::MAX],
        });
        let calls = Cell::new(0);
        let check = |h: &str| {
            calls.set(calls.get() + 1);
            h.starts_with("ok")
        };
        let allows =
            |guard, host: &str| super::HostMemo::allows(&memo, guard, host.as_bytes(), check);
        assert!(allows(1, "ok-a:80"));
        assert!(allows(1, "ok-a:80"));
        assert_eq!(
            calls.get(),
            1,
            "the second request is answered from the memo"
        );
        assert!(allows(2, "ok-a:80"));
        assert_eq!(calls.get(), 2, "another guard runs its own check");
        assert!(!allows(2, "bad"));
        assert!(!allows(2, "bad"));
        assert_eq!(calls.get(), 4, "refusals are never remembered");
        assert!(allows(2, "ok-a:8"));
        assert_eq!(calls.get(), 5, "a prefix of the remembered host is checked");
        let long = format!("ok{}", "x".repeat(super::HostMemo::MAX));
        assert!(allows(2, &long));
        assert!(allows(2, &long));
        assert_eq!(
            calls.get(),
            7,
            "a host longer than the memo is checked each time"
        );
        // Bytes that are not UTF-8 reach the check in their lossy form.
        assert!(super::HostMemo::allows(&memo, 3, b"ok\xff", |h: &str| h == "ok\u{fffd}"));
    }

    #[test]
    fn hosts_an_open_loopback_listener_answers() {
        for ok in [
            "127.0.0.1",
            "127.0.0.1:8081",
            "[::1]:8081",
            "[::1]",
            "localhost",
            "LOCALHOST:1",
            "localhost.",
            "fleet.localhost:8081",
            "Fleet.LocalHost.",
            "LOCALHOST",
            "fleet",
            "ingero-fleet:4318",
            "10.1.2.3:80",
        ] {
            assert!(host_allowed(ok), "{ok}");
        }
        for refused in [
            "attacker.example",
            "attacker.example:8081",
            "127.0.0.1.nip.io",
            "localhost.attacker.example",
            "[not-an-ip]:1",
            "[::1]x",
            "",
            ":8081",
        ] {
            assert!(!host_allowed(refused), "{refused}");
        }
    }
}
