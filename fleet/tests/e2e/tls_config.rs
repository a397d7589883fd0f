//! TLS configuration against the real binary: plaintext on a non-loopback address needs
//! `service.allow_plaintext_listeners`, `validate` names the key of each bad TLS file and
//! warns on a loose key mode, and `examples/fleet-config-tls.yaml` validates and serves.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;
use crate::tls_support;

use std::net::SocketAddr;
use std::process::Command;

use common::*;
use testkit::AgentPush;
use tls_support::*;

fn run(args: &[&str]) -> (i32, String) {
    let out = Command::new(bin()).args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const PLAINTEXT_ALL_INTERFACES: &str = r#"
receivers:
  otlp:
    protocols:
      http:
        endpoint: 0.0.0.0:0
processors:
  ingero:
extensions:
  ingero_threshold:
    agent_endpoint: 127.0.0.1:0
    admin_endpoint: ""
exporters:
  debug:
service:
  extensions: [ingero_threshold]
  pipelines:
    metrics: {receivers: [otlp], processors: [ingero], exporters: [debug]}
  telemetry:
    metrics:
      readers: [{pull: {exporter: {prometheus: {host: 127.0.0.1, port: 0}}}}]
"#;

#[test]
fn plaintext_on_a_non_loopback_address_needs_the_opt_out() {
    let dir = tempdir::TempDir::new("tls-plain");
    let cfg = dir.path().join("fleet.yaml");
    std::fs::write(&cfg, PLAINTEXT_ALL_INTERFACES).unwrap();
    let cfg = cfg.to_string_lossy().into_owned();

    let (code, err) = run(&["validate", "--config", &cfg]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("receivers.otlp.protocols.http.endpoint: 0.0.0.0:0 is not a loopback address")
            && err.contains("service.allow_plaintext_listeners: true"),
        "{err}"
    );
    // Starting refuses the same way (exit before binding anything).
    let (code, err) = run(&["--config", &cfg]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("service.allow_plaintext_listeners"), "{err}");

    // With the opt-out it starts and serves plaintext.
    let mut f = Fleet::spawn(
        &[
            "--config",
            &cfg,
            "--set",
            "service.allow_plaintext_listeners=true",
        ],
        &[],
    );
    assert!(f.http().ip().is_unspecified());
    let r = push_json(
        SocketAddr::from(([127, 0, 0, 1], f.http().port())),
        "p",
        &AgentPush::new("p", "n", 0.9).to_json(),
    );
    assert_eq!(r.status, 200);
    assert!(f.terminate().0.success());

    // With TLS on that listener no opt-out is needed.
    let pki = Pki::new("tls-plain-ok");
    let (code, err) = run(&[
        "validate",
        "--config",
        &cfg,
        "--set",
        &format!(
            "receivers.otlp.protocols.http.tls={}",
            pki.tls_block(false, "")
        ),
    ]);
    assert_eq!(code, 0, "{err}");
}

#[test]
fn validate_names_the_key_of_each_bad_tls_file() {
    let pki = Pki::new("tls-validate");
    let other = leaf(&pki.ca, &["localhost"], 900, false, Validity::Current);
    write_private(&pki.path("other.key"), &other.key_pem);
    write_private(&pki.path("empty-ca.pem"), "# no certificates here\n");
    write_private(&pki.path("loose.key"), &pki.server.key_pem);
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(
            pki.path("loose.key"),
            std::fs::Permissions::from_mode(0o644),
        )
        .unwrap();
    }
    let dir = tempdir::TempDir::new("tls-validate-cfg");
    let cfg = dir.path().join("fleet.yaml");
    std::fs::write(
        &cfg,
        PLAINTEXT_ALL_INTERFACES.replace("0.0.0.0:0", "127.0.0.1:0"),
    )
    .unwrap();
    let cfg = cfg.to_string_lossy().into_owned();
    let set = |k: &str, v: String| format!("{k}={v}");
    let cases = [
        (
            set(
                "receivers.otlp.protocols.http.tls",
                format!(
                    "{{cert_file: {}, key_file: {}}}",
                    pki.p("missing.pem"),
                    pki.p("server.key")
                ),
            ),
            "receivers.otlp.protocols.http.tls.cert_file: cannot read",
        ),
        (
            set(
                "receivers.otlp.protocols.http.tls",
                format!(
                    "{{cert_file: {}, key_file: {}}}",
                    pki.p("server.pem"),
                    pki.p("other.key")
                ),
            ),
            "receivers.otlp.protocols.http.tls.key_file: ",
        ),
        (
            set(
                "extensions.ingero_threshold.tls",
                pki.tls_block(
                    false,
                    &format!(", client_ca_file: {}", pki.p("empty-ca.pem")),
                ),
            ),
            "extensions.ingero_threshold.tls.client_ca_file: ",
        ),
        (
            set(
                "extensions.ingero_threshold.tls",
                "{key_file: x}".to_string(),
            ),
            "extensions.ingero_threshold.tls.cert_file: is required",
        ),
        (
            set(
                "receivers.otlp.protocols.http.tls",
                pki.tls_block(false, ", min_version: \"1.1\""),
            ),
            "min_version",
        ),
    ];
    for (arg, want) in &cases {
        let (code, err) = run(&["validate", "--config", &cfg, "--set", arg]);
        assert_eq!(code, 1, "{arg}: {err}");
        assert!(err.contains(want), "{arg}: want {want:?} in\n{err}");
    }
    // The mismatch message says what is wrong.
    let (_, err) = run(&["validate", "--config", &cfg, "--set", &cases[1].0]);
    assert!(err.contains("does not match the certificate"), "{err}");
    let (_, err) = run(&["validate", "--config", &cfg, "--set", &cases[2].0]);
    assert!(err.contains("contains no certificates"), "{err}");

    // A key others can read is a warning, not an error.
    let (code, err) = run(&[
        "validate",
        "--config",
        &cfg,
        "--set",
        &format!(
            "receivers.otlp.protocols.http.tls={{cert_file: {}, key_file: {}}}",
            pki.p("server.pem"),
            pki.p("loose.key")
        ),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("warning: receivers.otlp.protocols.http.tls.key_file:")
            && err.contains("readable by group or others"),
        "{err}"
    );
}

#[test]
fn the_tls_example_config_validates_and_serves_with_its_files() {
    let pki = Pki::new("tls-example");
    write_private(&pki.path("fleet.pem"), &pki.server.cert_pem);
    write_private(&pki.path("fleet.key"), &pki.server.key_pem);
    write_private(&pki.path("agents-ca.pem"), &pki.ca.pem);
    write_private(&pki.path("scrapers-ca.pem"), &pki.ca.pem);
    let text = std::fs::read_to_string(format!(
        "{}/../examples/fleet-config-tls.yaml",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    assert!(text.contains("/etc/ingero/tls/"));
    let dir = pki.dir.path().to_string_lossy().into_owned();
    // Same document, files in the temp dir, ports chosen by the OS.
    let text = text
        .replace("/etc/ingero/tls", &dir)
        .replace("0.0.0.0:4317", "0.0.0.0:0")
        .replace("0.0.0.0:4318", "0.0.0.0:0")
        .replace("0.0.0.0:8080", "0.0.0.0:0")
        .replace("127.0.0.1:8081", "127.0.0.1:0")
        .replace("0.0.0.0:9090", "0.0.0.0:0")
        .replace("port: 8888", "port: 0");
    let cfg = pki.path("fleet-tls.yaml");
    std::fs::write(&cfg, &text).unwrap();
    let cfg = cfg.to_string_lossy().into_owned();
    let (code, err) = run(&["validate", "--config", &cfg]);
    assert_eq!(code, 0, "{err}");
    assert!(!err.contains("warning"), "{err}");

    // It starts without the plaintext opt-out (every 0.0.0.0 listener has tls) and an
    // agent with a client certificate gets served on the public OTLP port.
    let f = Fleet::spawn(&["--config", &cfg], &[]);
    let agent = leaf(&pki.ca, &["node-9"], 400, true, Validity::Current);
    let cfg = client_config(&pki.ca.pem, Some(&agent), &[b"http/1.1"], false);
    let addr = SocketAddr::from(([127, 0, 0, 1], f.http().port()));
    let body = AgentPush::new("ex", "ex-node", 0.9).to_json();
    let x = https(addr, "localhost", cfg, &push_req(addr, "ex", &body)).unwrap();
    assert_eq!(x.resp.status, 200);
}
