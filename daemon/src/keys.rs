//! Key names to X keysyms. The table lives in `sandtop-protocol`
//! ([`sandtop_protocol::keys`]), so that the host checks a model's key names
//! by the same rules before it sends anything.

pub use sandtop_protocol::keys::{Keysym, UnknownKey, is_modifier, lookup};
