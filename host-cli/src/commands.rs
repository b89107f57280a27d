//! One module per subcommand that has left `cli.rs`: its clap options,
//! checked once, then one call into the library crate that does the work.

pub mod batch;
pub mod doctor;
pub mod pool;
pub mod report;
pub mod view;
