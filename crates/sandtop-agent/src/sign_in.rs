//! `request_sign_in`'s rules: its tool, its arguments read exactly, the
//! operator's answer checked, the credentials file ([`rules`]).

pub mod rules;
