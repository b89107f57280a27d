//! `sandtop-tests`: the end-to-end tiers (`tests/e2e.rs`: the real guest
//! under Docker; `tests/network.rs`: the network policy). The library holds
//! their shared harness ([`harness`], on libtest-mimic); the tests drive the
//! workspace through `host-cli`'s library and binary, and read the guest
//! from inside with `sandtop-probe` (its own crate, `probe/`, installed in
//! the image).

pub mod harness;
