//! `host-cli`: see the library docs (`host_cli::`).

use std::process::ExitCode;

use host_cli::cli::run;

fn main() -> ExitCode {
    let cli = host_cli::cli::parse();
    {
        use std::io::IsTerminal as _;
        let filter = tracing_subscriber::EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
        tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_ansi(std::io::stderr().is_terminal())
            .with_writer(std::io::stderr)
            .init();
    }
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("host-cli: cannot start the runtime: {e}");
            return ExitCode::from(70);
        }
    };
    match rt.block_on(run(cli)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("host-cli: {}", host_cli::term::safe(&format!("{e:#}")));
            ExitCode::FAILURE
        }
    }
}
