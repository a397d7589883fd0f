//! Helpers shared by the modules of this test binary.

use std::net::TcpListener as StdListener;

use http_body_util::{BodyExt, Full};

/// A loopback port free right now.
pub fn free_port() -> u16 {
    StdListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Send `req` over plain HTTP; its status and body as text.
pub async fn request(req: http::Request<Full<bytes::Bytes>>) -> (u16, String) {
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<Full<bytes::Bytes>>();
    let resp = client.request(req).await.unwrap();
    let status = resp.status().as_u16();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}
