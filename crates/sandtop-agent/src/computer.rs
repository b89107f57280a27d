//! The computer tool's rules: every call of a response checked before any
//! runs ([`preflight`]), and the screen an approval is bound to
//! ([`screen_change`]); the reads an Anthropic model's toolset needs
//! ([`reads`]).

pub mod preflight;
pub mod reads;
pub mod screen_change;
