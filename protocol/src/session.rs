//! What a session's host and daemon agree on outside HTTP: the names in
//! the guest's folder (the daemon's socket, the token file, the egress
//! socket), where that folder is inside the guest, and the token's size
//! and environment variable, the guest user's ids. Defined here once; the Docker image's
//! `HEALTHCHECK` is checked against [`SOCKET_PATH`] by host-cli's tests.

// The literals, once: the paths below are spelled from them at compile time.
macro_rules! guest_dir {
    () => {
        "/run/sandtop"
    };
}
macro_rules! socket_name {
    () => {
        "sandtopd.sock"
    };
}
macro_rules! token_name {
    () => {
        "token"
    };
}
macro_rules! egress_socket_name {
    () => {
        "egress.sock"
    };
}

/// The session's guest folder as the guest sees it (a Docker bind mount,
/// a tmpfs in a VM).
pub const GUEST_DIR: &str = guest_dir!();
/// The daemon's API socket, in the guest folder and in the host's session
/// folder.
pub const SOCKET_NAME: &str = socket_name!();
/// The session token's file, in the guest folder and in the host's session
/// folder.
pub const TOKEN_NAME: &str = token_name!();
/// The socket the guest's egress relay connects to, in the guest folder.
pub const EGRESS_SOCKET_NAME: &str = egress_socket_name!();

/// The daemon's API socket inside the guest.
pub const SOCKET_PATH: &str = concat!(guest_dir!(), "/", socket_name!());
/// The token file inside the guest.
pub const TOKEN_PATH: &str = concat!(guest_dir!(), "/", token_name!());
/// The egress socket inside the guest.
pub const EGRESS_SOCKET_PATH: &str = concat!(guest_dir!(), "/", egress_socket_name!());

/// The environment variable that hands sandtopd its token (it takes
/// precedence over the token file). Secret: scrubbed from children.
pub const TOKEN_ENV: &str = "SANDTOPD_TOKEN";
/// Bytes of entropy in a session token (it travels as twice as many hex
/// digits).
pub const TOKEN_BYTES: usize = 32;

/// The guest's desktop user (docs/security.md C1 and C12): a
/// high constant that no host account has, so that no host user shares
/// the guest's identity. A host user with the guest's uid could reach
/// everything of a running guest through `/proc/PID/root` (its token,
/// socket and display) without any Docker rights. 2,000,000,000 lies above
/// what `useradd` hands out to accounts (1000-60000) and to `/etc/subuid`
/// (from 100000, at most 600,100,000 by default), outside systemd's
/// reserved ranges (nspawn ends at 1,879,048,191) and below 2^31 (tools
/// that keep uids in a signed int). `guest start` refuses to run when an
/// account, a group or a subordinate range of this host holds it
/// (host-cli's `guest::ids::check_guest_ids_unused`). Dockerfile.guest
/// creates the user with the same numbers (a unit test keeps them equal).
pub const GUEST_UID: u32 = 2_000_000_000;
/// The guest's desktop group: the same number as [`GUEST_UID`].
pub const GUEST_GID: u32 = 2_000_000_000;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_the_names_in_the_guest_folder() {
        assert_eq!(SOCKET_PATH, format!("{GUEST_DIR}/{SOCKET_NAME}"));
        assert_eq!(TOKEN_PATH, format!("{GUEST_DIR}/{TOKEN_NAME}"));
        assert_eq!(
            EGRESS_SOCKET_PATH,
            format!("{GUEST_DIR}/{EGRESS_SOCKET_NAME}")
        );
        assert_eq!(SOCKET_PATH, "/run/sandtop/sandtopd.sock");
    }
}
