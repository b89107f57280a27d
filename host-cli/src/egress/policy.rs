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

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
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
            // The forms issue 12 found missing.
            "::8.8.8.8",
            "::127.0.0.1",
            "2002:808:808::1",
            "2002:7f00:1::",
            "64:ff9b::7f00:1",
            "64:ff9b::a00:1",
            "64:ff9b:1::808:808",
            "::ffff:0:7f00:1",
            "::ffff:0:808:808",
            "fec0::1",
            "100::1",
            "2001::1",
            "2001:0:808:808::f7f7:f7f7",
        ] {
            assert!(is_private(p.parse().unwrap()), "{p}");
        }
        for g in [
            "1.1.1.1",
            "8.8.8.8",
            "172.32.0.1",
            "100.128.0.1",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
            "2620:4f:8000::1",
        ] {
            assert!(!is_private(g.parse().unwrap()), "{g}");
        }
        for m in [
            "169.254.169.254",
            "169.254.170.2",
            "100.100.100.200",
            "fd00:ec2::254",
            "::ffff:169.254.169.254",
            "64:ff9b::a9fe:a9fe",
            "2002:a9fe:a9fe::",
            "::169.254.169.254",
            "2001:0:808:808::5601:5601",
        ] {
            assert!(is_metadata(m.parse().unwrap()), "{m}");
        }
        assert!(!is_metadata("169.254.169.253".parse().unwrap()));
    }

    /// Each row of [`RANGES`], with addresses inside it and just outside
    /// it, written from the registries (not computed from the table).
    #[rustfmt::skip]
    const VECTORS: &[(&str, &[&str], &[&str])] = &[
        ("0.0.0.0/8", &["0.0.0.0", "0.255.255.255"], &["1.0.0.0"]),
        ("10.0.0.0/8", &["10.0.0.0", "10.255.255.255"], &["9.255.255.255", "11.0.0.0"]),
        ("100.64.0.0/10", &["100.64.0.0", "100.127.255.255"], &["100.63.255.255", "100.128.0.0"]),
        ("127.0.0.0/8", &["127.0.0.1", "127.255.255.255"], &["126.255.255.255", "128.0.0.0"]),
        ("169.254.0.0/16", &["169.254.0.0", "169.254.255.255"], &["169.253.255.255", "169.255.0.0"]),
        ("172.16.0.0/12", &["172.16.0.0", "172.31.255.255"], &["172.15.255.255", "172.32.0.0"]),
        ("192.0.0.0/24", &["192.0.0.0", "192.0.0.255"], &["191.255.255.255", "192.0.1.0"]),
        ("192.0.2.0/24", &["192.0.2.0", "192.0.2.255"], &["192.0.1.255", "192.0.3.0"]),
        ("192.88.99.0/24", &["192.88.99.0", "192.88.99.255"], &["192.88.98.255", "192.88.100.0"]),
        ("192.168.0.0/16", &["192.168.0.0", "192.168.255.255"], &["192.167.255.255", "192.169.0.0"]),
        ("198.18.0.0/15", &["198.18.0.0", "198.19.255.255"], &["198.17.255.255", "198.20.0.0"]),
        ("198.51.100.0/24", &["198.51.100.0", "198.51.100.255"], &["198.51.99.255", "198.51.101.0"]),
        ("203.0.113.0/24", &["203.0.113.0", "203.0.113.255"], &["203.0.112.255", "203.0.114.0"]),
        ("224.0.0.0/4", &["224.0.0.0", "239.255.255.255"], &["223.255.255.255", "240.0.0.0"]),
        ("240.0.0.0/4", &["240.0.0.0", "255.255.255.254"], &["239.255.255.255", "255.255.255.255"]),
        ("255.255.255.255/32", &["255.255.255.255"], &["255.255.255.254"]),
        ("::/128", &["::"], &["::1"]),
        ("::1/128", &["::1"], &["::", "::2"]),
        ("::ffff:0:0/96", &["::ffff:0.0.0.0", "::ffff:255.255.255.255"], &["::fffe:ffff:ffff", "::1:0:0:0"]),
        ("64:ff9b::/96", &["64:ff9b::", "64:ff9b::ffff:ffff"], &["64:ff9a:ffff:ffff:ffff:ffff:ffff:ffff", "64:ff9b::1:0:0"]),
        ("64:ff9b:1::/48", &["64:ff9b:1::", "64:ff9b:1:ffff:ffff:ffff:ffff:ffff"], &["64:ff9b:0:ffff:ffff:ffff:ffff:ffff", "64:ff9b:2::"]),
        ("100::/64", &["100::", "100::ffff:ffff:ffff:ffff"], &["ff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "100:0:0:1::"]),
        ("2001::/23", &["2001:1::", "2001:1ff:ffff:ffff:ffff:ffff:ffff:ffff"], &["2000:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "2001:200::"]),
        ("2001::/32", &["2001::", "2001:0:ffff:ffff:ffff:ffff:ffff:ffff"], &["2000:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "2001:1::"]),
        ("2001:db8::/32", &["2001:db8::", "2001:db8:ffff:ffff:ffff:ffff:ffff:ffff"], &["2001:db7:ffff:ffff:ffff:ffff:ffff:ffff", "2001:db9::"]),
        ("2002::/16", &["2002::", "2002:ffff:ffff:ffff:ffff:ffff:ffff:ffff"], &["2001:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "2003::"]),
        ("3fff::/20", &["3fff::", "3fff:fff:ffff:ffff:ffff:ffff:ffff:ffff"], &["3ffe:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "3fff:1000::"]),
        ("5f00::/16", &["5f00::", "5f00:ffff:ffff:ffff:ffff:ffff:ffff:ffff"], &["5eff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "5f01::"]),
        ("fc00::/7", &["fc00::", "fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"], &["fbff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "fe00::"]),
        ("fe80::/10", &["fe80::", "febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff"], &["fe7f:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "fec0::"]),
        ("::/96", &["::2", "::ffff:ffff"], &["::1", "::1:0:0"]),
        ("::ffff:0:0:0/96", &["::ffff:0:0:0", "::ffff:0:ffff:ffff"], &["::fffe:ffff:ffff:ffff", "::ffff:1:0:0"]),
        ("fec0::/10", &["fec0::", "feff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"], &["febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "ff00::"]),
        ("ff00::/8", &["ff00::", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"], &["feff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"]),
        ("::/3", &["0:1::", "1fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"], &["2000::"]),
        ("4000::/2", &["4000::", "7fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"], &["3fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "8000::"]),
        ("8000::/2", &["8000::", "bfff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"], &["7fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "c000::"]),
        ("c000::/3", &["c000::", "dfff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"], &["bfff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "e000::"]),
        ("e000::/4", &["e000::", "efff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"], &["dfff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "f000::"]),
        ("f000::/5", &["f000::", "f7ff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"], &["efff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "f800::"]),
        ("f800::/6", &["f800::", "fbff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"], &["f7ff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "fc00::"]),
        ("fe00::/9", &["fe00::", "fe7f:ffff:ffff:ffff:ffff:ffff:ffff:ffff"], &["fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "fe80::"]),
    ];

    fn cidr_text(c: &Cidr) -> String {
        format!("{}/{}", c.addr, c.prefix)
    }

    #[test]
    fn every_row_decides_the_addresses_inside_it_and_none_just_outside() {
        let key = |c: &Cidr| (c.addr, c.prefix);
        let mut rows: Vec<_> = RANGES.iter().map(|r| key(&r.net)).collect();
        let mut vectors: Vec<_> = VECTORS
            .iter()
            .map(|v| key(&v.0.parse::<Cidr>().unwrap()))
            .collect();
        rows.sort();
        vectors.sort();
        assert_eq!(
            rows, vectors,
            "every row has its vectors, and every vector its row"
        );
        let n = rows.len();
        rows.dedup();
        assert_eq!(rows.len(), n, "no row twice");
        for (text, inside, outside) in VECTORS {
            let cidr: Cidr = text.parse().unwrap();
            let row = RANGES.iter().find(|r| r.net == cidr).unwrap();
            for i in *inside {
                let ip: IpAddr = i.parse().unwrap();
                assert!(row.net.contains(ip), "{i} in {text}");
                let decides = range_of(ip).unwrap();
                assert_eq!(decides.net, cidr, "{i} is decided by {text}");
                if !matches!(row.treatment, Treatment::Carrying(_)) {
                    assert!(is_private(ip), "{i} ({text}) is refused");
                }
            }
            for o in *outside {
                let ip: IpAddr = o.parse().unwrap();
                assert!(
                    range_of(ip).is_none_or(|r| r.net != cidr),
                    "{o} is not decided by {text}"
                );
            }
        }
    }

    #[test]
    fn every_row_is_a_network_with_exact_edges() {
        for r in RANGES {
            let (bits, first) = match r.net.addr {
                IpAddr::V4(a) => (32u32, u128::from(u32::from(a))),
                IpAddr::V6(a) => (128u32, u128::from(a)),
            };
            let prefix = u32::from(r.net.prefix);
            assert!(prefix <= bits);
            let host_bits = bits - prefix;
            let size = if host_bits == 128 {
                u128::MAX
            } else {
                (1u128 << host_bits) - 1
            };
            assert_eq!(first & size, 0, "{}: host bits set", cidr_text(&r.net));
            let last = first + size;
            let ip = |n: u128| -> IpAddr {
                if bits == 32 {
                    IpAddr::V4(Ipv4Addr::from(n as u32))
                } else {
                    IpAddr::V6(Ipv6Addr::from(n))
                }
            };
            assert!(r.net.contains(ip(first)) && r.net.contains(ip(last)));
            if first > 0 {
                assert!(!r.net.contains(ip(first - 1)), "{}", cidr_text(&r.net));
            }
            let max = if bits == 32 {
                u128::from(u32::MAX)
            } else {
                u128::MAX
            };
            if last < max {
                assert!(!r.net.contains(ip(last + 1)), "{}", cidr_text(&r.net));
            }
            assert!(!r.name.is_empty() && r.reference.contains("RFC"), "{r:?}");
        }
    }

    fn p(allow: &[&str]) -> Policy {
        Policy {
            mode: NetworkMode::None,
            allow_private: allow.iter().map(|c| c.parse().unwrap()).collect(),
        }
    }

    fn refused_for(policy: &Policy, ip: &str) -> Option<Refusal> {
        policy.refusal(ip.parse().unwrap(), &[])
    }

    fn non_public(addr: &str) -> impl Fn(Option<Refusal>) -> bool {
        let addr: IpAddr = addr.parse().unwrap();
        move |r| matches!(r, Some(Refusal::NonPublic { addr: a, .. }) if a == addr)
    }

    #[test]
    fn carried_ipv4_addresses_are_judged_on_their_own() {
        let none = p(&[]);
        // IPv4-mapped and the NAT64 well-known prefix stand for their IPv4.
        assert!(non_public("10.0.0.1")(refused_for(
            &none,
            "::ffff:10.0.0.1"
        )));
        assert_eq!(refused_for(&none, "::ffff:8.8.8.8"), None);
        assert!(non_public("10.0.0.1")(refused_for(&none, "64:ff9b::a00:1")));
        assert_eq!(refused_for(&none, "64:ff9b::808:808"), None);
        // The other forms are refused as such...
        for (ip, row) in [
            ("::8.8.8.8", "::/96"),
            ("::ffff:0:808:808", "::ffff:0:0:0/96"),
            ("2002:808:808::", "2002::/16"),
            ("64:ff9b:1::808:808", "64:ff9b:1::/48"),
            ("2001:0:808:808::f7f7:f7f7", "2001::/32"),
        ] {
            assert!(non_public(ip)(refused_for(&none, ip)), "{ip}");
            // ...and, with their range allowed, pass when what they carry
            // is public, and not when it is refused.
            let allowed = p(&[row]);
            assert_eq!(refused_for(&allowed, ip), None, "{ip} with {row}");
        }
        for (ip, row, inner) in [
            ("::127.0.0.1", "::/96", "127.0.0.1"),
            ("::ffff:0:a00:1", "::ffff:0:0:0/96", "10.0.0.1"),
            ("2002:a00:1::", "2002::/16", "10.0.0.1"),
            ("2002:c0a8:101:1::1", "2002::/16", "192.168.1.1"),
            ("64:ff9b:1::7f00:1", "64:ff9b:1::/48", "127.0.0.1"),
            // Teredo: a private client (10.0.0.1, inverted: f5ff:fffe)...
            ("2001:0:808:808::f5ff:fffe", "2001::/32", "10.0.0.1"),
            // ...or a private server.
            ("2001:0:a00:1::f7f7:f7f7", "2001::/32", "10.0.0.1"),
        ] {
            let allowed = p(&[row]);
            assert!(
                non_public(inner)(refused_for(&allowed, ip)),
                "{ip} carries {inner}"
            );
            // Allowing the IPv4 range too lets it through.
            let both = p(&[row, &format!("{inner}/32")]);
            assert_eq!(refused_for(&both, ip), None, "{ip}");
        }
        // An IPv4 range allows the mapped and NAT64 forms (as before), but
        // not a form that is refused as such.
        let v4 = p(&["10.0.0.0/8"]);
        assert_eq!(refused_for(&v4, "::ffff:10.0.0.1"), None);
        assert_eq!(refused_for(&v4, "64:ff9b::a00:1"), None);
        assert!(non_public("2002:a00:1::")(refused_for(&v4, "2002:a00:1::")));
        // Metadata, carried anywhere, never passes.
        let all = p(&["0.0.0.0/0", "::/0"]);
        for m in [
            "169.254.169.254",
            "::ffff:169.254.169.254",
            "64:ff9b::a9fe:a9fe",
            "::169.254.169.254",
            "2002:a9fe:a9fe::",
            "2001:0:808:808::5601:5601",
            "fd00:ec2::254",
        ] {
            let r = refused_for(&all, m);
            assert!(
                matches!(r, Some(Refusal::Metadata { addr }) if metadata_itself(addr)),
                "{m}: {r:?}"
            );
        }
        assert_eq!(refused_for(&all, "10.0.0.1"), None);
    }

    #[test]
    fn this_hosts_own_addresses_are_refused_unless_listed() {
        // A public address that is one of this host's (as on a server with
        // a public interface) is refused; the same address on another host
        // is not; listing it lets it through (N4's explicit way in).
        let public: IpAddr = "93.184.216.34".parse().unwrap();
        let v6: IpAddr = "2606:2800:220:1::1".parse().unwrap();
        let host = [public, v6, "127.0.0.1".parse().unwrap()];
        let origin = o("https://allowed.test");
        let none = p(&[]);
        for ip in [public, v6] {
            let v = none.judge_addrs(&origin, &[ip], &host);
            assert!(
                matches!(&v, Verdict::Deny(m) if m.contains("an address of this host") && m.contains(&ip.to_string())),
                "{v:?}"
            );
            assert_eq!(none.judge_addrs(&origin, &[ip], &[]), Verdict::Allow);
        }
        // Carried in a mapped or NAT64 address: still the host.
        for ip in ["::ffff:93.184.216.34", "64:ff9b::5db8:d822"] {
            assert!(
                non_public("93.184.216.34")(none.refusal(ip.parse().unwrap(), &host)),
                "{ip}"
            );
        }
        let listed = p(&["93.184.216.34/32"]);
        assert_eq!(
            listed.judge_addrs(&origin, &[public], &host),
            Verdict::Allow
        );
        // A private address of the host names both reasons.
        let v = none.judge_addrs(&origin, &["127.0.0.1".parse().unwrap()], &host);
        assert!(
            matches!(&v, Verdict::Deny(m) if m.contains("non-public address 127.0.0.1") && m.contains("Loopback") && m.contains("this host")),
            "{v:?}"
        );
    }

    /// The local addresses the kernel lists in /proc (IPv4: the `host
    /// LOCAL` entries of /proc/net/fib_trie; IPv6: /proc/net/if_inet6).
    fn kernel_local_addresses() -> Option<Vec<IpAddr>> {
        let mut out = Vec::new();
        let trie = std::fs::read_to_string("/proc/net/fib_trie").ok()?;
        let mut last: Option<Ipv4Addr> = None;
        for line in trie.lines() {
            let t = line.trim_start_matches([' ', '|', '+', '-']).trim();
            if let Ok(a) = t.parse::<Ipv4Addr>() {
                last = Some(a);
            } else if t.starts_with("/32 host LOCAL")
                && let Some(a) = last
            {
                out.push(IpAddr::V4(a));
            }
        }
        if let Ok(v6) = std::fs::read_to_string("/proc/net/if_inet6") {
            for line in v6.lines() {
                let hex = line.split_whitespace().next()?;
                out.push(IpAddr::V6(Ipv6Addr::from(
                    u128::from_str_radix(hex, 16).ok()?,
                )));
            }
        }
        out.sort();
        out.dedup();
        Some(out)
    }

    #[test]
    fn host_addresses_are_every_local_address_the_kernel_lists() {
        let ours = host_addresses().unwrap();
        assert!(ours.contains(&"127.0.0.1".parse().unwrap()), "{ours:?}");
        let Some(kernel) = kernel_local_addresses() else {
            println!("SKIP the cross-check: /proc/net/fib_trie cannot be read");
            return;
        };
        assert!(!kernel.is_empty());
        for a in &kernel {
            assert!(
                ours.contains(a),
                "the kernel lists {a}, host_addresses() does not: {ours:?}"
            );
        }
        // And every one is refused by a policy that lists nothing.
        for a in &ours {
            assert!(p(&[]).refusal(*a, &ours).is_some(), "{a}");
        }
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
            allow.judge_addrs(&o("https://allowed.test"), &[public], &[]),
            Verdict::Allow
        );
        assert!(matches!(
            allow.judge_addrs(&o("https://allowed.test"), &[public, private], &[]),
            Verdict::Deny(_)
        ));
        let with_private = Policy {
            allow_private: vec!["172.18.0.0/16".parse().unwrap()],
            ..allow.clone()
        };
        assert_eq!(
            with_private.judge_addrs(&o("https://allowed.test"), &[private], &[]),
            Verdict::Allow
        );
        // The metadata address is refused even inside an allowed range.
        let everything = Policy {
            allow_private: vec!["169.254.0.0/16".parse().unwrap()],
            ..allow.clone()
        };
        assert!(matches!(
            everything.judge_addrs(&o("https://allowed.test"), &["169.254.169.254".parse().unwrap()], &[]),
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
