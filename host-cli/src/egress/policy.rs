//! What the guest may reach: origins, address ranges, and the decision.
//!
//! An origin is scheme + host + port, compared exactly (CONTRACT.md rule
//! 21): `https://example.com.evil.test` is not `https://example.com`, and
//! `https://example.com` is not `https://example.com:8443`. Names are
//! compared case-insensitively (DNS is), without a trailing dot.
//!
//! Even an allowed name is refused when it resolves to loopback, private,
//! link-local, CGNAT, multicast or unspecified addresses, unless the
//! operator listed that range (`--allow-private CIDR`); the cloud metadata
//! address is refused always. The proxy connects to exactly the addresses
//! checked here, so a name cannot re-resolve elsewhere in between.

use std::net::IpAddr;
use std::str::FromStr;

use anyhow::{Context as _, bail};
use serde::{Deserialize, Serialize};

/// `http` or `https`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scheme {
    Http,
    Https,
}

impl Scheme {
    pub fn default_port(self) -> u16 {
        match self {
            Scheme::Http => 80,
            Scheme::Https => 443,
        }
    }
}

/// A host: a lower-case DNS name or an IP literal.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Host {
    Name(String),
    Ip(IpAddr),
}

impl std::fmt::Display for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Host::Name(n) => f.write_str(n),
            Host::Ip(IpAddr::V6(ip)) => write!(f, "[{ip}]"),
            Host::Ip(ip) => write!(f, "{ip}"),
        }
    }
}

impl Host {
    /// Parses a host as it appears in a URL or a CONNECT target.
    pub fn parse(s: &str) -> anyhow::Result<Host> {
        if let Some(inner) = s.strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
            return Ok(Host::Ip(IpAddr::V6(
                inner
                    .parse()
                    .with_context(|| format!("`{s}` is not an IPv6 address"))?,
            )));
        }
        if let Ok(ip) = s.parse::<std::net::Ipv4Addr>() {
            return Ok(Host::Ip(IpAddr::V4(ip)));
        }
        let name = s.trim_end_matches('.').to_ascii_lowercase();
        let label_ok = |l: &str| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        };
        if name.is_empty() || name.len() > 253 || !name.split('.').all(label_ok) {
            bail!("`{s}` is not a valid host name (use the punycode form for international names)");
        }
        // Resolvers (inet_aton behind getaddrinfo) and browsers (the WHATWG
        // URL "ends in a number" rule) read `127.1`, `0x7f000001` and
        // `0x7f.0.0.1` as IPv4 addresses. A name whose last label is a
        // number in any of those spellings is refused, so that no address
        // can pass as a name the operator approves.
        let last = name.rsplit('.').next().unwrap_or_default();
        let hex = last
            .strip_prefix("0x")
            .is_some_and(|h| h.bytes().all(|b| b.is_ascii_hexdigit()));
        if hex || last.bytes().all(|b| b.is_ascii_digit()) {
            bail!(
                "`{s}` reads as an IP address in another spelling; \
                 write IP literals as dotted decimal (IPv4) or in brackets (IPv6)"
            );
        }
        Ok(Host::Name(name))
    }
}

/// Scheme + host + port.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Origin {
    pub scheme: Scheme,
    pub host: Host,
    pub port: u16,
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = match self.scheme {
            Scheme::Http => "http",
            Scheme::Https => "https",
        };
        if self.port == self.scheme.default_port() {
            write!(f, "{s}://{}", self.host)
        } else {
            write!(f, "{s}://{}:{}", self.host, self.port)
        }
    }
}

impl FromStr for Origin {
    type Err = anyhow::Error;

