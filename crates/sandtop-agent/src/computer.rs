//! The computer tool's rules: every call of a response checked before any
//! runs ([`preflight`]), and the screen an approval is bound to
//! ([`screen_change`]).

pub mod preflight;
pub mod screen_change;
