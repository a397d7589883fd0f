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

/// Connection lifecycle defaults every HTTP listener of the host shares: a connection
/// that sends no byte within the first is closed, and one with no request in service for
/// the second.
pub const DEFAULT_FIRST_BYTE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
pub const DEFAULT_IDLE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// A host as a request names it (its `Host` header or HTTP/2 `:authority`), or an entry
/// of a listener's `allowed_hosts`: a name or IP address, and a port when one is written.
/// Names are compared without case and without a trailing dot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPort {
    /// Lowercase name without a trailing dot, or an IP address (IPv6 without brackets).
    pub host: String,
    pub ip: bool,
    pub port: Option<u16>,
}

impl HostPort {
    /// Parse `name`, `name:port`, an IPv4 address with or without a port, or a bracketed
    /// IPv6 address with or without a port.
    pub fn parse(s: &str) -> Result<HostPort, String> {
        if s.is_empty() {
            return Err("must be a host name or host:port, got an empty string".into());
        }
        if s.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(format!(
                "must not contain whitespace or control characters, got {s:?}"
            ));
        }
        if let Some(rest) = s.strip_prefix('[') {
            let Some((v6, after)) = rest.split_once(']') else {
                return Err(format!("unclosed '[' in {s:?}"));
            };
            let ip: Ipv6Addr = v6
                .parse()
                .map_err(|_| format!("invalid IPv6 address {v6:?} in {s:?}"))?;
            let port = match after {
                "" => None,
                _ => match after.strip_prefix(':') {
                    Some(p) => Some(parse_port(p, s)?),
                    None => return Err(format!("unexpected {after:?} after ']' in {s:?}")),
                },
            };
            return Ok(HostPort {
                host: ip.to_string(),
                ip: true,
                port,
            });
        }
        let (host, port) = match s.split_once(':') {
            Some((h, p)) if !p.contains(':') => (h, Some(parse_port(p, s)?)),
            Some(_) => {
                return Err(format!(
                    "IPv6 addresses must be in brackets ([::1]:8080), got {s:?}"
                ));
            }
            None => (s, None),
        };
        if host.is_empty() {
            return Err(format!("missing host in {s:?}"));
        }
        let (host, ip) = match parse_host(host, s)? {
            ListenHost::Ip(ip) => (ip.to_string(), true),
            ListenHost::Name(n) => {
                let n = n.strip_suffix('.').unwrap_or(&n).to_ascii_lowercase();
                (n, false)
            }
        };
        Ok(HostPort { host, ip, port })
    }
}

/// A listener's `allowed_hosts`: the names (and optional ports) its requests may be
/// addressed to. A request addressed to an IP address always passes: DNS rebinding, the
/// attack this check stops, needs a name.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AllowedHosts(Vec<HostPort>);

impl AllowedHosts {
    /// Parse every entry; the error names the index of the first bad one.
    pub fn parse(entries: &[String]) -> Result<AllowedHosts, (usize, String)> {
        entries
            .iter()
            .enumerate()
            .map(|(i, e)| HostPort::parse(e).map_err(|m| (i, m)))
            .collect::<Result<Vec<_>, _>>()
            .map(AllowedHosts)
    }

    /// Whether a request naming `host` (Host header or `:authority`) may be served: an IP
    /// address, or a listed name whose port, when the entry writes one, is the one the
    /// request names.
    pub fn allows(&self, host: &str) -> bool {
        let Ok(h) = HostPort::parse(host) else {
            return false;
        };
        h.ip || self
            .0
            .iter()
            .any(|e| e.host == h.host && (e.port.is_none() || e.port == h.port))
    }
}

/// Validate a listener's `allowed_hosts` list at `path` (each bad entry at `path.<index>`).
pub fn check_allowed_hosts(
    errs: &mut crate::config::ConfigErrors,
    path: &str,
    entries: Option<&[String]>,
) {
    for (i, e) in entries.unwrap_or_default().iter().enumerate() {
        if let Err(m) = HostPort::parse(e) {
            errs.push(format!("{path}.{i}"), m);
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
    fn allowed_hosts_match_names_ports_and_any_ip() {
        let list = |v: &[&str]| {
            AllowedHosts::parse(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap()
        };
        let a = list(&["fleet.example.com", "fleet.ns.svc:8081", "[::1]:9"]);
        for ok in [
            "fleet.example.com",
            "FLEET.example.com.:443",
            "fleet.example.com:1",
            "fleet.ns.svc:8081",
            "10.0.0.7:8081",
            "[fd00::1]",
            "[::1]:1",
        ] {
            assert!(a.allows(ok), "{ok}");
        }
        for refused in [
            "attacker.example",
            "fleet.example.com.attacker.example",
            "fleet.ns.svc",
            "fleet.ns.svc:8082",
            "fleet.ns",
            "localhost",
            "",
            ":8081",
            "fleet.example.com:x",
            "[not-v6]:1",
        ] {
            assert!(!a.allows(refused), "{refused}");
        }
        assert!(list(&[]).allows("127.0.0.1:80"));
        assert!(!list(&[]).allows("localhost:80"));
        let bad = ["ok.example", "bad_name", "a:b:c", "x:99999", ""].map(String::from);
        assert_eq!(AllowedHosts::parse(&bad).unwrap_err().0, 1);
        let mut errs = crate::config::ConfigErrors::new();
        check_allowed_hosts(&mut errs, "allowed_hosts", Some(&bad));
        let paths: Vec<_> = errs.iter().map(|e| e.path.clone()).collect();
        assert_eq!(
            paths,
            [
                "allowed_hosts.1",
                "allowed_hosts.2",
                "allowed_hosts.3",
                "allowed_hosts.4"
            ]
        );
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
