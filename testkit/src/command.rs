//! Programs the tiers start as a user would, but hermetic: no standard
//! input and no controlling terminal, so a prompt can never wait on the
//! developer's terminal when a tier runs from an interactive shell (CI has
//! none), and Ctrl-C there does not reach the program.

use std::path::Path;
use std::process::{Command, Stdio};

/// `program` with standard input from /dev/null, leading a session of its
/// own (setsid(2) in the child: no controlling terminal).
pub fn detached(program: impl AsRef<Path>) -> Command {
    use std::os::unix::process::CommandExt as _;
    let mut c = Command::new(program.as_ref());
    c.stdin(Stdio::null());
    // SAFETY: between fork and exec the child calls setsid(2) alone, which
    // is async-signal-safe and touches no memory of the parent's.
    #[allow(unsafe_code)]
    unsafe {
        c.pre_exec(|| rustix::process::setsid().map(drop).map_err(Into::into));
    }
    c
}

/// Sends `child` SIGINT (Ctrl-C, which a [`detached`] program never gets
/// from a terminal) and waits for it to end; panics when it has not
/// ended within `within`.
pub fn interrupt(
    child: &mut std::process::Child,
    within: std::time::Duration,
) -> std::process::ExitStatus {
    let pid = rustix::process::Pid::from_raw(child.id() as i32).expect("a child's pid");
    rustix::process::kill_process(pid, rustix::process::Signal::INT).expect("sending SIGINT");
    let t = std::time::Instant::now();
    loop {
        if let Some(s) = child.try_wait().expect("waiting for the child") {
            return s;
        }
        assert!(
            t.elapsed() < within,
            "the program did not stop within {within:?} of SIGINT"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}
