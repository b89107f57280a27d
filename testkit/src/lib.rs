//! Test support shared by the workspace's test tiers.
//!
//! What it is: loaders for the OpenAPI descriptions we validate against
//! (OpenAI's, vendored in `reference/`, and the daemon's own
//! `daemon/openapi.yaml`), and fixtures that start real X servers.
//! What it is not: a place for production code; nothing here ships.

pub mod openapi;
