//! The two matchers provider rules are made of: shell-style globs on strings and CIDR
//! ranges on IP addresses. Both are parsed once and match without allocating.

use std::net::IpAddr;

/// Longest glob pattern accepted, in bytes.
pub const MAX_PATTERN_LEN: usize = 256;

/// A shell-style pattern: `*` matches any run of characters (including none), `?` exactly
/// one character, everything else itself. Case-sensitive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Glob {
    pattern: Vec<char>,
    /// The pattern has no wildcard: it matches only the identical string.
    literal: Option<String>,
}

impl Glob {
    pub fn parse(pattern: &str) -> Result<Self, String> {
        if pattern.is_empty() {
            return Err("pattern is empty".into());
        }
        if pattern.len() > MAX_PATTERN_LEN {
            return Err(format!(
                "pattern is {} bytes, longer than {MAX_PATTERN_LEN}",
                pattern.len()
            ));
        }
        let literal = (!pattern.contains(['*', '?'])).then(|| pattern.to_string());
        Ok(Glob {
            pattern: pattern.chars().collect(),
            literal,
        })
    }

    /// The exact string this pattern matches, when it has no wildcard.
    pub fn as_literal(&self) -> Option<&str> {
        self.literal.as_deref()
    }

    /// Whether `text` matches: string equality for a literal, otherwise an iterative match
    /// with single-star backtracking, O(len(text) * len(pattern)) worst case.
    pub fn matches(&self, text: &str) -> bool {
        if let Some(l) = &self.literal {
            return l == text;
        }
        self.matches_backtracking(text)
    }

    fn matches_backtracking(&self, text: &str) -> bool {
        let p = &self.pattern;
        // `ti` and the star's text position are byte offsets into `text`, always on a
        // char boundary.
        let (mut pi, mut ti) = (0usize, 0usize);
        let mut star: Option<(usize, usize)> = None;
        while let Some(tc) = text.get(ti..).and_then(|rest| rest.chars().next()) {
            match p.get(pi) {
                Some('*') => {
                    star = Some((pi, ti));
                    pi += 1;
                }
                Some(c) if *c == '?' || *c == tc => {
                    pi += 1;
                    ti += tc.len_utf8();
                }
                _ => match star {
                    Some((sp, st)) => {
                        let skipped = text
                            .get(st..)
                            .and_then(|rest| rest.chars().next())
                            .map_or(1, char::len_utf8);
                        pi = sp + 1;
                        ti = st + skipped;
                        star = Some((sp, ti));
                    }
                    None => return false,
                },
            }
        }
        p.get(pi..)
            .is_some_and(|rest| rest.iter().all(|c| *c == '*'))
    }
}

/// An IPv4 or IPv6 network in CIDR form (`10.20.0.0/16`, `fd00::/8`). A bare address is a
/// /32 (or /128). Host bits below the prefix are ignored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpNet {
    network: IpAddr,
    prefix: u8,
}

impl IpNet {
    pub fn parse(s: &str) -> Result<Self, String> {
        let s = s.trim();
        let (addr, prefix) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let network: IpAddr = addr
            .parse()
            .map_err(|_| format!("invalid CIDR {s:?}: {addr:?} is not an IP address"))?;
        let max = if network.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => max,
            Some(p) => {
                let n: u8 = p
                    .parse()
                    .map_err(|_| format!("invalid CIDR {s:?}: prefix {p:?} is not a number"))?;
                if n > max {
                    return Err(format!("invalid CIDR {s:?}: prefix /{n} exceeds /{max}"));
                }
                n
            }
        };
        Ok(IpNet { network, prefix })
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.network, ip) {
            (IpAddr::V4(n), IpAddr::V4(a)) => prefix_eq(
                u128::from(u32::from(n)),
                u128::from(u32::from(a)),
                32,
                self.prefix,
            ),
            (IpAddr::V6(n), IpAddr::V6(a)) => {
                prefix_eq(u128::from(n), u128::from(a), 128, self.prefix)
            }
            (IpAddr::V4(_), IpAddr::V6(a)) => a
                .to_ipv4_mapped()
                .is_some_and(|a4| self.contains(IpAddr::V4(a4))),
            (IpAddr::V6(_), IpAddr::V4(_)) => false,
        }
    }
}

fn prefix_eq(a: u128, b: u128, bits: u32, prefix: u8) -> bool {
    let prefix = u32::from(prefix);
    if prefix == 0 {
        return true;
    }
    let shift = bits - prefix.min(bits);
    (a >> shift) == (b >> shift)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(p: &str) -> Glob {
        Glob::parse(p).unwrap()
    }

    #[test]
    fn globs_match_like_a_shell() {
        assert!(g("gpu-*").matches("gpu-041"));
        assert!(g("gpu-*").matches("gpu-"));
        assert!(!g("gpu-*").matches("cpu-041"));
        assert!(g("node-??").matches("node-07"));
        assert!(!g("node-??").matches("node-7"));
        assert!(g("*a*b*c").matches("xxaxxbxxc"));
        assert!(!g("*a*b*c").matches("xxaxxcxxb"));
        assert!(g("*").matches(""));
        assert!(g("a*").matches("a"));
        assert!(g("dgx-h100").matches("dgx-h100"));
        assert!(!g("dgx-h100").matches("dgx-h1000"));
        assert_eq!(g("dgx-h100").as_literal(), Some("dgx-h100"));
        assert_eq!(g("dgx-*").as_literal(), None);
        assert!(g("ü*").matches("über"));
        assert!(Glob::parse("").is_err());
        assert!(Glob::parse(&"a".repeat(MAX_PATTERN_LEN + 1)).is_err());
    }

    #[test]
    fn pathological_glob_stays_polynomial() {
        let p = g(&"*a".repeat(20));
        assert!(!p.matches(&"a".repeat(19)));
        assert!(p.matches(&"a".repeat(20)));
    }

    #[test]
    fn cidr_ranges() {
        let n = IpNet::parse("10.20.0.0/16").unwrap();
        assert!(n.contains("10.20.3.4".parse().unwrap()));
        assert!(!n.contains("10.21.0.1".parse().unwrap()));
        assert!(n.contains("::ffff:10.20.0.9".parse().unwrap()));
        let one = IpNet::parse("192.168.1.7").unwrap();
        assert!(one.contains("192.168.1.7".parse().unwrap()));
        assert!(!one.contains("192.168.1.8".parse().unwrap()));
        let v6 = IpNet::parse("fd00:abcd::/32").unwrap();
        assert!(v6.contains("fd00:abcd:1::2".parse().unwrap()));
        assert!(!v6.contains("fd00:abce::2".parse().unwrap()));
        assert!(!v6.contains("10.0.0.1".parse().unwrap()));
        assert!(
            IpNet::parse("0.0.0.0/0")
                .unwrap()
                .contains("8.8.8.8".parse().unwrap())
        );
        // Host bits are ignored rather than refused.
        assert!(
            IpNet::parse("10.20.1.1/16")
                .unwrap()
                .contains("10.20.9.9".parse().unwrap())
        );
        for bad in [
            "10.0.0/8",
            "10.0.0.0/33",
            "fd00::/129",
            "10.0.0.0/x",
            "host",
            "",
        ] {
            assert!(IpNet::parse(bad).is_err(), "{bad}");
        }
    }
}
