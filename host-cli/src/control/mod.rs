//! A running `host-cli run`'s control socket (`wire`): the run's state,
//! its open questions, and the operator's takeover, for `host-cli view`.

pub mod wire;
