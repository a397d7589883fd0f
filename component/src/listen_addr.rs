//! `host:port` listen addresses as the config writes them (`0.0.0.0:8080`, `[::1]:8081`,
//! `localhost:8080`). Parsing only; the host resolves and binds.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The host part of a listen address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListenHost {
    Ip(IpAddr),
    /// A DNS name (RFC 1123 labels), resolved by the host at bind time.
    Name(String),
}

/// A parsed `host:port`. Port 0 asks the OS for a free port (tests).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenAddr {
    pub host: ListenHost,
    pub port: u16,
}

impl ListenAddr {
    /// Parse `host:port`: an IPv4 address, a bracketed IPv6 address or a host name, then a
    /// decimal port in 0..=65535. No scheme, no path, no whitespace, no empty host (write
    /// `0.0.0.0` or `[::]` to listen on every interface).
    pub fn parse(s: &str) -> Result<ListenAddr, String> {
        if s.is_empty() {
            return Err("must be host:port, got an empty string".into());
        }
        if s.contains("://") {
            return Err(format!("must be host:port without a scheme, got {s:?}"));
        }
        if s.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(format!(
                "must not contain whitespace or control characters, got {s:?}"
            ));
        }
        let (host, port) = if let Some(rest) = s.strip_prefix('[') {
            let Some((v6, after)) = rest.split_once(']') else {
                return Err(format!("unclosed '[' in {s:?}"));
            };
            let Some(port) = after.strip_prefix(':') else {
                return Err(format!("missing :port after the IPv6 address in {s:?}"));
            };
            let ip: Ipv6Addr = v6
                .parse()
                .map_err(|_| format!("invalid IPv6 address {v6:?} in {s:?}"))?;
            (ListenHost::Ip(IpAddr::V6(ip)), port)
        } else {
            let Some((host, port)) = s.rsplit_once(':') else {
                return Err(format!("missing :port in {s:?}"));
            };
            if host.contains(':') {
                return Err(format!(
                    "IPv6 addresses must be in brackets ([::1]:8080), got {s:?}"
                ));
            }
            (parse_host(host, s)?, port)
        };
        let port = parse_port(port, s)?;
        Ok(ListenAddr { host, port })
    }

    /// True when only this machine can connect (127.0.0.0/8, `::1`, `localhost`).
    pub fn is_loopback(&self) -> bool {
        match &self.host {
            ListenHost::Ip(ip) => ip.is_loopback(),
            ListenHost::Name(n) => n.eq_ignore_ascii_case("localhost"),
        }
    }

    /// True for `0.0.0.0` / `[::]`.
    pub fn is_unspecified(&self) -> bool {
        matches!(&self.host, ListenHost::Ip(ip) if ip.is_unspecified())
    }
}

impl fmt::Display for ListenAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.host {
            ListenHost::Ip(IpAddr::V6(ip)) => write!(f, "[{ip}]:{}", self.port),
            ListenHost::Ip(IpAddr::V4(ip)) => write!(f, "{ip}:{}", self.port),
            ListenHost::Name(n) => write!(f, "{n}:{}", self.port),
        }
    }
}

fn parse_port(port: &str, whole: &str) -> Result<u16, String> {
    if port.is_empty() {
        return Err(format!("missing port number in {whole:?}"));
    }
    if !port.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "port {port:?} is not a decimal number in {whole:?}"
        ));
    }
    port.parse::<u16>()
        .map_err(|_| format!("port {port} is out of range 0-65535 in {whole:?}"))
}

fn parse_host(host: &str, whole: &str) -> Result<ListenHost, String> {
    if host.is_empty() {
        return Err(format!(
            "missing host in {whole:?} (write 0.0.0.0 or [::] to listen on every interface)"
        ));
    }
    // Digits and dots only: it means to be an IPv4 address, so it must be a valid one.
    if host.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return host
            .parse::<Ipv4Addr>()
            .map(|ip| ListenHost::Ip(IpAddr::V4(ip)))
            .map_err(|_| format!("invalid IPv4 address {host:?} in {whole:?}"));
    }
    let name = host.strip_suffix('.').unwrap_or(host);
    let valid = name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        });
    if valid {
        Ok(ListenHost::Name(host.to_string()))
    } else {
        Err(format!("invalid host name {host:?} in {whole:?}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepted_forms() {
        let ok = |s: &str| ListenAddr::parse(s).unwrap();
        assert_eq!(ok("0.0.0.0:8080").to_string(), "0.0.0.0:8080");
        assert!(ok("0.0.0.0:8080").is_unspecified());
        assert!(ok("127.0.0.1:8081").is_loopback());
        assert!(ok("[::1]:8081").is_loopback());
        assert_eq!(ok("[::1]:8081").to_string(), "[::1]:8081");
        assert!(ok("[::]:1").is_unspecified());
        assert!(ok("localhost:0").is_loopback());
        assert_eq!(ok("localhost:0").port, 0);
        assert_eq!(ok("fleet.example.com:65535").port, 65535);
        assert_eq!(
            ok("ingero-fleet.ingero.svc.cluster.local.:8080").host,
            ListenHost::Name("ingero-fleet.ingero.svc.cluster.local.".into())
        );
        assert!(!ok("10.0.0.1:80").is_loopback());
    }

    #[test]
    fn rejected_forms_say_why() {
        let err = |s: &str| ListenAddr::parse(s).unwrap_err();
        assert!(err("").contains("empty"));
        assert!(err("8080").contains("missing :port"));
        assert!(err(":8080").contains("missing host"));
        assert!(err("0.0.0.0:").contains("missing port"));
        assert!(err("0.0.0.0:65536").contains("out of range"));
        assert!(err("0.0.0.0:99999999999").contains("out of range"));
        assert!(err("0.0.0.0:-1").contains("not a decimal"));
        assert!(err("0.0.0.0:+80").contains("not a decimal"));
        assert!(err("0.0.0.0:http").contains("not a decimal"));
        assert!(err("http://0.0.0.0:8080").contains("scheme"));
        assert!(err("::1:8080").contains("brackets"));
        assert!(err("[::1]").contains("missing :port"));
        assert!(err("[::1:8080").contains("unclosed"));
        assert!(err("[not-v6]:80").contains("invalid IPv6"));
        assert!(err("256.0.0.1:80").contains("invalid IPv4"));
        assert!(err("1.2.3:80").contains("invalid IPv4"));
        assert!(err("bad_host:80").contains("invalid host name"));
        assert!(err("-bad:80").contains("invalid host name"));
        assert!(err("a..b:80").contains("invalid host name"));
        assert!(err(&format!("{}:80", "a".repeat(64))).contains("invalid host name"));
        assert!(err("0.0.0.0: 80").contains("whitespace"));
        assert!(err("0.0.0.0:80\r\n").contains("whitespace"));
    }
}
