//! The guest's identity and where its folder appears, the same for every
//! backend (a container's user, a VM's user, the egress proxy's check of
//! who may use its socket): the ids are `sandtop_protocol::session`'s
//! (what host and guest agree on), checked here against this host's
//! accounts.

pub use sandtop_protocol::session::{GUEST_GID, GUEST_UID};

/// `uid:gid` of the guest's desktop user, as Docker takes it.
pub fn guest_user() -> String {
    format!("{GUEST_UID}:{GUEST_GID}")
}

/// Why the guest's uid/gid must not be used on a host whose account
/// databases read as given (`/etc/passwd`, `/etc/group`, `/etc/subuid`,
/// `/etc/subgid`), or `None` when nothing there holds them.
pub fn host_id_clash(passwd: &str, group: &str, subuid: &str, subgid: &str) -> Option<String> {
    let field = |line: &str, i: usize| line.split(':').nth(i).map(str::trim).map(str::to_string);
    let rows = |text: &str| {
        text.lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    for line in rows(passwd) {
        if field(&line, 2).and_then(|u| u.parse::<u32>().ok()) == Some(GUEST_UID) {
            return Some(format!(
                "the host account `{}` has uid {GUEST_UID} (/etc/passwd)",
                field(&line, 0).unwrap_or_default()
            ));
        }
    }
    for line in rows(group) {
        if field(&line, 2).and_then(|g| g.parse::<u32>().ok()) == Some(GUEST_GID) {
            return Some(format!(
                "the host group `{}` has gid {GUEST_GID} (/etc/group)",
                field(&line, 0).unwrap_or_default()
            ));
        }
    }
    for (text, id, file) in [
        (subuid, GUEST_UID, "/etc/subuid"),
        (subgid, GUEST_GID, "/etc/subgid"),
    ] {
        for line in rows(text) {
            let (Some(Ok(start)), Some(Ok(count))) = (
                field(&line, 1).map(|s| s.parse::<u64>()),
                field(&line, 2).map(|s| s.parse::<u64>()),
            ) else {
                continue;
            };
            if (start..start.saturating_add(count)).contains(&u64::from(id)) {
                return Some(format!(
                    "{id} lies in the subordinate range of `{}` ({file}: {start}, {count} ids)",
                    field(&line, 0).unwrap_or_default()
                ));
            }
        }
    }
    None
}

/// Refuses to go on when an account, a group or a subordinate id range of
/// this host holds the guest's uid or gid (read from the files; accounts
/// that only a network directory such as LDAP knows are not seen).
pub fn check_guest_ids_unused() -> super::Result<()> {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    match host_id_clash(
        &read("/etc/passwd"),
        &read("/etc/group"),
        &read("/etc/subuid"),
        &read("/etc/subgid"),
    ) {
        None => Ok(()),
        Some(why) => Err(super::GuestError::GuestIdTaken { why }),
    }
}

/// Where the session's `guest/` folder appears in the guest.
pub const GUEST_MOUNT: &str = sandtop_protocol::session::GUEST_DIR;

/// The guest's host name, in every guest: the Docker guest's container is
/// created with it, the VM's init sets it (guest-vm/sandtop-vm-init).
pub const GUEST_HOSTNAME: &str = "sandtop";

#[cfg(test)]
mod tests {
    use super::*;

    /// The guest's ids are the ones Dockerfile.guest creates and runs as.
    #[test]
    fn the_image_creates_the_guest_user_with_these_ids() {
        let df = include_str!("../../../Dockerfile.guest");
        assert!(df.contains(&format!("\nUSER {GUEST_UID}:{GUEST_GID}\n")));
        assert!(df.contains(&format!("groupadd --gid {GUEST_GID} user")));
        assert!(df.contains(&format!("useradd --uid {GUEST_UID} --gid {GUEST_GID} ")));
        assert!(df.contains(&format!(
            "install -d -o {GUEST_UID} -g {GUEST_GID} -m 0700 {GUEST_MOUNT}"
        )));
        // The image's HEALTHCHECK names the daemon's socket in the guest.
        assert!(df.contains(&format!(
            r#"CMD ["/usr/local/bin/sandtopd", "health", "--socket", "{}"]"#,
            sandtop_protocol::session::SOCKET_PATH
        )));
        const { assert!(GUEST_UID > 1_879_048_191 && GUEST_UID < 1 << 31) };
    }

    /// `guest start` refuses a host where an account, a group or a
    /// subordinate range holds the guest's ids; an ordinary host passes.
    #[test]
    fn a_host_account_with_the_guests_ids_is_refused() {
        let passwd = "root:x:0:0:root:/root:/bin/bash\nalice:x:1000:1000::/home/alice:/bin/bash\n";
        let group = "root:x:0:\nalice:x:1000:\n";
        let subuid = "alice:100000:65536\n";
        assert_eq!(host_id_clash(passwd, group, subuid, subuid), None);
        assert_eq!(host_id_clash("", "", "", ""), None);
        let clash = host_id_clash(
            &format!("{passwd}guest:x:{GUEST_UID}:5::/:/bin/sh\n"),
            group,
            "",
            "",
        )
        .unwrap();
        assert!(clash.contains("`guest` has uid 2000000000"), "{clash}");
        let clash = host_id_clash(passwd, &format!("{group}g:x:{GUEST_GID}:\n"), "", "").unwrap();
        assert!(clash.contains("group `g`"), "{clash}");
        // A range that ends just before the uid does not clash; one that
        // holds it does, for uids and gids alike.
        let below = format!("bob:{}:1000\n", GUEST_UID - 1000);
        assert_eq!(host_id_clash(passwd, group, &below, &below), None);
        let holds = format!("bob:{}:1001\n", GUEST_UID - 1000);
        assert!(
            host_id_clash(passwd, group, &holds, "")
                .unwrap()
                .contains("/etc/subuid")
        );
        assert!(
            host_id_clash(passwd, group, "", &holds)
                .unwrap()
                .contains("/etc/subgid")
        );
        // This host (the tests run on it) passes.
        check_guest_ids_unused().unwrap();
    }
}
