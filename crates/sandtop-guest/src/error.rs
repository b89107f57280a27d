//! What can go wrong starting, reaching, stopping and collecting guests:
//! the `guest` module's boundary. Each variant says
//! what happened in the operator's words; the cause, when there is one,
//! is its `source` (shown by `{:#}` once the error is an `anyhow::Error`,
//! or by [`GuestError::chain`]). Callers and tests match on variants.

use std::path::PathBuf;
use std::time::Duration;

use sandtop_client::TokenError;

use super::docker::IMAGE_ENV;
use super::docker::channel::CHANNEL_ENV;
use crate::session::SessionError;
use sandtop_channel::ChannelError;
use sandtop_egress::service::EgressError;

/// The `guest` module's result.
pub type Result<T, E = GuestError> = std::result::Result<T, E>;

/// Why a guest could not be started, reached, stopped or collected.
#[derive(Debug, thiserror::Error)]
pub enum GuestError {
    /// No Docker engine at `host`: the client could not be made, or the
    /// engine refused or failed the version negotiation.
    #[error(
        "cannot reach the Docker engine at {host} (is dockerd running, and may this user use it? \
         root or the `docker` group; DOCKER_HOST selects another engine)"
    )]
    EngineUnreachable {
        host: String,
        #[source]
        source: bollard::errors::Error,
    },
    /// The engine at `host` did not answer the version negotiation in time.
    #[error(
        "the Docker engine at {host} did not answer within {waited:?} (is dockerd running? \
         DOCKER_HOST selects another engine)"
    )]
    EngineSilent { host: String, waited: Duration },
    /// The guest image is not in the engine.
    #[error(
        "the guest image {image} is not present: build it with `make guest` \
         (or guest-image/build.sh), or pick another with --image / {IMAGE_ENV}"
    )]
    NoImage { image: String },
    /// A Docker API call failed (`what` says which).
    #[error("{what}")]
    Docker {
        what: String,
        #[source]
        source: bollard::errors::Error,
    },
    /// The engine answered in a way host-cli cannot use.
    #[error("{what}: {detail}")]
    Unexpected { what: String, detail: &'static str },
    /// A container of that name exists already.
    #[error(
        "a container named {name} already exists (another state directory, or a leftover: \
         `host-cli guest gc`)"
    )]
    NameTaken { name: String },
    /// The container stopped before its daemon was ready.
    #[error(
        "the guest exited (status {code}{}) before it was ready; its log ends with:\n{log}",
        if *oom { ", killed for memory" } else { "" }
    )]
    ExitedEarly { code: i64, oom: bool, log: String },
    /// The daemon of a container or of a local process was not ready
    /// within `waited` (or its guest ended first); `last` is what its
    /// last health answer said, `log` the tail of the guest's log (the
    /// token redacted).
    #[error(
        "the {kind} did not become ready within {waited:?}{}; its log ends with:\n{log}",
        last.as_deref().map(|l| format!(" (last: {l})")).unwrap_or_default()
    )]
    NotReady {
        kind: &'static str,
        waited: Duration,
        last: Option<String>,
        log: String,
    },
    /// A VM's daemon was not ready (`why`); the tails of QEMU's log, the
    /// serial console and the link's log.
    #[error(
        "the VM guest did not become ready: {why}\n--- qemu.log ---\n{qemu_log}\n\
         --- console (last lines) ---\n{console}\n--- link.log ---\n{link_log}"
    )]
    VmNotReady {
        why: String,
        /// QEMU exited (else the wait ran out with QEMU still up).
        qemu_exited: bool,
        qemu_log: String,
        console: String,
        link_log: String,
    },
    /// Ctrl-C, SIGTERM or SIGHUP arrived during the start; what was
    /// created is gone again.
    #[error("interrupted by {signal}: the guest was removed")]
    Interrupted { signal: &'static str },
    /// The session's record is of another backend than the one asked.
    #[error("the session record has no {0}")]
    NotThisBackend(&'static str),
    /// A file or process operation on the host failed (`what` says which).
    #[error("{what}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// An exchange with the guest took longer than its deadline.
    #[error("{what} did not finish within {after:?}")]
    Timeout { what: String, after: Duration },
    /// The session's token file.
    #[error(transparent)]
    Token(#[from] TokenError),
    /// The session store.
    #[error(transparent)]
    Session(#[from] SessionError),
    /// The guest is stopped but its folder could not be fully removed.
    #[error(
        "the guest is stopped, but its folder is not fully removed (`host-cli guest gc` tries again)"
    )]
    FolderLeft(#[source] SessionError),
    /// The authenticated channel to the session's daemon.
    #[error("opening the channel to session {name}")]
    Channel {
        name: String,
        #[source]
        source: ChannelError,
    },
    /// No session was named and none is running.
    #[error("no session is running: start one with `host-cli guest start`")]
    NoneRunning,
    /// No session was named and several are running.
    #[error(
        "{} sessions are running ({}): pick one with --session NAME",
        names.len(),
        names.join(", ")
    )]
    SeveralRunning { names: Vec<String> },
    /// The session's egress proxy.
    #[error("starting the egress proxy")]
    Egress(#[source] EgressError),
    /// `SANDTOP_CHANNEL` holds something else than auto, socket or exec.
    #[error("{CHANNEL_ENV}={value:?} is not one of auto, socket, exec")]
    BadChannelMode { value: String },
    /// An account of this host holds the guest's uid or gid.
    #[error(
        "refusing to start a guest: its processes run as uid/gid {uid}, and {why}. That account \
         would reach the guest's token, socket and display through /proc/PID/root. Give the \
         account another id (docs/security.md, C1)",
        uid = super::ids::GUEST_UID
    )]
    GuestIdTaken { why: String },
    /// No `sandtopd` for a local guest.
    #[error(
        "sandtopd not found: build it (cargo build -p sandtopd), install it \
         (cargo install --path daemon) or set SANDTOPD_BIN"
    )]
    NoSandtopd,
    /// A file of the VM guest image is missing.
    #[error(
        "no VM guest image: {} is missing (build it with `make guest-vm`, or point \
         SANDTOP_VM_DIR at the folder it wrote)",
        missing.display()
    )]
    NoVmImage { missing: PathBuf },
    /// QEMU is not installed.
    #[error(
        "{program} is not installed (Debian: apt-get install qemu-system-x86; macOS: brew install qemu)"
    )]
    NoQemu { program: String },
    /// Started as root, host-cli could not tell QEMU's version, so not
    /// how to make it drop root (it is not started as root without).
    #[error(
        "cannot tell the version of {program} (its --version said {said:?}); as root, host-cli          starts QEMU only with -run-with user= (QEMU 9.1 and later) or -runas, which need it"
    )]
    QemuVersion { program: String, said: String },
    /// Making a VM snapshot failed (`why`); the tails of QEMU's log and
    /// of the serial console.
    #[error(
        "the VM snapshot could not be made: {why}\n--- qemu.log ---\n{qemu_log}\n\
         --- console (last lines) ---\n{console}"
    )]
    Snapshot {
        why: String,
        qemu_log: String,
        console: String,
    },
}

