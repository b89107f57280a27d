//! `host-cli doctor`'s checks: what works on this host, one line per
//! check, with the fix for each failure.
//!
//! Flow: reach the Docker engine -> inspect the guest image (and its
//! input-hash label) -> boot a throwaway guest (a session named
//! `doctor-XXXXXX` in the state directory, removed again whatever happens)
//! -> over the channel, the daemon's `/v1/info` says whether X answers and
//! XTEST and MIT-SHM are there -> the probe (`sandtop-probe`, inside the
//! guest) confirms the isolation (uid, capabilities, no_new_privs,
//! seccomp, network) -> the local backend's prerequisites. Later checks
//! are skipped (not failed twice) when an earlier one they need failed.

use std::time::{Duration, Instant};

use sandtop_hostkit::out;
use sandtop_hostkit::signals::until_interrupted;
use serde::Serialize;
use serde_json::Value;

use crate as guest;
use crate::StartRequest;
use crate::docker::DockerBackend;
use crate::session::{self, Store};

/// What `host-cli doctor` was asked.
#[derive(Debug, Clone, Copy, Default)]
pub struct DoctorOptions {
    /// Print the checks as JSON.
    pub json: bool,
    /// Skip booting a throwaway guest.
    pub no_guest: bool,
}

/// One check's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Ok,
    Warn,
    Fail,
    Skip,
}

#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub name: &'static str,
    pub verdict: Verdict,
    pub detail: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

fn check(name: &'static str, verdict: Verdict, detail: impl Into<String>) -> Check {
    Check {
        name,
        verdict,
        detail: detail.into(),
        fix: None,
    }
}

fn fail(name: &'static str, detail: impl Into<String>, fix: impl Into<String>) -> Check {
    Check {
        name,
        verdict: Verdict::Fail,
        detail: detail.into(),
        fix: Some(fix.into()),
    }
}

