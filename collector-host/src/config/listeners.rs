//! The listeners a config asks for: their key paths and `tls` blocks, port conflicts, the
//! plaintext-only-on-loopback rule, and loading every `tls` block once.

use std::collections::{BTreeMap, HashMap, HashSet};

use component::config::ConfigErrors;
use component::{ComponentId, ConfigValue};

use super::model::{self, PLAINTEXT_OPT_OUT_KEY, ServerTlsConfig, TelemetryConfig};
use super::{ExporterPlan, ExtensionPlan, ListenerTlsPlan, ReceiverPlan};

/// Take the `tls` block out of a component's config tree, for components whose own
/// config type does not know it (the host serves their listener): the Prometheus exporter
/// and extensions whose metadata says `host_tls` (`ingero_threshold`, `echo_api`).
pub(super) fn take_tls(
    v: &ConfigValue,
) -> Result<(ConfigValue, Option<ServerTlsConfig>), ConfigErrors> {
    let mut v = v.clone();
    let tls = match v.as_object_mut().and_then(|m| m.remove("tls")) {
        None | Some(ConfigValue::Null) => None,
        Some(t) => Some(serde_path_to_error::deserialize(&t).map_err(|e| {
            let path = e.path().to_string();
            let path = if path == "." {
                "tls".to_string()
            } else {
                format!("tls.{path}")
            };
            ConfigErrors::from(component::ConfigError::new(
                path,
                e.into_inner().to_string(),
            ))
        })?),
    };
    Ok((v, tls))
}

/// One listening socket the config asks for.
pub(super) struct ListenerDecl {
    /// Key path of its endpoint (`receivers.otlp.protocols.http.endpoint`).
    endpoint_path: String,
    endpoint: String,
    /// Key path where its `tls` block goes.
    tls_path: String,
    tls: Option<ServerTlsConfig>,
    /// Serves requests without a token and without `allowed_hosts`, and has data to read
    /// (every listener but the health check): on a non-loopback address without `tls`, a
    /// web page can read it through DNS rebinding ([`open_listener_warnings`]).
    unguarded: bool,
}

/// Only this machine can connect: 127.0.0.0/8, `::1`, `localhost`.
fn is_loopback_endpoint(endpoint: &str) -> bool {
    component::listen_addr::ListenAddr::parse(endpoint).is_ok_and(|a| a.is_loopback())
}

