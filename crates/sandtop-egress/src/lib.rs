//! The guest's network policy (docs/contract.md rules 21-23, docs/security.md N1-N6).
//!
//! - `none` (the default): the container has no network at all.
//! - `allow:ORIGINS` / `ask[:ORIGINS]`: the container still has no network
//!   interface but loopback. Its only way out is a Unix socket in the
//!   session folder, relayed inside the guest from 127.0.0.1:3128 (the
//!   browser's and the tools' proxy) by `sandtopd`, to this egress proxy,
//!   which host-cli runs on the host. Direct connections and DNS cannot
//!   leave the guest because there is nothing to leave through, and host
//!   services are unreachable because the guest has no route to the host.
//! - `open`: Docker's bridge network, unfiltered, with a warning.
//!
//! [`policy`] decides (exact origins, private ranges, the metadata
//! address); [`proxy`] enforces (HTTP and CONNECT on hyper, SNI and Host
//! checks, its own name resolution) and reports every decision; [`limits`]
//! bounds what a guest can cost the host through it (connections, slow
//! headers, idle tunnels, the journal's rate).

pub mod limits;
pub mod policy;
pub mod proxy;
pub mod service;