/// First line of an error chain, for one-line output.
fn one_line(e: &(dyn std::error::Error + 'static)) -> String {
    sandtop_hostkit::chain::chain(e)
        .lines()
        .next()
        .unwrap_or("")
        .to_string()
}

/// Runs every check and prints them; whether every check passed (`false`:
/// one failed, the command's exit status 1).
pub async fn run(args: DoctorOptions) -> Result<bool, serde_json::Error> {
    let checks = checks(&args).await;
    if args.json {
        out!(
            "{}",
            serde_json::to_string_pretty(&sandtop_hostkit::term::safe_json(
                &serde_json::to_value(&checks)?
            ))?
        );
    } else {
        for c in &checks {
            let v = match c.verdict {
                Verdict::Ok => "ok",
                Verdict::Warn => "WARN",
                Verdict::Fail => "FAIL",
                Verdict::Skip => "skip",
            };
            // Details quote the daemon (its version) and error messages.
            let detail = sandtop_hostkit::term::safe_line(&c.detail);
            match &c.fix {
                Some(fix) => out!("{:<10} {:<4}  {detail} -> fix: {fix}", c.name, v),
                None => out!("{:<10} {:<4}  {detail}", c.name, v),
            }
        }
    }
    Ok(!checks.iter().any(|c| c.verdict == Verdict::Fail))
}

/// The checks, in order.
pub async fn checks(args: &DoctorOptions) -> Vec<Check> {
    let mut out = Vec::new();
    let backend = match DockerBackend::connect().await {
        Ok(b) => b,
        Err(e) => {
            out.push(fail(
                "docker",
                one_line(&e),
                "start the engine (systemctl start docker), run as root or a member of the \
                 `docker` group, or set DOCKER_HOST",
            ));
            for n in ["image", "guest", "x", "xtest", "shm", "isolation"] {
                out.push(check(n, Verdict::Skip, "needs docker"));
            }
            out.extend(local_checks());
            return out;
        }
    };
    match backend.engine().await {
        Ok(e) => out.push(check(
            "docker",
            Verdict::Ok,
            format!(
                "engine {} (API {}), host-cli speaks API {}",
                e.server_version, e.api_version, e.client_api
            ),
        )),
        Err(e) => out.push(fail("docker", one_line(&e), "check the engine's health")),
    }
    let image_ok =
        match backend.image_info().await {
            Ok(i) => {
                out.push(check(
                    "image",
                    Verdict::Ok,
                    format!(
                    "{} ({}), input hash {}, {} MB",
                    i.reference,
                    i.id.trim_start_matches("sha256:").chars().take(12).collect::<String>(),
                    i.input_hash
                        .as_deref()
                        .map(|h| h.chars().take(12).collect::<String>())
                        .unwrap_or_else(|| "missing (not built by guest-image/build.sh)".into()),
                    i.size_bytes.unwrap_or(0) / 1_000_000
                ),
                ));
                true
            }
            Err(e) => {
                out.push(fail(
                    "image",
                    one_line(&e),
                    "make guest (builds it offline with guest-image/build.sh)",
                ));
                false
            }
        };
    if args.no_guest || !image_ok {
        let why = if args.no_guest {
            "--no-guest"
        } else {
            "needs the image"
        };
        for n in ["guest", "x", "xtest", "shm", "isolation"] {
            out.push(check(n, Verdict::Skip, why));
        }
    } else {
        out.extend(guest_checks(&backend).await);
    }
    out.extend(local_checks());
    out
}

/// Boots a throwaway guest, asks it, removes it.
async fn guest_checks(backend: &DockerBackend) -> Vec<Check> {
    let mut out = Vec::new();
    let store = match Store::open() {
        Ok(s) => s,
        Err(e) => {
            out.push(fail(
                "guest",
                one_line(&e),
                "set SANDTOP_STATE_DIR to a writable folder",
            ));
            return out;
        }
    };
    let name = match session::new_name() {
        Ok(n) => format!("doctor-{n}"),
        Err(e) => {
            out.push(fail("guest", one_line(&e), "the OS random source failed"));
            return out;
        }
    };
    let req = StartRequest {
        name: name.clone(),
        screen: sandtop_protocol::Size::new(1280, 800),
        network: sandtop_egress::service::EgressConfig::none(),
    };
    let t = Instant::now();
    let rec = match guest::start(&store, backend, &req).await {
        Ok(r) => r,
        Err(e) => {
            out.push(fail(
                "guest",
                format!("the guest did not start: {}", one_line(&e)),
                "see the log tail above (RUST_LOG=debug for more); rebuild with `make guest`",
            ));
            eprintln!("{}", sandtop_hostkit::term::safe(&e.chain()));
            for n in ["x", "xtest", "shm", "isolation"] {
                out.push(check(n, Verdict::Skip, "needs a guest"));
            }
            return out;
        }
    };
    let boot = t.elapsed();
    let asked = until_interrupted(ask_guest(backend, &store, &rec, boot)).await;
    // Whatever happened, the throwaway guest goes.
    if let Ok(dir) = store.get(&name)
        && let Err(e) = guest::stop(&store, &dir, &rec).await
    {
        eprintln!(
            "host-cli doctor: removing the throwaway guest {name}: {}",
            sandtop_hostkit::term::safe(&e.chain())
        );
    }
    match asked {
        Ok(checks) => out.extend(checks),
        Err(sig) => out.push(fail(
            "guest",
            format!("interrupted by {sig}"),
            "run it again",
        )),
    }
    out
}

async fn ask_guest(
    backend: &DockerBackend,
    store: &Store,
    rec: &session::SessionRecord,
    boot: Duration,
) -> Vec<Check> {
    let mut out = Vec::new();
    let Ok(dir) = store.get(&rec.name) else {
        out.push(fail("guest", "the session folder vanished", "run it again"));
        return out;
    };
    let Some(container) = rec.docker().map(|d| d.container_id.clone()) else {
        out.push(fail("guest", "no container in the record", "run it again"));
        return out;
    };
    let connector = backend.connector_for(&dir, &container);
    let token = match sandtop_hostkit::secret::Secret::read(&dir.token_path()) {
        Ok(t) => t,
        Err(e) => {
            out.push(fail("guest", one_line(&e), "check the state directory"));
            return out;
        }
    };
    let opened = sandtop_channel::Channel::open(Box::new(connector), token).await;
    let health;
    let info = match opened {
        Ok(mut ch) => {
            health = ch.health().await.ok();
            out.push(check(
                "guest",
                Verdict::Ok,
                format!(
                    "booted to ready in {:.2} s; daemon {}, protocol {}",
                    boot.as_secs_f64(),
                    ch.info().daemon_version,
                    ch.info().protocol
                ),
            ));
            ch.info().clone()
        }
        Err(e) => {
            out.push(fail(
                "guest",
                format!("the channel failed: {e}"),
                "try SANDTOP_CHANNEL=exec; host-cli guest logs NAME",
            ));
            return out;
        }
    };
    match (info.display, &health) {
        (Some(d), Some(h)) if h.x_connected => out.push(check(
            "x",
            if h.window_manager == Some(false) {
                Verdict::Warn
            } else {
                Verdict::Ok
            },
            format!(
                "Xvfb display {d}, X connected, window manager {}",
                match h.window_manager {
                    Some(true) => "running",
                    Some(false) => "NOT running",
                    None => "not supervised",
                }
            ),
        )),
        _ => out.push(fail(
            "x",
            "the daemon has no working display",
            "the guest's Xvfb did not start: host-cli guest logs NAME, rebuild with `make guest`",
        )),
    }
    let caps = &info.capabilities;
    out.push(if caps.xtest {
        check("xtest", Verdict::Ok, "XTEST input available")
    } else {
        fail(
            "xtest",
            "XTEST missing: no input possible",
            "the image's Xvfb must offer XTEST (Debian's xvfb does): rebuild with `make guest`",
        )
    });
    out.push(if caps.shm {
        check("shm", Verdict::Ok, "MIT-SHM capture available (memfd)")
    } else {
        Check {
            name: "shm",
            verdict: Verdict::Warn,
            detail: "MIT-SHM missing: screenshots fall back to GetImage (slower)".into(),
            fix: Some("check --shm-size and the guest's /dev/shm".into()),
        }
    });
    out.push(isolation(backend, &container).await);
    out
}

/// The probe's view of the isolation, as one line.
async fn isolation(backend: &DockerBackend, container: &str) -> Check {
    let r = backend
        .exec(
            container,
            &["/usr/local/bin/sandtop-probe"],
            None,
            Duration::from_secs(60),
        )
        .await;
    let r = match r {
        Ok(r) if r.exit_code == 0 => r,
        Ok(r) => {
            return Check {
                name: "isolation",
                verdict: Verdict::Warn,
                detail: format!(
                    "the probe did not run (status {}): {}",
                    r.exit_code,
                    crate::docker::channel::sanitize(&r.stderr, 200)
                ),
                fix: Some("rebuild the image with `make guest` (it installs sandtop-probe)".into()),
            };
        }
        Err(e) => {
            return fail("isolation", one_line(&e), "host-cli guest logs NAME");
        }
    };
    let v: Value = match serde_json::from_slice(&r.stdout) {
        Ok(v) => v,
        Err(e) => {
            let why = format!("the probe's output: {}", sandtop_hostkit::chain::chain(&e));
            return fail(
                "isolation",
                why.lines().next().unwrap_or(""),
                "rebuild with `make guest`",
            );
        }
    };
    let zero = "0000000000000000";
    let mut bad = Vec::new();
    if v["ids"]["uid"] != crate::ids::GUEST_UID {
        bad.push(format!("uid {}", v["ids"]["uid"]));
    }
    for k in ["CapEff", "CapPrm", "CapBnd"] {
        if v["caps"][k] != zero {
            bad.push(format!("{k} {}", v["caps"][k]));
        }
    }
    if v["no_new_privs"] != 1 {
        bad.push("no_new_privs off".into());
    }
    if v["seccomp"] != 2 {
        bad.push(format!("seccomp mode {}", v["seccomp"]));
    }
    if v["root_readonly"] != true {
        bad.push("root filesystem writable".into());
    }
    if v["network"]["internet_1_1_1_1_443"]["ok"] == true {
        bad.push("the internet is reachable".into());
    }
    if v["setid_files"].as_array().is_some_and(|a| !a.is_empty()) {
        bad.push("setuid/setgid files present".into());
    }
    if bad.is_empty() {
        check(
            "isolation",
            Verdict::Ok,
            "the guest's uid (no host account's), no capabilities, no_new_privs, seccomp filter, read-only root, no network (probe)",
        )
    } else {
        fail(
            "isolation",
            bad.join(", "),
            "the container is not hardened as expected: report this (host-cli's create body)",
        )
    }
}

/// What the local backend needs.
fn local_checks() -> Vec<Check> {
    let mut out = Vec::new();
    match guest::local::sandtopd_binary() {
        Ok(p) => out.push(check(
            "local",
            Verdict::Ok,
            format!(
                "sandtopd at {}; Xvfb {}, openbox {} (--backend local: no isolation)",
                p.display(),
                if guest::local::which("Xvfb").is_some() {
                    "found"
                } else {
                    "MISSING"
                },
                if guest::local::which("openbox").is_some() {
                    "found"
                } else {
                    "missing"
                },
            ),
        )),
        Err(_) => out.push(Check {
            name: "local",
            verdict: Verdict::Warn,
            detail: "sandtopd not found (only needed for --backend local)".into(),
            fix: Some("make guest installs it; or cargo install --path daemon --locked".into()),
        }),
    }
    out
}
