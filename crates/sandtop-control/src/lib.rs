//! A running `host-cli run`'s control socket (`wire`): the run's state,
//! its open questions, and the operator's takeover, for `host-cli view`.
//! `served` is the run's side, `line` what both sides share; the viewer's
//! side is host-cli's `view::run_link`.

pub mod line;
pub mod served;
pub mod wire;
