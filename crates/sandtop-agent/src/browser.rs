//! The browser tools' rules: the toolset (members, arguments, the URL
//! policy, what the model reads back: [`toolset`]) and the operator's file
//! grants for `upload_file` and `download_file` ([`grants`]).

pub mod grants;
pub mod toolset;

pub use toolset::{Prepared, Toolset, UrlPolicy};
