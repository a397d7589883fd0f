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

/// `addr` as this test reaches it: a listener bound to every interface (`0.0.0.0:port`)
/// is reached over loopback.
fn local(addr: SocketAddr) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], addr.port()))
}

/// Every listener that serves HTTP bound to all interfaces (not loopback, so the local-name
/// check is off), with the given extra keys under each.
fn all_interfaces_config(extra: &str) -> String {
    let cfg = test_config("1s", &[])
        .replace(
            "      http:\n        endpoint: 127.0.0.1:0\n",
            &format!(
                "      http:\n        endpoint: 0.0.0.0:0\n{}",
                indent(extra, 8)
            ),
        )
        .replace(
            "    admin_endpoint: 127.0.0.1:0\n",
            &format!("    admin_endpoint: 0.0.0.0:0\n{}", indent(extra, 4)),
        )
        .replace(
            "    agent_endpoint: 127.0.0.1:0\n",
            "    agent_endpoint: 0.0.0.0:0\n",
        )
        .replace(
            "  health_check:\n    endpoint: 127.0.0.1:0\n",
            &format!(
                "  health_check:\n    endpoint: 0.0.0.0:0\n{}",
                indent(extra, 4)
            ),
        )
        .replace(
            "  prometheus:\n    endpoint: 127.0.0.1:0\n",
            &format!(
                "  prometheus:\n    endpoint: 0.0.0.0:0\n{}",
                indent(extra, 4)
            ),
        )
        .replace(
            "                host: 127.0.0.1\n                port: 0\n",
            &format!(
                "                host: 0.0.0.0\n                port: 0\n{}",
                indent(extra, 16)
            ),
        )
        .replace(
            "service:\n",
            "service:\n  allow_plaintext_listeners: true\n",
        );
    assert_eq!(cfg.matches("0.0.0.0").count(), 6, "{cfg}");
    cfg
}

fn indent(lines: &str, n: usize) -> String {
    lines
        .lines()
        .map(|l| format!("{}{l}\n", " ".repeat(n)))
        .collect()
}

/// The HTTP listeners with a path each serves (not 403 when the host passes).
fn http_listeners(f: &Fleet) -> [(&'static str, SocketAddr, &'static str); 6] {
    [
        ("otlp/http", local(f.http()), "/v1/metrics"),
        (
            "ingero_threshold/agent",
            local(f.agent_api()),
            "/api/v1/threshold?cluster_id=a",
        ),
        (
            "ingero_threshold/admin",
            local(f.admin_api()),
            "/api/v1/diagnostics",
        ),
        ("health_check", local(f.addr("health_check")), "/"),
        ("prometheus", local(f.prometheus()), "/metrics"),
        ("telemetry", local(f.telemetry()), "/metrics"),
    ]
}

/// The status of `GET http://{authority}{path}` over HTTP/2 without TLS (prior knowledge):
/// the name travels as `:authority`, with no `Host` header.
fn h2_status(addr: SocketAddr, authority: &str, path: &str) -> u16 {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (client, conn) = h2::client::handshake(tcp).await.unwrap();
        tokio::spawn(conn);
        let mut client = client.ready().await.unwrap();
        let req = http::Request::get(format!("http://{authority}{path}"))
            .body(())
            .unwrap();
        let (resp, _) = client.send_request(req, true).unwrap();
        resp.await.unwrap().status().as_u16()
    })
}

#[test]
fn allowed_hosts_guard_listeners_on_any_address() {
    let f = Fleet::start_with(
        &all_interfaces_config("allowed_hosts: [fleet.example.com, 'fleet.ns.svc:4318']\n"),
        &[],
    );
    // No warning: every data listener has allowed_hosts.
    assert!(!f.log_text().contains("DNS rebinding") && !f.log_text().contains("rebound"));
    let listeners = http_listeners(&f);
    for (name, addr, path) in listeners {
        let port = addr.port();
        for host in [
            "attacker.example".to_string(),
            format!("attacker.example:{port}"),
            format!("fleet.example.com.attacker.example:{port}"),
            // Not implied off loopback: only what the list names.
            format!("localhost:{port}"),
            "fleet".to_string(),
            // Listed with one port only.
            "fleet.ns.svc:4319".to_string(),
            "fleet.ns.svc".to_string(),
        ] {
            let r = get_host(addr, &host, path);
            assert_eq!(r.status, 403, "{name} {host} {path}: {}", r.text());
            assert!(r.text().contains("allowed_hosts"), "{}", r.text());
        }
        for host in [
            "fleet.example.com".to_string(),
            format!("FLEET.example.com.:{port}"),
            "fleet.ns.svc:4318".to_string(),
            // Addressed by IP (probes and scrapes by pod IP): no name to rebind.
            format!("127.0.0.1:{port}"),
            "10.1.2.3".to_string(),
            format!("[::1]:{port}"),
        ] {
            let r = get_host(addr, &host, path);
            assert_ne!(r.status, 403, "{name} {host}: {}", r.text());
        }
    }
    // HTTP/2: the :authority is checked the same way.
    let admin = local(f.admin_api());
    assert_eq!(
        h2_status(admin, "attacker.example", "/api/v1/diagnostics"),
        403
    );
    assert_eq!(
        h2_status(admin, "fleet.example.com", "/api/v1/diagnostics"),
        200
    );
    let page = get(local(f.telemetry()), "/metrics").text();
    for (name, _, _) in listeners {
        let want = if name == "ingero_threshold/admin" {
            8.0
        } else {
            7.0
        };
        let series = format!(
            "ingero_fleet_requests_refused_total{{listener=\"{name}\",reason=\"host_not_allowed\"}}"
        );
        assert_eq!(prom_value(&page, &series), Some(want), "{series}\n{page}");
    }
}

#[test]
fn open_listeners_on_any_address_without_allowed_hosts_are_a_warning() {
    let dir = std::env::temp_dir().join(format!("host-header-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("fleet.yaml");
    std::fs::write(&path, all_interfaces_config("")).unwrap();
    let out = std::process::Command::new(bin())
        .args(["validate", "--config", &path.to_string_lossy()])
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    for key in [
        "receivers.otlp.protocols.http",
        "extensions.ingero_threshold",
        "exporters.prometheus",
        "service.telemetry.metrics.readers.0.pull.exporter.prometheus",
    ] {
        assert!(
            err.lines()
                .any(|l| l.starts_with("warning: ")
                    && l.contains(&format!("set {key}.allowed_hosts"))),
            "{key}:\n{err}"
        );
    }
    // The health check answers up or down only: no warning for it.
    assert!(
        !err.contains("extensions.health_check.allowed_hosts"),
        "{err}"
    );
    // Two threshold listeners, one warning each.
    assert_eq!(
        err.matches("set extensions.ingero_threshold.allowed_hosts")
            .count(),
        2,
        "{err}"
    );
    // Without the key such a listener answers any name (the warning's point).
    let f = Fleet::start_with(&all_interfaces_config(""), &[]);
    for (name, addr, path) in http_listeners(&f) {
        let r = get_host(addr, "attacker.example", path);
        assert_ne!(r.status, 403, "{name}: {}", r.text());
    }
}
