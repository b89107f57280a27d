//! The egress policy's parsers: network modes with their origin lists,
//! origins, hosts (IP literals in every spelling), host:port, CIDR ranges.
#![no_main]
use host_cli::egress::policy::{Cidr, Host, NetworkMode, Origin, split_host_port};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let _ = s.parse::<NetworkMode>();
    if let Ok(o) = s.parse::<Origin>() {
        // What is printed parses back to the same origin.
        assert_eq!(o.to_string().parse::<Origin>().ok(), Some(o));
    }
    let _ = s.parse::<Cidr>();
    let _ = Host::parse(s);
    if let Ok((h, _)) = split_host_port(s) {
        let _ = Host::parse(h);
    }
});
