//! `host-cli doctor`: its options, then `sandtop_guest::doctor::run`
//! (the checks, one line each, with the fix for each failure).

use std::process::ExitCode;

use clap::Args;

#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Print the checks as JSON.
    #[arg(long)]
    pub json: bool,
    /// Skip booting a throwaway guest.
    #[arg(long)]
    pub no_guest: bool,
}

/// Runs every check; prints them; exit 1 when one failed.
pub async fn run(a: DoctorArgs) -> anyhow::Result<ExitCode> {
    let options = crate::guest::doctor::DoctorOptions {
        json: a.json,
        no_guest: a.no_guest,
    };
    Ok(if crate::guest::doctor::run(options).await? {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
