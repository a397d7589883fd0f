//! Configuration of the `ingero_threshold` extension.
//!
//! ```yaml
//! extensions:
//!   ingero_threshold:
//!     agent_endpoint: 0.0.0.0:8080    # threshold GET fallback (default 127.0.0.1:8080)
//!     admin_endpoint: 127.0.0.1:8081  # diagnostics; "" disables the admin listener
//!     max_clusters: 100000            # clusters one publish may store
//!     auth: { authenticator: ingero_auth }  # optional bearer tokens on both listeners
//! ```

use component::config::ComponentConfig;
use component::{ConfigErrors, ConfigValue};
use serde::{Deserialize, Serialize};
use std::time::Duration;

use crate::listen_addr::ListenAddr;

/// Agent-facing listener for `GET /api/v1/threshold`. Loopback unless configured otherwise
/// (the seed's example config writes `0.0.0.0:8080`).
pub const DEFAULT_AGENT_ENDPOINT: &str = "127.0.0.1:8080";
/// Admin listener for diagnostics; loopback only by default.
pub const DEFAULT_ADMIN_ENDPOINT: &str = "127.0.0.1:8081";
/// Most clusters one publish stores; reports beyond it are dropped and counted.
pub const DEFAULT_MAX_CLUSTERS: usize = 100_000;
/// Open connections per listener by default.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;
/// Connections per client address per listener by default.
pub const DEFAULT_MAX_CONNECTIONS_PER_CLIENT: usize = 1024;
/// Upper bound accepted for `max_connections`.
pub const MAX_MAX_CONNECTIONS: usize = 1_000_000;
/// Upper bound accepted for `max_clusters`.
pub const MAX_MAX_CLUSTERS: usize = 10_000_000;

/// The `ingero_threshold` extension's config.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ThresholdExtensionConfig {
    /// `host:port` of the agent listener (threshold GET fallback).
    pub agent_endpoint: String,
    /// `host:port` of the admin listener (diagnostics); the empty string disables it.
    pub admin_endpoint: String,
    /// Most clusters one publish may store (1 to 10,000,000). Keep it at or above the
    /// processor's own cluster cap, or the clusters past it answer as cold start.
    pub max_clusters: usize,
    /// Bearer-token check on both listeners (`auth: {authenticator: ingero_auth}`); the
    /// host enforces it. Absent: no authentication.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auth: Option<component::config::AuthRef>,
    /// Open connections per listener (agent and admin each) beyond which new ones are
    /// closed at accept (`ingero-fleet`; 1 to 1,000,000).
    pub max_connections: usize,
    /// Connections open at once from one client address, per listener (`ingero-fleet`;
    /// 0 = unlimited): beyond it a new connection evicts that address's least recently
    /// used idle connection, or is closed at accept when none is idle.
    pub max_connections_per_client: usize,
    /// A connection that sends no byte this long after accept (or after its TLS
    /// handshake) is closed, per listener (`ingero-fleet`; > 0).
    #[serde(with = "component::config::duration")]
    pub first_byte_timeout: Duration,
    /// A connection with no request in service this long is closed, per listener
    /// (`ingero-fleet`; > 0).
    #[serde(with = "component::config::duration")]
    pub idle_timeout: Duration,
    /// Host names (`fleet.example.com`, or `host:port` for one port only) both listeners'
    /// requests may be addressed to besides IP addresses; others are refused with 403
    /// (`ingero-fleet`). Unset: no such check, except that a loopback listener without
    /// `auth` takes only local names.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allowed_hosts: Option<Vec<String>>,
}

impl Default for ThresholdExtensionConfig {
    fn default() -> Self {
        ThresholdExtensionConfig {
            agent_endpoint: DEFAULT_AGENT_ENDPOINT.to_string(),
            admin_endpoint: DEFAULT_ADMIN_ENDPOINT.to_string(),
            max_clusters: DEFAULT_MAX_CLUSTERS,
            auth: None,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_connections_per_client: DEFAULT_MAX_CONNECTIONS_PER_CLIENT,
            first_byte_timeout: component::listen_addr::DEFAULT_FIRST_BYTE_TIMEOUT,
            idle_timeout: component::listen_addr::DEFAULT_IDLE_TIMEOUT,
            allowed_hosts: None,
        }
    }
}

impl ThresholdExtensionConfig {
    /// Decode and validate a config subtree (`null` means all defaults).
    pub fn from_value(value: &ConfigValue) -> Result<Self, ConfigErrors> {
        component::config::decode(value)
    }

    /// The agent listener address.
    pub fn agent_listener(&self) -> Result<ListenAddr, String> {
        ListenAddr::parse(&self.agent_endpoint)
    }

    /// The admin listener address, `None` when disabled (`admin_endpoint: ""`).
    pub fn admin_listener(&self) -> Result<Option<ListenAddr>, String> {
        if self.admin_endpoint.is_empty() {
            Ok(None)
        } else {
            ListenAddr::parse(&self.admin_endpoint).map(Some)
        }
    }
}