    /// `https://example.com`, `http://example.org:8080`, `https://[::1]:8443`.
    /// Paths, queries, fragments and user info are refused: an origin is
    /// not a URL prefix.
    fn from_str(s: &str) -> anyhow::Result<Origin> {
        let (scheme, rest) = if let Some(r) = s.strip_prefix("https://") {
            (Scheme::Https, r)
        } else if let Some(r) = s.strip_prefix("http://") {
            (Scheme::Http, r)
        } else {
            bail!("origin `{s}` must start with http:// or https://");
        };
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        if rest.contains(['/', '?', '#', '@']) {
            bail!(
                "`{s}` is not an origin: give scheme, host and port only (no path, query or user)"
            );
        }
        let (host, port) = split_host_port(rest)?;
        Ok(Origin {
            scheme,
            host: Host::parse(host)?,
            port: match port {
                Some(p) => p,
                None => scheme.default_port(),
            },
        })
    }
}

/// Splits `host[:port]` (with `[v6]:port`).
pub fn split_host_port(s: &str) -> anyhow::Result<(&str, Option<u16>)> {
    let (host, port) = if s.starts_with('[') {
        match s.find(']') {
            Some(end) => {
                let host = &s[..=end];
                match &s[end + 1..] {
                    "" => (host, None),
                    p => (host, Some(p.strip_prefix(':').context("junk after `]`")?)),
                }
            }
            None => bail!("`{s}`: unclosed `[`"),
        }
    } else {
        match s.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (s, None),
        }
    };
    let port = port
        .map(|p| {
            p.parse::<u16>()
                .ok()
                .filter(|p| *p != 0)
                .with_context(|| format!("`{p}` is not a port"))
        })
        .transpose()?;
    Ok((host, port))
}

/// An IP network (`10.0.0.0/8`, `fd00::/8`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cidr {
    pub addr: IpAddr,
    pub prefix: u8,
}

impl FromStr for Cidr {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> anyhow::Result<Cidr> {
        let (a, p) = s
            .split_once('/')
            .context("a CIDR needs /PREFIX (e.g. 10.0.0.0/8)")?;
        let addr: IpAddr = a
            .parse()
            .with_context(|| format!("`{a}` is not an IP address"))?;
        let prefix: u8 = p
            .parse()
            .with_context(|| format!("`{p}` is not a prefix length"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        if prefix > max {
            bail!("prefix /{prefix} is longer than {max}");
        }
        Ok(Cidr { addr, prefix })
    }
}

impl Cidr {
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, ip) {
            (IpAddr::V4(n), IpAddr::V4(a)) => {
                let mask = if self.prefix == 0 {
                    0
                } else {
                    u32::MAX << (32 - self.prefix)
                };
                u32::from(n) & mask == u32::from(a) & mask
            }
            (IpAddr::V6(n), IpAddr::V6(a)) => {
                let mask = if self.prefix == 0 {
                    0
                } else {
                    u128::MAX << (128 - self.prefix)
                };
                u128::from(n) & mask == u128::from(a) & mask
            }
            _ => false,
        }
    }
}

/// Addresses refused even when the operator lists their range.
pub fn is_metadata(ip: IpAddr) -> bool {
    match canonical(ip) {
        IpAddr::V4(v4) => v4.octets() == [169, 254, 169, 254] || v4.octets() == [169, 254, 170, 2],
        IpAddr::V6(v6) => v6.segments() == [0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254],
    }
}

/// IPv4-mapped IPv6 addresses are judged as the IPv4 address they carry.
pub fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
        v4 => v4,
    }
}

/// Loopback, private, link-local, CGNAT, multicast, unspecified,
/// documentation and other non-global addresses.
pub fn is_private(ip: IpAddr) -> bool {
    match canonical(ip) {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_multicast()
                || v4.is_broadcast()
                || v4.is_unspecified()
                || v4.is_documentation()
                || o[0] == 0
                || (o[0] == 100 && (64..128).contains(&o[1])) // CGNAT 100.64/10
                || (o[0] == 192 && o[1] == 0 && o[2] == 0) // IETF 192.0.0/24
                || (o[0] == 198 && (18..20).contains(&o[1])) // benchmarking
                || o[0] >= 240 // reserved
        }
        IpAddr::V6(v6) => {
            let s = v6.segments();
            v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (s[0] & 0xfe00) == 0xfc00 // unique local
                || (s[0] & 0xffc0) == 0xfe80 // link local
                || (s[0] == 0x2001 && s[1] == 0x0db8) // documentation
                || (s[0] == 0x0064 && s[1] == 0xff9b) // NAT64 could map to anything
        }
    }
}

