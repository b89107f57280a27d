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
    use PolicyError as E;
    let s = |t: &str| t.to_string();
    for (bad, why) in [
        ("example.com", E::Scheme(s("example.com"))),
        ("ftp://example.com", E::Scheme(s("ftp://example.com"))),
        (
            "https://example.com/path",
            E::NotAnOrigin(s("https://example.com/path")),
        ),
        (
            "https://user@example.com",
            E::NotAnOrigin(s("https://user@example.com")),
        ),
        (
            "https://example.com?x",
            E::NotAnOrigin(s("https://example.com?x")),
        ),
        ("https://exa mple.com", E::BadName(s("exa mple.com"))),
        ("https://example.com:0", E::BadPort(s("0"))),
        ("https://example.com:99999", E::BadPort(s("99999"))),
        ("https://127.1", E::NumericName(s("127.1"))),
        ("https://-bad-.com", E::BadName(s("-bad-.com"))),
        ("https://[::1", E::UnclosedBracket(s("[::1"))),
        ("https://[::1]x", E::AfterBracket(s("[::1]x"))),
        ("https://[::g]", E::BadIpv6(s("[::g]"))),
    ] {
        assert_eq!(bad.parse::<Origin>(), Err(why), "{bad}");
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
        assert_eq!(
            Host::parse(disguised),
            Err(PolicyError::NumericName(disguised.to_string())),
            "{disguised}"
        );
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
    let mode = |t: &str| t.parse::<NetworkMode>();
    assert_eq!(mode("allow"), Err(PolicyError::AllowWithoutOrigins));
    assert_eq!(mode("allow:"), Err(PolicyError::AllowWithoutOrigins));
    assert_eq!(
        mode("allow:example.com"),
        Err(PolicyError::Scheme("example.com".into()))
    );
    assert_eq!(
        mode("everything"),
        Err(PolicyError::UnknownMode("everything".into()))
    );
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
        // Forms the table once missed (among them IPv4 inside IPv6 addresses:
        // compatible, 6to4, NAT64; docs/security.md N3).
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
    assert_eq!(
        "10.0.0.0/33".parse::<Cidr>(),
        Err(PolicyError::PrefixTooLong {
            prefix: 33,
            max: 32
        })
    );
    assert_eq!(
        "10.0.0.0".parse::<Cidr>(),
        Err(PolicyError::NoPrefix("10.0.0.0".into()))
    );
    assert_eq!(
        "10.0.0.x/8".parse::<Cidr>(),
        Err(PolicyError::BadAddress("10.0.0.x".into()))
    );
    assert_eq!(
        "10.0.0.0/x".parse::<Cidr>(),
        Err(PolicyError::BadPrefix("x".into()))
    );
    let v6: Cidr = "fd00::/8".parse().unwrap();
    assert!(v6.contains("fd12::1".parse().unwrap()));
}
