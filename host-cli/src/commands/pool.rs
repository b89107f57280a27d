//! `host-cli pool` (start, status, stop): its options, then one call
//! into `sandtop-pool` (`command`: the supervisor served or detached, the
//! status printed; `client`: status and stop).

use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};
use sandtop_pool::{PoolConfig, client, command};
use sandtop_protocol::Size;

use crate::guest::options::GuestArgs;
use crate::session::{BackendKind, Store};

#[derive(Debug, Subcommand)]
pub enum PoolCommand {
    /// Keep N guests of one configuration ready (and replace each one
    /// claimed or lost) until `pool stop` or Ctrl-C. `guest start --pool`,
    /// `run --pool` and `host-cli mcp --pool` claim them.
    Start(PoolStartArgs),
    /// Ready, starting, claimed and failed guests, with reasons.
    Status {
        /// Print the status as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Remove the unclaimed guests and end the supervisor.
    Stop,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Prewarm {
    /// Start each guest's Firefox before it counts as ready.
    Browser,
}

#[derive(Debug, Args)]
pub struct PoolStartArgs {
    /// How many guests to keep ready.
    #[arg(long, default_value_t = 2)]
    pub size: usize,
    /// The memory the pool may take in all, e.g. 8g: refused at start when
    /// --size x the guests' --memory is more.
    #[arg(long, value_name = "LIMIT", value_parser = crate::units::parse_bytes)]
    pub pool_memory: Option<i64>,
    /// Start something in each guest ahead of its claim.
    #[arg(long, value_enum)]
    pub prewarm: Option<Prewarm>,
    /// Run the supervisor in the background (its log: STATE/pool/pool.log)
    /// and return once it serves.
    #[arg(long)]
    pub detach: bool,
    /// Where the guests run (the pool keeps docker guests).
    #[arg(long, value_enum, default_value_t = BackendKind::Docker)]
    pub backend: BackendKind,
    /// Screen size of the guests' display, WIDTHxHEIGHT.
    #[arg(long, value_name = "WxH", default_value = "1280x800", value_parser = Size::parse)]
    pub screen: Size,
    #[command(flatten)]
    pub guest: GuestArgs,
    #[command(flatten)]
    pub net: crate::egress::service::NetworkArgs,
}

impl PoolStartArgs {
    fn config(&self) -> PoolConfig {
        PoolConfig {
            backend: self.backend,
            screen: self.screen,
            guest: self.guest.config(),
            network: self.net.config(),
            size: self.size,
            memory_budget: self.pool_memory,
            prewarm_browser: self.prewarm == Some(Prewarm::Browser),
        }
    }
}

pub async fn command(cmd: PoolCommand) -> anyhow::Result<ExitCode> {
    let store = Store::open()?;
    match cmd {
        PoolCommand::Start(a) => command::start(store, a.config(), a.detach).await?,
        PoolCommand::Status { json } => {
            let s = client::status(&store).await?;
            if json {
                crate::out!("{}", serde_json::to_string_pretty(&s)?);
            } else {
                command::print_status(&s);
            }
        }
        PoolCommand::Stop => {
            client::stop(&store, Duration::from_secs(120)).await?;
            crate::out!("pool stopped; its unclaimed guests are removed");
        }
    }
    Ok(ExitCode::SUCCESS)
}