/// The network mode of a session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "snake_case")]
pub enum NetworkMode {
    /// No network at all (the default).
    None,
    /// Only these origins, through the egress proxy.
    Allow { origins: Vec<Origin> },
    /// These origins, and a prompt to the operator for any other.
    Ask { origins: Vec<Origin> },
    /// The Docker bridge network, unfiltered.
    Open,
}

impl FromStr for NetworkMode {
    type Err = anyhow::Error;
    /// `none`, `allow:ORIGIN[,ORIGIN...]`, `ask` or `ask:ORIGIN[,...]`, `open`.
    fn from_str(s: &str) -> anyhow::Result<NetworkMode> {
        let list = |l: &str| -> anyhow::Result<Vec<Origin>> {
            l.split(',')
                .map(str::trim)
                .filter(|o| !o.is_empty())
                .map(Origin::from_str)
                .collect()
        };
        Ok(match s.split_once(':') {
            None if s == "none" => NetworkMode::None,
            None if s == "open" => NetworkMode::Open,
            None if s == "ask" => NetworkMode::Ask {
                origins: Vec::new(),
            },
            None if s == "allow" => bail!("`allow` needs origins: allow:https://example.com[,...]"),
            Some(("allow", l)) => {
                let origins = list(l)?;
                if origins.is_empty() {
                    bail!("`allow:` needs at least one origin");
                }
                NetworkMode::Allow { origins }
            }
            Some(("ask", l)) => NetworkMode::Ask { origins: list(l)? },
            _ => {
                bail!("unknown network mode `{s}`: use none, allow:ORIGINS, ask[:ORIGINS] or open")
            }
        })
    }
}

impl NetworkMode {
    /// Whether this mode runs the egress proxy.
    pub fn uses_proxy(&self) -> bool {
        matches!(self, NetworkMode::Allow { .. } | NetworkMode::Ask { .. })
    }

    pub fn listed(&self) -> &[Origin] {
        match self {
            NetworkMode::Allow { origins } | NetworkMode::Ask { origins } => origins,
            _ => &[],
        }
    }
}

/// What the policy says about a connection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "verdict", content = "reason", rename_all = "snake_case")]
pub enum Verdict {
    Allow,
    Deny(String),
    /// Not listed: ask the operator (ask mode only).
    Ask,
}

/// The egress policy of one session.
#[derive(Debug, Clone)]
pub struct Policy {
    pub mode: NetworkMode,
    pub allow_private: Vec<Cidr>,
}

impl Policy {
    /// Judges an origin before resolving it: listing, IP literals.
    pub fn judge_origin(&self, origin: &Origin, decided: &[(Origin, bool)]) -> Verdict {
        if let Some((_, allow)) = decided.iter().find(|(o, _)| o == origin) {
            return if *allow {
                Verdict::Allow
            } else {
                Verdict::Deny(format!(
                    "{origin} was denied by the operator earlier in this session"
                ))
            };
        }
        let listed = self.mode.listed().iter().any(|o| o == origin);
        if let Host::Ip(ip) = origin.host
            && !listed
        {
            return Verdict::Deny(format!(
                "{origin}: IP literals are refused unless listed (got {ip})"
            ));
        }
        match (&self.mode, listed) {
            (_, true) => Verdict::Allow,
            (NetworkMode::Ask { .. }, false) => Verdict::Ask,
            _ => Verdict::Deny(format!("{origin} is not on the allowlist")),
        }
    }

