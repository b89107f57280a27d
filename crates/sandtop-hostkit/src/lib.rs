//! What every host-side crate of Sandtop shares, and none owns: the
//! leaves below the guests, the channel, the loop and the commands.
//!
//! - [`term`]: text from outside the host (the guest, a page, the model)
//!   made inert before it reaches a terminal; [`out!`] for a command's
//!   output lines.
//! - [`chain`]: an error and its causes on one line.
//! - [`units`]: the command line's one spelling of sizes, CPU counts and
//!   durations.
//! - [`signals`]: Ctrl-C, SIGTERM and SIGHUP end a command.
//! - [`secret`]: the session token and the API key, kept out of `Debug`,
//!   logs and messages, and the environment variables no child gets.

/// `println!` for the command's output: a closed stdout ends the output
/// quietly instead of panicking ([`term::print_out`]).
#[macro_export]
macro_rules! out {
    () => {
        $crate::term::print_out(format_args!(""))
    };
    ($($arg:tt)*) => {
        $crate::term::print_out(format_args!($($arg)*))
    };
}

pub mod chain;
pub mod secret;
pub mod signals;
pub mod term;
pub mod units;
