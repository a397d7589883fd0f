//! DNS rebinding: a loopback listener without `auth` answers only requests addressed to an
//! IP address or a local name, so a web page that rebinds its own name to 127.0.0.1 cannot
//! read diagnostics or the live view through a browser on the same machine.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::net::SocketAddr;

use common::*;

fn get_host(addr: SocketAddr, host: &str, path: &str) -> Resp {
    raw(
        addr,
        format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").as_bytes(),
    )
}

#[test]
fn open_loopback_listeners_refuse_foreign_host_names() {
    let f = Fleet::start_with(&test_config("1s", &[]), &[]);
    let admin = f.admin_api();
    let port = admin.port();
    for host in [
        format!("attacker.example:{port}"),
        "attacker.example".to_string(),
        format!("127.0.0.1.nip.io:{port}"),
        format!("LOCALHOST.attacker.example:{port}"),
    ] {
        for path in ["/api/v1/diagnostics", "/api/v1/view", "/view/"] {
            let r = get_host(admin, &host, path);
            assert_eq!(r.status, 403, "{host} {path}: {}", r.text());
            assert!(!r.text().contains("cluster"), "{}", r.text());
        }
    }
    for host in [
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        "localhost".to_string(),
        format!("fleet.localhost:{port}"),
        "fleet".to_string(),
        format!("[::1]:{port}"),
    ] {
        let r = get_host(admin, &host, "/api/v1/diagnostics");
        assert_ne!(r.status, 403, "{host}: {}", r.text());
    }
    // The other open listeners too: agent API, OTLP/HTTP, exporter, self-telemetry.
    for (addr, path) in [
        (f.agent_api(), "/api/v1/threshold?cluster_id=a"),
        (f.http(), "/v1/metrics"),
        (f.prometheus(), "/metrics"),
        (f.telemetry(), "/metrics"),
    ] {
        assert_eq!(
            get_host(addr, "attacker.example", path).status,
            403,
            "{addr}"
        );
    }
    let t = get(f.telemetry(), "/metrics").text();
    let refused = prom_value(
        &t,
        "ingero_fleet_requests_refused_total{listener=\"ingero_threshold/admin\",reason=\"host_not_allowed\"}",
    );
    assert_eq!(refused, Some(12.0), "{t}");
}