impl GuestError {
    /// A file or process operation that failed, with what it was.
    pub fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> GuestError {
        let what = what.into();
        move |source| GuestError::Io { what, source }
    }

    /// A Docker API call that failed, with what it was.
    pub fn docker(what: impl Into<String>) -> impl FnOnce(bollard::errors::Error) -> GuestError {
        let what = what.into();
        move |source| GuestError::Docker { what, source }
    }

    /// The message and its causes on one line (`a: b: c`), for reports
    /// that print an error without handing it on.
    pub fn chain(&self) -> String {
        sandtop_hostkit::chain::chain(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chain_shows_each_cause_once() {
        let e = GuestError::io("creating the daemon log")(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            "denied",
        ));
        assert_eq!(e.to_string(), "creating the daemon log");
        assert_eq!(e.chain(), "creating the daemon log: denied");
        // Through anyhow, as cli.rs prints it: the same text.
        assert_eq!(
            format!("{:#}", anyhow::Error::from(e)),
            "creating the daemon log: denied"
        );
    }

    #[test]
    fn not_ready_says_which_guest_and_shows_its_log() {
        let e = GuestError::NotReady {
            kind: "local daemon",
            waited: Duration::from_secs(20),
            last: None,
            log: "last line".into(),
        };
        assert_eq!(
            e.to_string(),
            "the local daemon did not become ready within 20s; its log ends with:\nlast line"
        );
        let e = GuestError::NotReady {
            kind: "guest",
            waited: Duration::from_secs(30),
            last: Some("health Degraded".into()),
            log: "  x".into(),
        };
        assert!(
            e.to_string()
                .starts_with("the guest did not become ready within 30s (last: health Degraded);"),
            "{e}"
        );
        let e = GuestError::ExitedEarly {
            code: 137,
            oom: true,
            log: "  x".into(),
        };
        assert!(e.to_string().contains("(status 137, killed for memory)"));
    }
}