    /// Judges the addresses a name resolved to; all must pass.
    pub fn judge_addrs(&self, origin: &Origin, addrs: &[IpAddr]) -> Verdict {
        if addrs.is_empty() {
            return Verdict::Deny(format!("{origin}: the name did not resolve"));
        }
        for &ip in addrs {
            if is_metadata(ip) {
                return Verdict::Deny(format!("{origin} resolves to the metadata address {ip}"));
            }
            if is_private(ip) && !self.allow_private.iter().any(|c| c.contains(canonical(ip))) {
                return Verdict::Deny(format!(
                    "{origin} resolves to the non-public address {ip} (list its range with --allow-private to allow it)"
                ));
            }
        }
        Verdict::Allow
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn o(s: &str) -> Origin {
        s.parse().unwrap()
    }

    #[test]
    fn origins_parse_and_compare_exactly() {
        assert_eq!(o("https://Example.COM"), o("https://example.com:443"));
        assert_eq!(o("https://example.com/"), o("https://example.com"));
        assert_ne!(o("https://example.com"), o("http://example.com"));
        assert_ne!(o("https://example.com"), o("https://example.com:8443"));
        assert_ne!(o("https://example.com"), o("https://example.com.evil.test"));
        assert_ne!(o("https://example.com"), o("https://www.example.com"));
        assert_eq!(
            o("http://example.org:8080").to_string(),
            "http://example.org:8080"
        );
        assert_eq!(
            o("https://[::1]:8443").host,
            Host::Ip("::1".parse().unwrap())
        );
        for bad in [
            "example.com",
            "ftp://example.com",
            "https://example.com/path",
            "https://user@example.com",
            "https://example.com?x",
            "https://exa mple.com",
            "https://example.com:0",
            "https://example.com:99999",
            "https://127.1",
            "https://-bad-.com",
        ] {
            assert!(bad.parse::<Origin>().is_err(), "{bad}");
        }
    }

    #[test]
    fn ipv4_in_other_spellings_is_not_a_name() {
        // Each of these is an IPv4 address to inet_aton or to a browser.
        for disguised in [
            "127.1",
            "2130706433",
            "0x7f000001",
            "0X7F000001",
            "0x7f.0x0.0x0.0x1",
            "0177.0.0.1",
            "0x7f.1",
            "017700000001",
            "a.0x1",
            "x.123",
            "0x",
            "127.0.0.1.",
        ] {
            assert!(Host::parse(disguised).is_err(), "{disguised}");
        }
        // Names that merely contain digits or hex letters stay names.
        for name in ["0xdead.test", "123.example", "x0x1.test", "a1", "1a.0xg"] {
            assert!(
                matches!(Host::parse(name), Ok(Host::Name(_))),
                "{name}: {:?}",
                Host::parse(name)
            );
        }
        // Dotted decimal is an IP literal, not a refusal.
        assert_eq!(
            Host::parse("172.24.0.2").unwrap(),
            Host::Ip("172.24.0.2".parse().unwrap())
        );
    }

    #[test]
    fn modes_parse() {
        assert_eq!("none".parse::<NetworkMode>().unwrap(), NetworkMode::None);
        assert_eq!("open".parse::<NetworkMode>().unwrap(), NetworkMode::Open);
        assert_eq!(
            "allow:https://a.test,http://b.test:8080"
                .parse::<NetworkMode>()
                .unwrap(),
            NetworkMode::Allow {
                origins: vec![o("https://a.test"), o("http://b.test:8080")]
            }
        );
        assert_eq!(
            "ask".parse::<NetworkMode>().unwrap(),
            NetworkMode::Ask { origins: vec![] }
        );
        assert!("allow".parse::<NetworkMode>().is_err());
        assert!("allow:".parse::<NetworkMode>().is_err());
        assert!("allow:example.com".parse::<NetworkMode>().is_err());
        assert!("everything".parse::<NetworkMode>().is_err());
    }

    #[test]
    fn private_and_metadata_ranges() {
        for p in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.1.1",
            "100.64.0.1",
            "100.127.255.255",
            "0.0.0.0",
            "224.0.0.1",
            "255.255.255.255",
            "::1",
            "::",
            "fe80::1",
            "fd12::1",
            "::ffff:10.0.0.1",
            "::ffff:127.0.0.1",
        ] {
            assert!(is_private(p.parse().unwrap()), "{p}");
        }
        for g in [
            "1.1.1.1",
            "8.8.8.8",
            "172.32.0.1",
            "100.128.0.1",
            "2606:4700::1111",
        ] {
            assert!(!is_private(g.parse().unwrap()), "{g}");
        }
        assert!(is_metadata("169.254.169.254".parse().unwrap()));
        assert!(is_metadata("::ffff:169.254.169.254".parse().unwrap()));
    }