/// Every listener the config asks for, with its key paths and `tls` block.
pub(super) fn listener_decls(
    receivers: &BTreeMap<ComponentId, ReceiverPlan>,
    exporters: &BTreeMap<ComponentId, ExporterPlan>,
    extensions: &[(ComponentId, ExtensionPlan)],
    telemetry: &TelemetryConfig,
    component_tls: &BTreeMap<String, ServerTlsConfig>,
) -> Vec<ListenerDecl> {
    let mut out = Vec::new();
    let mut add = |base: String,
                   endpoint_key: &str,
                   endpoint: &str,
                   tls: Option<&ServerTlsConfig>,
                   unguarded: bool| {
        out.push(ListenerDecl {
            endpoint_path: format!("{base}.{endpoint_key}"),
            endpoint: endpoint.to_string(),
            tls_path: format!("{base}.tls"),
            tls: tls.cloned(),
            unguarded,
        });
    };
    for (id, ReceiverPlan::Otlp(c)) in receivers {
        if let Some(h) = &c.protocols.http {
            add(
                format!("receivers.{id}.protocols.http"),
                "endpoint",
                &h.endpoint,
                h.tls.as_ref(),
                h.auth.is_none() && h.allowed_hosts.is_none(),
            );
        }
        if let Some(g) = &c.protocols.grpc {
            // A browser cannot speak gRPC (HTTP/2 without TLS, or trailers), so no page
            // reaches it through DNS rebinding.
            add(
                format!("receivers.{id}.protocols.grpc"),
                "endpoint",
                &g.endpoint,
                g.tls.as_ref(),
                false,
            );
        }
    }
    for (id, e) in extensions {
        let base = format!("extensions.{id}");
        match e {
            ExtensionPlan::Component(e) => {
                let tls = component_tls.get(&base);
                for l in e.api_listeners() {
                    let unguarded = e.auth().is_none() && l.allowed_hosts.is_none();
                    add(base.clone(), l.endpoint_key, &l.endpoint, tls, unguarded);
                }
                for l in e.served_listeners() {
                    add(base.clone(), l.endpoint_key, &l.endpoint, tls, false);
                }
            }
            // The health check answers up or down and nothing else.
            ExtensionPlan::HealthCheck(c) => {
                add(base, "endpoint", &c.endpoint, c.tls.as_ref(), false)
            }
            ExtensionPlan::Auth(_) => {}
        }
    }
    for (id, e) in exporters {
        if let ExporterPlan::Prometheus(c) = e {
            let base = format!("exporters.{id}");
            let tls = component_tls.get(&base);
            let unguarded = c.auth.is_none() && c.allowed_hosts.is_none();
            add(base, "endpoint", &c.endpoint, tls, unguarded);
        }
    }
    if telemetry.metrics.level != model::MetricsLevel::None
        && let Some(r) = telemetry.metrics.readers.first()
    {
        let p = &r.pull.exporter.prometheus;
        // The endpoint is host + port here; its "endpoint path" is the block itself.
        let base = "service.telemetry.metrics.readers.0.pull.exporter.prometheus";
        out.push(ListenerDecl {
            endpoint_path: base.to_string(),
            endpoint: if p.host.contains(':') {
                format!("[{}]:{}", p.host, p.port)
            } else {
                format!("{}:{}", p.host, p.port)
            },
            tls_path: format!("{base}.tls"),
            tls: p.tls.clone(),
            unguarded: p.auth.is_none() && p.allowed_hosts.is_none(),
        });
    }
    out
}

/// Two listeners on the same address would fail at bind time; say which keys collide.
pub(super) fn check_listener_conflicts(errs: &mut ConfigErrors, decls: &[ListenerDecl]) {
    let mut seen: Vec<(String, String)> = Vec::new();
    for d in decls {
        let (path, endpoint) = (&d.endpoint_path, &d.endpoint);
        if let Ok((host, port)) = model::parse_endpoint(endpoint) {
            if port == 0 {
                continue;
            }
            let key = format!("{host}:{port}");
            let wildcard = format!("0.0.0.0:{port}");
            if let Some((other, _)) = seen.iter().find(|(_, k)| {
                *k == key
                    || *k == wildcard
                    || (host == "0.0.0.0" && k.ends_with(&format!(":{port}")))
            }) {
                errs.push(path, format!("{endpoint} is also used by {other}"));
            } else {
                seen.push((path.clone(), key));
            }
        }
    }
}

/// A listener without `tls` on a non-loopback address is an error naming the opt-out key,
/// unless `allowed` (`service.allow_plaintext_listeners`).
pub(super) fn check_plaintext(errs: &mut ConfigErrors, decls: &[ListenerDecl], allowed: bool) {
    if allowed {
        return;
    }
    for l in decls.iter().filter(|l| l.tls.is_none()) {
        if !is_loopback_endpoint(&l.endpoint) {
            errs.push(
                &l.endpoint_path,
                format!(
                    "{} is not a loopback address, so plaintext is refused: configure {}.cert_file and {}.key_file, or set {PLAINTEXT_OPT_OUT_KEY}: true to serve plaintext anyway",
                    l.endpoint, l.tls_path, l.tls_path
                ),
            );
        }
    }
}

