//! A minimal HTTP/1 server for the agent's small read-only endpoints (sink metrics and
//! probes): GET only, header read timeout, no request body read, drains on shutdown.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Response, StatusCode};
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};

pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(5);

/// Resolves once `rx` holds `true` (at once if it already does, unlike `changed()`), or when
/// the sender is gone.
pub async fn stopped(rx: &mut tokio::sync::watch::Receiver<bool>) {
    let _ = rx.wait_for(|stop| *stop).await;
}

/// `handler(path) -> (status, content type, body)`.
pub async fn serve<H>(
    listener: tokio::net::TcpListener,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
    handler: H,
) where
    H: Fn(&str) -> (u16, &'static str, String) + Send + Sync + 'static,
{
    let handler = Arc::new(handler);
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = stopped(&mut shutdown) => return,
        };
        let Ok((stream, _)) = accepted else { continue };
        let handler = handler.clone();
        let mut conn_shutdown = shutdown.clone();
        tokio::spawn(async move {
            let svc = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                let handler = handler.clone();
                async move {
                    let (status, ctype, body) = if req.method() == Method::GET {
                        handler(req.uri().path())
                    } else {
                        (405, "text/plain", "method not allowed".to_string())
                    };
                    let resp = Response::builder()
                        .status(
                            StatusCode::from_u16(status)
                                .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
                        )
                        .header(http::header::CONTENT_TYPE, ctype)
                        .body(Full::new(Bytes::from(body)))
                        .unwrap_or_else(|_| Response::new(Full::new(Bytes::new())));
                    Ok::<_, Infallible>(resp)
                }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIMEOUT)
                .serve_connection(TokioIo::new(stream), svc);
            tokio::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => {}
                _ = stopped(&mut conn_shutdown) => {
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.await;
                }
            }
        });
    }
}