impl ComponentConfig for ThresholdExtensionConfig {
    fn validate(&self) -> Result<(), ConfigErrors> {
        let mut errs = ConfigErrors::new();
        let agent = match self.agent_listener() {
            Ok(a) => Some(a),
            Err(e) => {
                errs.push("agent_endpoint", e);
                None
            }
        };
        match self.admin_listener() {
            Ok(Some(admin)) => {
                if let Some(agent) = agent
                    && admin == agent
                    && admin.port != 0
                {
                    errs.push(
                        "admin_endpoint",
                        format!("must differ from agent_endpoint, both are {admin}"),
                    );
                }
            }
            Ok(None) => {}
            Err(e) => errs.push("admin_endpoint", format!("{e} (or \"\" to disable)")),
        }
        if !(1..=MAX_MAX_CLUSTERS).contains(&self.max_clusters) {
            errs.push(
                "max_clusters",
                format!(
                    "must be from 1 to {MAX_MAX_CLUSTERS}, got {}",
                    self.max_clusters
                ),
            );
        }
        if !(1..=MAX_MAX_CONNECTIONS).contains(&self.max_connections) {
            errs.push(
                "max_connections",
                format!(
                    "must be from 1 to {MAX_MAX_CONNECTIONS}, got {}",
                    self.max_connections
                ),
            );
        }
        for (key, d) in [
            ("first_byte_timeout", self.first_byte_timeout),
            ("idle_timeout", self.idle_timeout),
        ] {
            if d.is_zero() {
                errs.push(key, "must be > 0");
            }
        }
        component::listen_addr::check_allowed_hosts(
            &mut errs,
            "allowed_hosts",
            self.allowed_hosts.as_deref(),
        );
        errs.into_result()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use component::config::parse_yaml;

    fn errors(yaml: &str) -> Vec<String> {
        let v = parse_yaml(yaml.as_bytes()).unwrap();
        match ThresholdExtensionConfig::from_value(&v) {
            Ok(cfg) => panic!("accepted {cfg:?}"),
            Err(e) => e.iter().map(ToString::to_string).collect(),
        }
    }

    #[test]
    fn defaults_bind_loopback_and_validate() {
        let cfg = ThresholdExtensionConfig::default();
        assert_eq!(cfg.validate(), Ok(()));
        assert!(cfg.agent_listener().unwrap().is_loopback());
        assert_eq!(cfg.agent_listener().unwrap().port, 8080);
        let admin = cfg.admin_listener().unwrap().unwrap();
        assert!(admin.is_loopback());
        assert_eq!(admin.port, 8081);
        assert_eq!(
            ThresholdExtensionConfig::from_value(&ConfigValue::Null).unwrap(),
            cfg
        );
    }

    #[test]
    fn empty_admin_endpoint_disables_the_admin_listener() {
        let v = parse_yaml(b"admin_endpoint: \"\"").unwrap();
        let cfg = ThresholdExtensionConfig::from_value(&v).unwrap();
        assert_eq!(cfg.admin_listener(), Ok(None));
    }

    #[test]
    fn every_bad_key_is_reported() {
        let errs =
            errors("agent_endpoint: \"8080\"\nadmin_endpoint: \"::1:8081\"\nmax_clusters: 0\n");
        assert_eq!(errs.len(), 3, "{errs:?}");
        assert!(
            errs[0].starts_with("agent_endpoint: missing :port"),
            "{errs:?}"
        );
        assert!(errs[1].starts_with("admin_endpoint: IPv6 addresses must be in brackets"));
        assert!(errs[1].ends_with("(or \"\" to disable)"));
        assert_eq!(errs[2], "max_clusters: must be from 1 to 10000000, got 0");
    }

    #[test]
    fn lifecycle_and_host_keys_are_checked() {
        let v = parse_yaml(
            b"idle_timeout: 2s\nfirst_byte_timeout: 3s\nallowed_hosts: [fleet.example.com, 'fleet.ns.svc:8081']\n",
        )
        .unwrap();
        let cfg = ThresholdExtensionConfig::from_value(&v).unwrap();
        assert_eq!(cfg.idle_timeout, Duration::from_secs(2));
        assert_eq!(cfg.first_byte_timeout, Duration::from_secs(3));
        assert_eq!(cfg.allowed_hosts.as_ref().map(Vec::len), Some(2));
        let errs = errors(
            "idle_timeout: 0s\nfirst_byte_timeout: 0s\nallowed_hosts: [ok.example, 'bad host', 'x:70000']\n",
        );
        assert_eq!(errs.len(), 4, "{errs:?}");
        assert_eq!(errs[0], "first_byte_timeout: must be > 0");
        assert_eq!(errs[1], "idle_timeout: must be > 0");
        assert!(errs[2].starts_with("allowed_hosts.1: "), "{errs:?}");
        assert!(errs[3].starts_with("allowed_hosts.2: "), "{errs:?}");
    }

    #[test]
    fn admin_and_agent_must_not_share_a_port() {
        let errs = errors("agent_endpoint: 127.0.0.1:9000\nadmin_endpoint: 127.0.0.1:9000\n");
        assert_eq!(
            errs,
            ["admin_endpoint: must differ from agent_endpoint, both are 127.0.0.1:9000"]
        );
        // Port 0 means "any free port": two listeners on port 0 do not collide.
        let v = parse_yaml(b"agent_endpoint: 127.0.0.1:0\nadmin_endpoint: 127.0.0.1:0\n").unwrap();
        assert!(ThresholdExtensionConfig::from_value(&v).is_ok());
    }
}
