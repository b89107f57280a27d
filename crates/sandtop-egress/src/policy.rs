//! What the guest may reach: origins, address ranges, and the decision.
//!
//! An origin is scheme + host + port, compared exactly (docs/contract.md rule
//! 21): `https://example.com.evil.test` is not `https://example.com`, and
//! `https://example.com` is not `https://example.com:8443`. Names are
//! compared case-insensitively (DNS is), without a trailing dot.
//!
//! Even an allowed name is refused when it resolves to an address in one of
//! the rows of [`RANGES`] (loopback, private, link-local, shared, multicast,
//! documentation, reserved ...: one table, from the IANA special-purpose
//! registries) or to an address of this host ([`host_addresses`]), unless
//! the operator listed a range containing it (`--allow-private CIDR`). An
//! IPv6 address that carries an IPv4 address (IPv4-mapped, -compatible,
//! -translated, NAT64, 6to4, Teredo) is refused when the IPv4 address it
//! carries is. The cloud metadata addresses are refused always. The proxy
//! connects to exactly the addresses checked here, so a name cannot
//! re-resolve elsewhere in between.
//!
//! Layout: tests apart (`policy/tests.rs`): the title's three parts in order:
//! origins, the address table and its helpers (~270), and `Policy`'s verdicts
//! (~180), which use both. If it grows, the address table (`RANGES` and its
//! helpers) is the natural module to split.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

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

/// Why an origin, host, port, range or network mode was refused. The
/// given text is kept as it was written (shown through `term::safe_line`
/// by whoever prints it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error("`{0}` is not an IPv6 address")]
    BadIpv6(String),
    #[error("`{0}` is not a valid host name (use the punycode form for international names)")]
    BadName(String),
    #[error(
        "`{0}` reads as an IP address in another spelling; \
         write IP literals as dotted decimal (IPv4) or in brackets (IPv6)"
    )]
    NumericName(String),
    #[error("origin `{0}` must start with http:// or https://")]
    Scheme(String),
    #[error("`{0}` is not an origin: give scheme, host and port only (no path, query or user)")]
    NotAnOrigin(String),
    #[error("`{0}`: unclosed `[`")]
    UnclosedBracket(String),
    #[error("`{0}`: junk after `]`")]
    AfterBracket(String),
    #[error("`{0}` is not a port")]
    BadPort(String),
    #[error("`{0}`: a CIDR needs /PREFIX (e.g. 10.0.0.0/8)")]
    NoPrefix(String),
    #[error("`{0}` is not an IP address")]
    BadAddress(String),
    #[error("`{0}` is not a prefix length")]
    BadPrefix(String),
    #[error("prefix /{prefix} is longer than {max}")]
    PrefixTooLong { prefix: u8, max: u8 },
    #[error("`allow` needs origins: allow:https://example.com[,...]")]
    AllowWithoutOrigins,
    #[error("unknown network mode `{0}`: use none, allow:ORIGINS, ask[:ORIGINS] or open")]
    UnknownMode(String),
}