/// A plaintext listener on a non-loopback address that takes no token and has no
/// `allowed_hosts` answers any web page whose name was rebound to its address (DNS
/// rebinding through a browser that can reach it): a warning naming the keys that close it.
pub(super) fn open_listener_warnings(decls: &[ListenerDecl]) -> Vec<String> {
    decls
        .iter()
        .filter(|l| l.unguarded && l.tls.is_none() && !is_loopback_endpoint(&l.endpoint))
        .map(|l| {
            let base = l
                .endpoint_path
                .strip_suffix(".endpoint")
                .or_else(|| l.endpoint_path.rsplit_once('.').map(|(b, _)| b))
                .filter(|_| !l.endpoint_path.starts_with("service."))
                .unwrap_or(&l.endpoint_path);
            format!(
                "{}: {} is not a loopback address and the listener has no auth, tls or \
                 allowed_hosts, so a web page whose name is rebound to this address can read \
                 it through a browser that reaches it; set {base}.allowed_hosts to the names \
                 clients use, or {base}.auth",
                l.endpoint_path, l.endpoint
            )
        })
        .collect()
}

/// Load and check every `tls` block once (the threshold extension's serves two listeners):
/// errors with their key paths, the block per listener endpoint path, and warnings.
pub(super) fn load_tls(
    errs: &mut ConfigErrors,
    decls: &[ListenerDecl],
) -> (HashMap<String, ListenerTlsPlan>, Vec<String>) {
    let mut listener_tls = HashMap::new();
    let mut warnings = Vec::new();
    let mut checked = HashSet::new();
    for l in decls {
        let Some(cfg) = &l.tls else { continue };
        if checked.insert(l.tls_path.clone()) {
            if let Err(e) = crate::tls::load(cfg, crate::tls::ALPN_HTTP) {
                errs.push(format!("{}.{}", l.tls_path, e.key), e.message);
            }
            for (key, w) in crate::tls::warnings(cfg) {
                warnings.push(format!("{}.{key}: {w}", l.tls_path));
            }
        }
        listener_tls.insert(
            l.endpoint_path.clone(),
            ListenerTlsPlan {
                tls_path: l.tls_path.clone(),
                config: cfg.clone(),
            },
        );
    }
    (listener_tls, warnings)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Plan;

    #[test]
    fn loopback_endpoints_are_the_only_plaintext_ones_by_default() {
        for ok in [
            "127.0.0.1:4318",
            "127.0.0.2:0",
            "[::1]:8080",
            "localhost:1",
            "LOCALHOST:1",
        ] {
            assert!(is_loopback_endpoint(ok), "{ok}");
        }
        for public in [
            "0.0.0.0:4318",
            "[::]:4318",
            ":4318",
            "10.0.0.1:80",
            "fleet.example.com:443",
            "localhost.example.com:1",
        ] {
            assert!(!is_loopback_endpoint(public), "{public}");
        }
    }

    fn plan(yaml: &str) -> Result<Plan, Vec<String>> {
        let v = component::config::parse_yaml(yaml.as_bytes()).unwrap();
        Plan::build_with(&v, &crate::registry::Components::fleet())
            .map_err(|e| e.iter().map(|e| e.to_string()).collect())
    }

    const BASE: &str = "receivers:\n  otlp:\n    protocols:\n      grpc:\n        endpoint: 0.0.0.0:4317\nprocessors:\n  ingero:\nexporters:\n  debug:\nservice:\n  pipelines:\n    metrics: {receivers: [otlp], processors: [ingero], exporters: [debug]}\n  telemetry: {metrics: {level: none}}\n";

    #[test]
    fn plaintext_on_all_interfaces_names_the_tls_keys_and_the_opt_out() {
        let errs = plan(BASE).unwrap_err();
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(
            errs[0].starts_with(
                "receivers.otlp.protocols.grpc.endpoint: 0.0.0.0:4317 is not a loopback address"
            ) && errs[0].contains("receivers.otlp.protocols.grpc.tls.cert_file")
                && errs[0].contains("service.allow_plaintext_listeners: true"),
            "{errs:?}"
        );
        let opted = BASE.replace(
            "service:\n",
            "service:\n  allow_plaintext_listeners: true\n",
        );
        assert!(plan(&opted).is_ok());
    }

    #[test]
    fn every_listener_checks_its_lifecycle_and_host_keys() {
        let bad = "idle_timeout: 0s\n{i}first_byte_timeout: 0s\n{i}allowed_hosts: [ok.example, 'no spaces']\n";
        let at = |n: usize| bad.replace("{i}", &" ".repeat(n));
        let cfg = BASE
            .replace("endpoint: 0.0.0.0:4317\n", "endpoint: 127.0.0.1:4317\n      http:\n        endpoint: 127.0.0.1:0\n")
            .replace(
                "      http:\n        endpoint: 127.0.0.1:0\n",
                &format!("      http:\n        endpoint: 127.0.0.1:0\n        {}", at(8)),
            )
            .replace(
                "exporters:\n  debug:\n",
                &format!(
                    "exporters:\n  debug:\n  prometheus:\n    endpoint: 127.0.0.1:0\n    {}extensions:\n  ingero_threshold:\n    agent_endpoint: 127.0.0.1:0\n    admin_endpoint: \"\"\n    {}  health_check:\n    endpoint: 127.0.0.1:0\n    {}",
                    at(4),
                    at(4),
                    at(4)
                ),
            )
            .replace(
                "  telemetry: {metrics: {level: none}}\n",
                &format!(
                    "  extensions: [ingero_threshold, health_check]\n  telemetry:\n    metrics:\n      readers:\n        - pull:\n            exporter:\n              prometheus:\n                port: 0\n                {}",
                    at(16)
                ),
            );
        let errs = plan(&cfg).unwrap_err();
        let mut want = vec![
            "receivers.otlp.protocols.http.idle_timeout",
            "receivers.otlp.protocols.http.first_byte_timeout",
            "receivers.otlp.protocols.http.allowed_hosts.1",
        ];
        for base in [
            "extensions.ingero_threshold",
            "extensions.health_check",
            "exporters.prometheus",
            "service.telemetry.metrics.readers.0.pull.exporter.prometheus",
        ] {
            for key in ["first_byte_timeout", "idle_timeout", "allowed_hosts.1"] {
                want.push(Box::leak(format!("{base}.{key}").into_boxed_str()));
            }
        }
        for w in &want {
            assert!(
                errs.iter().any(|e| e.starts_with(&format!("{w}: "))),
                "{w} not reported:\n{}",
                errs.join("\n")
            );
        }
        assert_eq!(errs.len(), want.len(), "{}", errs.join("\n"));
    }

    #[test]
    fn tls_block_errors_carry_the_key_path() {
        let with_tls = BASE.replace(
            "endpoint: 0.0.0.0:4317\n",
            "endpoint: 0.0.0.0:4317\n        tls: {cert_file: /nonexistent/c.pem, key_file: /nonexistent/k.pem, bogus: 1}\n",
        );
        let errs = plan(&with_tls).unwrap_err();
        assert!(
            errs.iter()
                .any(|e| e.starts_with("receivers.otlp.protocols.grpc.tls") && e.contains("bogus")),
            "{errs:?}"
        );
        let missing = BASE.replace(
            "endpoint: 0.0.0.0:4317\n",
            "endpoint: 0.0.0.0:4317\n        tls: {cert_file: /nonexistent/c.pem, key_file: /nonexistent/k.pem}\n",
        );
        let errs = plan(&missing).unwrap_err();
        assert_eq!(
            errs.len(),
            1,
            "tls counts as configured, so no plaintext error: {errs:?}"
        );
        assert!(
            errs[0].starts_with(
                "receivers.otlp.protocols.grpc.tls.cert_file: cannot read /nonexistent/c.pem"
            ),
            "{errs:?}"
        );
    }
}