    #[test]
    fn the_policy_decides() {
        let allow = Policy {
            mode: "allow:https://allowed.test".parse().unwrap(),
            allow_private: vec![],
        };
        assert_eq!(
            allow.judge_origin(&o("https://allowed.test"), &[]),
            Verdict::Allow
        );
        assert!(matches!(
            allow.judge_origin(&o("https://allowed.test.evil.test"), &[]),
            Verdict::Deny(_)
        ));
        assert!(matches!(
            allow.judge_origin(&o("http://allowed.test"), &[]),
            Verdict::Deny(_)
        ));
        assert!(
            matches!(allow.judge_origin(&o("https://1.2.3.4"), &[]), Verdict::Deny(m) if m.contains("IP literal"))
        );
        let public: IpAddr = "93.184.216.34".parse().unwrap();
        let private: IpAddr = "172.18.0.5".parse().unwrap();
        assert_eq!(
            allow.judge_addrs(&o("https://allowed.test"), &[public]),
            Verdict::Allow
        );
        assert!(matches!(
            allow.judge_addrs(&o("https://allowed.test"), &[public, private]),
            Verdict::Deny(_)
        ));
        let with_private = Policy {
            allow_private: vec!["172.18.0.0/16".parse().unwrap()],
            ..allow.clone()
        };
        assert_eq!(
            with_private.judge_addrs(&o("https://allowed.test"), &[private]),
            Verdict::Allow
        );
        // The metadata address is refused even inside an allowed range.
        let everything = Policy {
            allow_private: vec!["169.254.0.0/16".parse().unwrap()],
            ..allow.clone()
        };
        assert!(matches!(
            everything.judge_addrs(&o("https://allowed.test"), &["169.254.169.254".parse().unwrap()]),
            Verdict::Deny(m) if m.contains("metadata")
        ));
        let ask = Policy {
            mode: "ask:https://allowed.test".parse().unwrap(),
            allow_private: vec![],
        };
        assert_eq!(
            ask.judge_origin(&o("https://other.test"), &[]),
            Verdict::Ask
        );
        assert!(matches!(
            ask.judge_origin(
                &o("https://other.test"),
                &[(o("https://other.test"), false)]
            ),
            Verdict::Deny(_)
        ));
        assert_eq!(
            ask.judge_origin(&o("https://other.test"), &[(o("https://other.test"), true)]),
            Verdict::Allow
        );
    }

    #[test]
    fn cidrs() {
        let c: Cidr = "172.18.0.0/16".parse().unwrap();
        assert!(c.contains("172.18.200.1".parse().unwrap()));
        assert!(!c.contains("172.19.0.1".parse().unwrap()));
        assert!("10.0.0.0/33".parse::<Cidr>().is_err());
        assert!("10.0.0.0".parse::<Cidr>().is_err());
        let v6: Cidr = "fd00::/8".parse().unwrap();
        assert!(v6.contains("fd12::1".parse().unwrap()));
    }
}