impl Host {
    /// Parses a host as it appears in a URL or a CONNECT target.
    pub fn parse(s: &str) -> Result<Host, PolicyError> {
        if let Some(inner) = s.strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
            return Ok(Host::Ip(IpAddr::V6(
                inner
                    .parse()
                    .map_err(|_| PolicyError::BadIpv6(s.to_string()))?,
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
            return Err(PolicyError::BadName(s.to_string()));
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
            return Err(PolicyError::NumericName(s.to_string()));
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
    type Err = PolicyError;

    /// `https://example.com`, `http://example.org:8080`, `https://[::1]:8443`.
    /// Paths, queries, fragments and user info are refused: an origin is
    /// not a URL prefix.
    fn from_str(s: &str) -> Result<Origin, PolicyError> {
        let (scheme, rest) = if let Some(r) = s.strip_prefix("https://") {
            (Scheme::Https, r)
        } else if let Some(r) = s.strip_prefix("http://") {
            (Scheme::Http, r)
        } else {
            return Err(PolicyError::Scheme(s.to_string()));
        };
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        if rest.contains(['/', '?', '#', '@']) {
            return Err(PolicyError::NotAnOrigin(s.to_string()));
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
pub fn split_host_port(s: &str) -> Result<(&str, Option<u16>), PolicyError> {
    let (host, port) = if s.starts_with('[') {
        match s.find(']') {
            Some(end) => {
                let host = &s[..=end];
                match &s[end + 1..] {
                    "" => (host, None),
                    p => (
                        host,
                        Some(
                            p.strip_prefix(':')
                                .ok_or_else(|| PolicyError::AfterBracket(s.to_string()))?,
                        ),
                    ),
                }
            }
            None => return Err(PolicyError::UnclosedBracket(s.to_string())),
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
                .ok_or_else(|| PolicyError::BadPort(p.to_string()))
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
    type Err = PolicyError;
    fn from_str(s: &str) -> Result<Cidr, PolicyError> {
        let (a, p) = s
            .split_once('/')
            .ok_or_else(|| PolicyError::NoPrefix(s.to_string()))?;
        let addr: IpAddr = a
            .parse()
            .map_err(|_| PolicyError::BadAddress(a.to_string()))?;
        let prefix: u8 = p
            .parse()
            .map_err(|_| PolicyError::BadPrefix(p.to_string()))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        if prefix > max {
            return Err(PolicyError::PrefixTooLong { prefix, max });
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

/// Addresses refused even when the operator lists their range: the cloud
/// metadata services (AWS, GCP, Azure, Oracle, DigitalOcean: 169.254.169.254;
/// AWS ECS task metadata: 169.254.170.2; Alibaba Cloud: 100.100.100.200;
/// AWS over IPv6: fd00:ec2::254), also when an IPv6 address carries them.
pub fn is_metadata(ip: IpAddr) -> bool {
    carried(ip).into_iter().any(metadata_itself)
}

fn metadata_itself(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => matches!(
            v4.octets(),
            [169, 254, 169, 254] | [169, 254, 170, 2] | [100, 100, 100, 200]
        ),
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

/// What the judge does with an address in a [`Range`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Treatment {
    /// Refused, unless an `--allow-private` range contains the address.
    Refused,
    /// Refused like [`Treatment::Refused`], and the IPv4 addresses it
    /// carries are judged too (allowing the IPv6 range does not allow them).
    RefusedCarrying(Embedding),
    /// Not refused itself: it stands for the IPv4 address it carries, and
    /// that address is judged instead.
    Carrying(Embedding),
}

/// Where an IPv6 address carries IPv4 addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Embedding {
    /// The last 32 bits (RFC 4291 §2.5.5; RFC 6052 §2.2 with a /96 prefix).
    Last32,
    /// Bits 16-47 (6to4, RFC 3056 §2).
    SixToFour,
    /// Teredo (RFC 4380 §4): the server in bits 32-63, and the client's
    /// public address, every bit inverted, in bits 96-127.
    Teredo,
}

/// One row of the address table.
#[derive(Debug, Clone, Copy)]
pub struct Range {
    pub net: Cidr,
    /// The registry's name for the block.
    pub name: &'static str,
    /// The registry (`iana-ipv4-special-registry`, ...) and the RFC.
    pub reference: &'static str,
    pub treatment: Treatment,
}

const fn v4(a: u8, b: u8, c: u8, d: u8, prefix: u8) -> Cidr {
    Cidr {
        addr: IpAddr::V4(Ipv4Addr::new(a, b, c, d)),
        prefix,
    }
}

const fn v6(s: [u16; 8], prefix: u8) -> Cidr {
    Cidr {
        addr: IpAddr::V6(Ipv6Addr::new(
            s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7],
        )),
        prefix,
    }
}

const fn row(
    net: Cidr,
    name: &'static str,
    reference: &'static str,
    treatment: Treatment,
) -> Range {
    Range {
        net,
        name,
        reference,
        treatment,
    }
}

const fn refused(net: Cidr, name: &'static str, reference: &'static str) -> Range {
    Range {
        net,
        name,
        reference,
        treatment: Treatment::Refused,
    }
}

/// Every address range the guest may not reach unless the operator lists
/// it (`--allow-private CIDR`), and the ranges whose addresses carry an
/// IPv4 address that is judged instead. An address is judged by the most
/// specific row that contains it (the longest prefix, as routing does).
///
/// The sources: the IANA IPv4 and IPv6 Special-Purpose Address Registries
/// (`iana-ipv4-special-registry`, `iana-ipv6-special-registry`; every
/// block whose "Globally Reachable" is False or N/A), the IPv4 multicast
/// block, and the IANA IPv6 Address Space registry
/// (`ipv6-address-space`) for everything outside 2000::/3 (multicast,
/// the deprecated site-local block and the space reserved by the IETF,
/// where the deprecated IPv4-compatible and IPv4-translated forms also
/// live). Globally reachable special-purpose blocks stay reachable (AS112,
/// AMT, 2620:4f:8000::/48), except those inside a larger refused block
/// (192.0.0.0/24, 2001::/23), which no web origin uses.
#[rustfmt::skip]
pub const RANGES: &[Range] = &[
    // IPv4
    refused(v4(0, 0, 0, 0, 8), "\"This network\"", "iana-ipv4-special-registry, RFC 791 §3.2"),
    refused(v4(10, 0, 0, 0, 8), "Private-Use", "iana-ipv4-special-registry, RFC 1918"),
    refused(v4(100, 64, 0, 0, 10), "Shared Address Space", "iana-ipv4-special-registry, RFC 6598"),
    refused(v4(127, 0, 0, 0, 8), "Loopback", "iana-ipv4-special-registry, RFC 1122 §3.2.1.3"),
    refused(v4(169, 254, 0, 0, 16), "Link Local", "iana-ipv4-special-registry, RFC 3927"),
    refused(v4(172, 16, 0, 0, 12), "Private-Use", "iana-ipv4-special-registry, RFC 1918"),
    refused(v4(192, 0, 0, 0, 24), "IETF Protocol Assignments", "iana-ipv4-special-registry, RFC 6890 §2.1"),
    refused(v4(192, 0, 2, 0, 24), "Documentation (TEST-NET-1)", "iana-ipv4-special-registry, RFC 5737"),
    refused(v4(192, 88, 99, 0, 24), "Deprecated (6to4 Relay Anycast)", "iana-ipv4-special-registry, RFC 7526"),
    refused(v4(192, 168, 0, 0, 16), "Private-Use", "iana-ipv4-special-registry, RFC 1918"),
    refused(v4(198, 18, 0, 0, 15), "Benchmarking", "iana-ipv4-special-registry, RFC 2544"),
    refused(v4(198, 51, 100, 0, 24), "Documentation (TEST-NET-2)", "iana-ipv4-special-registry, RFC 5737"),
    refused(v4(203, 0, 113, 0, 24), "Documentation (TEST-NET-3)", "iana-ipv4-special-registry, RFC 5737"),
    refused(v4(224, 0, 0, 0, 4), "Multicast", "ipv4-address-space, RFC 5771"),
    refused(v4(240, 0, 0, 0, 4), "Reserved", "iana-ipv4-special-registry, RFC 1112 §4"),
    refused(v4(255, 255, 255, 255, 32), "Limited Broadcast", "iana-ipv4-special-registry, RFC 8190, RFC 919 §7"),
    // IPv6: the special-purpose registry
    refused(v6([0, 0, 0, 0, 0, 0, 0, 0], 128), "Unspecified Address", "iana-ipv6-special-registry, RFC 4291"),
    refused(v6([0, 0, 0, 0, 0, 0, 0, 1], 128), "Loopback Address", "iana-ipv6-special-registry, RFC 4291"),
    row(v6([0, 0, 0, 0, 0, 0xffff, 0, 0], 96), "IPv4-mapped Address", "iana-ipv6-special-registry, RFC 4291 §2.5.5.2", Treatment::Carrying(Embedding::Last32)),
    row(v6([0x64, 0xff9b, 0, 0, 0, 0, 0, 0], 96), "IPv4-IPv6 Translat. (NAT64 well-known prefix)", "iana-ipv6-special-registry, RFC 6052", Treatment::Carrying(Embedding::Last32)),
    row(v6([0x64, 0xff9b, 1, 0, 0, 0, 0, 0], 48), "IPv4-IPv6 Translat. (local-use NAT64)", "iana-ipv6-special-registry, RFC 8215", Treatment::RefusedCarrying(Embedding::Last32)),
    refused(v6([0x100, 0, 0, 0, 0, 0, 0, 0], 64), "Discard-Only Address Block", "iana-ipv6-special-registry, RFC 6666"),
    refused(v6([0x2001, 0, 0, 0, 0, 0, 0, 0], 23), "IETF Protocol Assignments", "iana-ipv6-special-registry, RFC 2928"),
    row(v6([0x2001, 0, 0, 0, 0, 0, 0, 0], 32), "TEREDO", "iana-ipv6-special-registry, RFC 4380, RFC 8190", Treatment::RefusedCarrying(Embedding::Teredo)),
    refused(v6([0x2001, 0xdb8, 0, 0, 0, 0, 0, 0], 32), "Documentation", "iana-ipv6-special-registry, RFC 3849"),
    row(v6([0x2002, 0, 0, 0, 0, 0, 0, 0], 16), "6to4", "iana-ipv6-special-registry, RFC 3056", Treatment::RefusedCarrying(Embedding::SixToFour)),
    refused(v6([0x3fff, 0, 0, 0, 0, 0, 0, 0], 20), "Documentation", "iana-ipv6-special-registry, RFC 9637"),
    refused(v6([0x5f00, 0, 0, 0, 0, 0, 0, 0], 16), "Segment Routing (SRv6) SIDs", "iana-ipv6-special-registry, RFC 9602"),
    refused(v6([0xfc00, 0, 0, 0, 0, 0, 0, 0], 7), "Unique-Local", "iana-ipv6-special-registry, RFC 4193, RFC 8190"),
    refused(v6([0xfe80, 0, 0, 0, 0, 0, 0, 0], 10), "Link-Local Unicast", "iana-ipv6-special-registry, RFC 4291"),
    // IPv6: deprecated forms that carry IPv4 addresses (not registry rows)
    row(v6([0, 0, 0, 0, 0, 0, 0, 0], 96), "IPv4-compatible Address (deprecated)", "ipv6-address-space (reserved by IETF), RFC 4291 §2.5.5.1", Treatment::RefusedCarrying(Embedding::Last32)),
    row(v6([0, 0, 0, 0, 0xffff, 0, 0, 0], 96), "IPv4-translated Address (SIIT, obsolete)", "ipv6-address-space (reserved by IETF), RFC 2765 §2.1", Treatment::RefusedCarrying(Embedding::Last32)),
    // IPv6: everything outside 2000::/3 (global unicast)
    refused(v6([0xfec0, 0, 0, 0, 0, 0, 0, 0], 10), "Site-Local (deprecated)", "ipv6-address-space, RFC 3879"),
    refused(v6([0xff00, 0, 0, 0, 0, 0, 0, 0], 8), "Multicast", "ipv6-address-space, RFC 4291 §2.7"),
    refused(v6([0, 0, 0, 0, 0, 0, 0, 0], 3), "Reserved by IETF", "ipv6-address-space, RFC 4291"),
    refused(v6([0x4000, 0, 0, 0, 0, 0, 0, 0], 2), "Reserved by IETF", "ipv6-address-space, RFC 4291"),
    refused(v6([0x8000, 0, 0, 0, 0, 0, 0, 0], 2), "Reserved by IETF", "ipv6-address-space, RFC 4291"),
    refused(v6([0xc000, 0, 0, 0, 0, 0, 0, 0], 3), "Reserved by IETF", "ipv6-address-space, RFC 4291"),
    refused(v6([0xe000, 0, 0, 0, 0, 0, 0, 0], 4), "Reserved by IETF", "ipv6-address-space, RFC 4291"),
    refused(v6([0xf000, 0, 0, 0, 0, 0, 0, 0], 5), "Reserved by IETF", "ipv6-address-space, RFC 4291"),
    refused(v6([0xf800, 0, 0, 0, 0, 0, 0, 0], 6), "Reserved by IETF", "ipv6-address-space, RFC 4291"),
    refused(v6([0xfe00, 0, 0, 0, 0, 0, 0, 0], 9), "Reserved by IETF", "ipv6-address-space, RFC 4291"),
];

/// The row that decides `ip`: the most specific one containing it.
pub fn range_of(ip: IpAddr) -> Option<&'static Range> {
    RANGES
        .iter()
        .filter(|r| r.net.contains(ip))
        .max_by_key(|r| r.net.prefix)
}

/// `ip` itself, then the IPv4 addresses it carries (per its row).
pub fn carried(ip: IpAddr) -> Vec<IpAddr> {
    let mut out = vec![ip];
    let IpAddr::V6(v6) = ip else {
        return out;
    };
    let b = v6.octets();
    let at = |i: usize| Ipv4Addr::new(b[i], b[i + 1], b[i + 2], b[i + 3]);
    match range_of(ip).map(|r| r.treatment) {
        Some(Treatment::Carrying(e) | Treatment::RefusedCarrying(e)) => match e {
            Embedding::Last32 => out.push(IpAddr::V4(at(12))),
            Embedding::SixToFour => out.push(IpAddr::V4(at(2))),
            Embedding::Teredo => {
                out.push(IpAddr::V4(at(4)));
                out.push(IpAddr::V4(Ipv4Addr::from(!u32::from(at(12)))));
            }
        },
        Some(Treatment::Refused) | None => {}
    }
    out
}

/// Whether `ip`, or an IPv4 address it carries, falls in a refused row
/// (the table alone: no `--allow-private`, no host addresses).
pub fn is_private(ip: IpAddr) -> bool {
    carried(ip).into_iter().any(|a| {
        range_of(a).is_some_and(|r| {
            matches!(
                r.treatment,
                Treatment::Refused | Treatment::RefusedCarrying(_)
            )
        })
    })
}

/// The addresses of this host's interfaces (getifaddrs(3), through the
/// `if-addrs` crate), link-local ones included. The proxy runs in the
/// host's network namespace, so these are where the host's own services
/// listen; they are read at each decision, so an interface that appears
/// later (a new Docker network) counts too.
pub fn host_addresses() -> std::io::Result<Vec<IpAddr>> {
    Ok(if_addrs::get_if_addrs()?
        .into_iter()
        .map(|i| i.ip())
        .collect())
}

/// Why an address may not be reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// A metadata address, in `addr` (`ip` itself or carried by it).
    Metadata { addr: IpAddr },
    /// `addr` (`ip` itself or carried by it) is in a refused row or is an
    /// address of this host, and no `--allow-private` range contains it.
    NonPublic { addr: IpAddr, what: String },
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
    type Err = PolicyError;
    /// `none`, `allow:ORIGIN[,ORIGIN...]`, `ask` or `ask:ORIGIN[,...]`, `open`.
    fn from_str(s: &str) -> Result<NetworkMode, PolicyError> {
        let list = |l: &str| -> Result<Vec<Origin>, PolicyError> {
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
            None if s == "allow" => return Err(PolicyError::AllowWithoutOrigins),
            Some(("allow", l)) => {
                let origins = list(l)?;
                if origins.is_empty() {
                    return Err(PolicyError::AllowWithoutOrigins);
                }
                NetworkMode::Allow { origins }
            }
            Some(("ask", l)) => NetworkMode::Ask { origins: list(l)? },
            _ => return Err(PolicyError::UnknownMode(s.to_string())),
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

    /// Why `ip` may not be reached, or `None`. `host` holds this host's
    /// addresses ([`host_addresses`]). The metadata addresses never pass;
    /// an address in a refused row, or of this host, passes only when an
    /// `--allow-private` range contains it. Each IPv4 address that `ip`
    /// carries is judged the same way, on its own: allowing an IPv6 range
    /// does not allow what its addresses carry.
    pub fn refusal(&self, ip: IpAddr, host: &[IpAddr]) -> Option<Refusal> {
        let all = carried(ip);
        if let Some(&addr) = all.iter().find(|a| metadata_itself(**a)) {
            return Some(Refusal::Metadata { addr });
        }
        for addr in all {
            let row = range_of(addr).filter(|r| !matches!(r.treatment, Treatment::Carrying(_)));
            let own = host.iter().any(|h| canonical(*h) == addr);
            if (row.is_none() && !own) || self.allow_private.iter().any(|c| c.contains(addr)) {
                continue;
            }
            let mut what: Vec<String> = row
                .map(|r| format!("{} [{}]", r.name, r.reference))
                .into_iter()
                .collect();
            if own {
                what.push("an address of this host".into());
            }
            return Some(Refusal::NonPublic {
                addr,
                what: what.join("; "),
            });
        }
        None
    }

    /// Judges the addresses a name resolved to; all must pass. `host`
    /// holds this host's addresses ([`host_addresses`]).
    pub fn judge_addrs(&self, origin: &Origin, addrs: &[IpAddr], host: &[IpAddr]) -> Verdict {
        if addrs.is_empty() {
            return Verdict::Deny(format!("{origin}: the name did not resolve"));
        }
        for &ip in addrs {
            match self.refusal(ip, host) {
                None => {}
                Some(Refusal::Metadata { addr }) if addr == ip => {
                    return Verdict::Deny(format!(
                        "{origin} resolves to the metadata address {ip}"
                    ));
                }
                Some(Refusal::Metadata { addr }) => {
                    return Verdict::Deny(format!(
                        "{origin} resolves to {ip}, which carries the metadata address {addr}"
                    ));
                }
                Some(Refusal::NonPublic { addr, what }) => {
                    let which = if addr == ip {
                        format!("the non-public address {ip}")
                    } else {
                        format!("{ip}, which carries the non-public address {addr}")
                    };
                    return Verdict::Deny(format!(
                        "{origin} resolves to {which} ({what}; list its range with --allow-private to allow it)"
                    ));
                }
            }
        }
        Verdict::Allow
    }
}

#[cfg(test)]
mod tests;
