//! `host-cli`: see the library docs (`host_cli::`); the program is
//! [`host_cli::cli::main`].

fn main() -> std::process::ExitCode {
    host_cli::cli::main()
}
