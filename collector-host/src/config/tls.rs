//! The `tls` block of a listener, in the shape of otelcol's `configtls.ServerConfig`
//! (`cert_file`, `key_file`, `client_ca_file`, `min_version`, `reload_interval`) plus
//! `handshake_timeout`. Loading and checking the files is [`crate::tls`]'s job.

use std::time::Duration;

use component::config::duration;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Time a client gets to finish the TLS handshake after connecting.
pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Lowest TLS version a listener accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TlsVersion {
    #[default]
    V1_2,
    V1_3,
}

impl TlsVersion {
    pub fn as_str(self) -> &'static str {
        match self {
            TlsVersion::V1_2 => "1.2",
            TlsVersion::V1_3 => "1.3",
        }
    }
}

impl Serialize for TlsVersion {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for TlsVersion {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // YAML reads an unquoted `1.2` as a number; accept it as the string it means.
        let v = serde_json::Value::deserialize(d)?;
        let s = match &v {
            serde_json::Value::String(s) => s.clone(),
            serde_json::Value::Number(n) => n.to_string(),
            other => other.to_string(),
        };
        match s.as_str() {
            "1.2" => Ok(TlsVersion::V1_2),
            "1.3" => Ok(TlsVersion::V1_3),
            "1.0" | "1.1" | "1" => Err(serde::de::Error::custom(format!(
                "TLS {s} is not supported (rustls implements 1.2 and 1.3); use \"1.2\" or \"1.3\""
            ))),
            _ => Err(serde::de::Error::custom(format!(
                "must be \"1.2\" or \"1.3\", got {v}"
            ))),
        }
    }
}

/// `<listener>.tls`: the listener serves TLS with this certificate; with `client_ca_file`
/// it also requires a client certificate signed by that CA (mTLS).
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ServerTlsConfig {
    /// PEM certificate chain, leaf first.
    #[serde(default)]
    pub cert_file: String,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1) of the leaf certificate.
    #[serde(default)]
    pub key_file: String,
    /// PEM CA bundle; when set, clients must present a certificate it verifies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_ca_file: Option<String>,
    #[serde(default)]
    pub min_version: TlsVersion,
    /// Re-read the files this often and switch to them when they changed (0 = only on
    /// SIGHUP).
    #[serde(default, with = "duration")]
    pub reload_interval: Duration,
    /// Connections that have not finished the handshake by then are closed.
    #[serde(default = "default_handshake_timeout", with = "duration")]
    pub handshake_timeout: Duration,
}

fn default_handshake_timeout() -> Duration {
    DEFAULT_HANDSHAKE_TIMEOUT
}

#[cfg(test)]
mod tests {
    use super::*;
    use component::config::parse_yaml;

    fn parse(y: &str) -> Result<ServerTlsConfig, String> {
        let v = parse_yaml(y.as_bytes()).map_err(|e| e.message)?;
        serde_json::from_value(v).map_err(|e| e.to_string())
    }

    #[test]
    fn versions_as_strings_or_yaml_numbers() {
        let c = parse("cert_file: a\nkey_file: b\nmin_version: 1.3\n").unwrap();
        assert_eq!(c.min_version, TlsVersion::V1_3);
        let c = parse("cert_file: a\nkey_file: b\nmin_version: \"1.2\"\n").unwrap();
        assert_eq!(c.min_version, TlsVersion::V1_2);
        assert!(
            parse("cert_file: a\nmin_version: \"1.1\"\n")
                .unwrap_err()
                .contains("not supported")
        );
        assert!(parse("min_version: 2\n").unwrap_err().contains("must be"));
    }

    #[test]
    fn defaults_and_unknown_keys() {
        let c = parse("cert_file: a\nkey_file: b\n").unwrap();
        assert_eq!(c.min_version, TlsVersion::V1_2);
        assert_eq!(c.reload_interval, Duration::ZERO);
        assert_eq!(c.handshake_timeout, DEFAULT_HANDSHAKE_TIMEOUT);
        assert_eq!(c.client_ca_file, None);
        assert!(parse("cert_file: a\nca_file: x\n").is_err());
    }
}
