//! `sandtop-tests`: the end-to-end tiers (`tests/e2e.rs`: the real guest
//! under Docker) and the in-guest probe (`src/bin/sandtop-probe.rs`). The
//! library itself is empty: the tests drive the workspace through
//! `host-cli`'s library and binary, the probe runs inside the guest.
