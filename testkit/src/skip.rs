//! The skip policy. A test that needs something this host lacks prints
//! `SKIP <tier>: <reason>` and returns; it never passes silently. When the
//! tier is listed in `SANDTOP_REQUIRE` (comma-separated, e.g. `x11,docker`;
//! CI sets it), a missing prerequisite fails the test instead.

/// Whether `tier` must run here.
pub fn required(tier: &str) -> bool {
    std::env::var("SANDTOP_REQUIRE")
        .map(|v| v.split(',').any(|t| t.trim() == tier || t.trim() == "all"))
        .unwrap_or(false)
}

/// Reports a missing prerequisite: panics when the tier is required,
/// otherwise prints the skip line. Returns `false` so callers can write
/// `if !have_x { return skip::skip("x11", "...") }`-style early returns.
pub fn skip(tier: &str, reason: &str) -> bool {
    if required(tier) {
        panic!("{tier} tier is required (SANDTOP_REQUIRE) but cannot run: {reason}");
    }
    eprintln!("SKIP {tier}: {reason}");
    false
}

/// Whether `program` is on PATH.
pub fn have(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|p| p.join(program).is_file()))
}

/// Whether a Docker engine answers and the guest image is built (the E
/// tier of host-cli's tests); otherwise [`skip`]s the `docker` tier.
pub fn docker_guest() -> bool {
    let ok = |args: &[&str]| {
        std::process::Command::new("docker")
            .args(args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if !have("docker") || !ok(&["version"]) {
        return skip("docker", "no Docker engine answers");
    }
    if !ok(&["image", "inspect", "sandtop-guest:latest"]) {
        return skip(
            "docker",
            "the guest image is missing (make guest-image builds it)",
        );
    }
    true
}
