//! `sandtop-tests`: the end-to-end tiers (`tests/e2e.rs`: the real guest
//! under Docker; `tests/network.rs`: the network policy). The library
//! itself is empty: the tests drive the workspace through `host-cli`'s
//! library and binary, and read the guest from inside with `sandtop-probe`
//! (its own crate, `probe/`, installed in the image).
