//! The guest image's Firefox configuration (`guest-image/firefox/`: the
//! enterprise policy `policies.json` and the locked default preferences
//! `sandtop-prefs.js`) keeps an idle Firefox off the network (docs/security.md
//! N10). Without it, Firefox's own background services (remote
//! settings, push, captive portal and connectivity checks, Safe Browsing
//! and plugin updates, region lookup, Normandy) each reach the guest's
//! egress proxy, where every one is a refusal in the journal and, under
//! `--network ask`, a question to the operator.
//!
//! How: the host's Debian Firefox ESR (the guest's package) is copied to
//! a temporary folder (a policy applies to an installation), once as it
//! is and once with the two files where the image puts them
//! (`distribution/policies.json`, and `/etc/firefox-esr/` which Debian's
//! Firefox reads through `browser/defaults/syspref`). Each copy runs
//! headless on a fresh profile with `http_proxy`/`https_proxy` pointing at
//! a recording proxy that refuses everything, as the guest's egress proxy
//! would: the plain copy asks within seconds (the control: the proxy and
//! the counting work), the configured one asks nothing in its window, as
//! a desktop Firefox and as the browser driver's (remote agent on).
//!
//! Needs firefox-esr installed with Debian's layout (`make deps`), else
//! `SKIP browser: ...`.

#![allow(clippy::unwrap_used)]

use std::io::{BufRead as _, BufReader, Write as _};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sandtop_testkit::skip;
use serde_json::Value;

/// Debian's Firefox ESR installation.
const INSTALL: &str = "/usr/lib/firefox-esr";

/// How long the configured Firefox is watched: the plain one asks within
/// 3 s of starting, and again at about 7, 17, 20 and 30 s.
const WINDOW: Duration = Duration::from_secs(35);

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn policies() -> Value {
    let text = std::fs::read_to_string(repo().join("guest-image/firefox/policies.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

#[test]
fn the_images_firefox_policy_parses_and_turns_the_background_services_off() {
    let p = policies();
    let p = &p["policies"];
    for (name, want) in [
        ("DisableTelemetry", true),
        ("DisableFirefoxStudies", true),
        ("DisableFirefoxAccounts", true),
        ("DisableAppUpdate", true),
        ("DisableSystemAddonUpdate", true),
        ("DisableRemoteImprovements", true),
        ("DisableRemoteSettingsAndAcceptSecurityConsequences", true),
        ("CaptivePortal", false),
        ("NetworkPrediction", false),
        ("NewTabPage", false),
        ("TranslateEnabled", false),
    ] {
        assert_eq!(p[name], Value::Bool(want), "{name}");
    }
    assert_eq!(p["EncryptedMediaExtensions"]["Enabled"], false);
    assert_eq!(p["FirefoxSuggest"]["OnlineEnabled"], false);
    // The proxy stays the system's (the egress proxy), locked.
    assert_eq!(p["Proxy"]["Mode"], "system");
    assert_eq!(p["Proxy"]["Locked"], true);
    let prefs = p["Preferences"].as_object().unwrap();
    for (name, want) in [
        ("network.connectivity-service.enabled", Value::Bool(false)),
        ("network.captive-portal-service.enabled", Value::Bool(false)),
        ("dom.push.connection.enabled", Value::Bool(false)),
        ("browser.safebrowsing.malware.enabled", Value::Bool(false)),
        ("browser.safebrowsing.phishing.enabled", Value::Bool(false)),
        ("browser.safebrowsing.provider.google4.updateURL", "".into()),
        ("browser.safebrowsing.provider.mozilla.updateURL", "".into()),
        ("browser.region.network.url", "".into()),
        ("geo.provider.network.url", "".into()),
        ("media.gmp-manager.updateEnabled", Value::Bool(false)),
        ("extensions.update.enabled", Value::Bool(false)),
    ] {
        assert_eq!(prefs[name]["Value"], want, "{name}");
        assert_eq!(prefs[name]["Status"], "locked", "{name}");
    }
    // What a policy may not set is in the locked default preferences.
    let js = std::fs::read_to_string(repo().join("guest-image/firefox/sandtop-prefs.js")).unwrap();
    let lines: Vec<&str> = js
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with("//"))
        .collect();
    assert!(!lines.is_empty());
    for l in &lines {
        assert!(
            l.starts_with("pref(\"") && l.ends_with(", locked);"),
            "not a locked pref: {l}"
        );
    }
    assert!(js.contains("pref(\"app.normandy.enabled\", false, locked);"));
    // And the image build installs both where Firefox reads them.
    let build = std::fs::read_to_string(repo().join("guest-image/build.sh")).unwrap();
    assert!(build.contains(
        "guest-image/firefox/policies.json\" \"$ROOTFS/usr/share/firefox-esr/distribution/\""
    ));
    assert!(
        build.contains(
            "guest-image/firefox/sandtop-prefs.js\" \"$ROOTFS/etc/firefox-esr/sandtop.js\""
        )
    );
}

/// A proxy that records each request's first line and refuses it.
struct Recorder {
    port: u16,
    seen: Arc<Mutex<Vec<String>>>,
}

impl Recorder {
    fn start() -> Recorder {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = Arc::clone(&seen);
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { continue };
                let s = Arc::clone(&s);
                std::thread::spawn(move || {
                    let _ = conn.set_read_timeout(Some(Duration::from_secs(5)));
                    let mut r = BufReader::new(conn.try_clone().unwrap());
                    let mut first = String::new();
                    if r.read_line(&mut first).is_err() || first.is_empty() {
                        return;
                    }
                    s.lock().unwrap().push(first.trim().to_string());
                    let _ = conn.write_all(
                        b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                    );
                });
            }
        });
        Recorder { port, seen }
    }

    fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

/// A headless Firefox of the installation `install` on a fresh profile,
/// its traffic sent to `proxy`; the remote agent on when `driver`.
struct Firefox {
    child: Child,
    _profile: tempfile::TempDir,
}

impl Firefox {
    fn start(install: &Path, proxy: &Recorder, driver: bool) -> Firefox {
        let profile = tempfile::tempdir().unwrap();
        let url = format!("http://127.0.0.1:{}", proxy.port);
        let mut c = Command::new(install.join("firefox-esr"));
        c.args(["--headless", "--new-instance", "--profile"])
            .arg(profile.path());
        if driver {
            c.args(["--remote-debugging-port", "0"]);
        }
        c.arg("about:blank")
            .env("http_proxy", &url)
            .env("https_proxy", &url)
            .env("HTTP_PROXY", &url)
            .env("HTTPS_PROXY", &url)
            .env_remove("no_proxy")
            .env_remove("NO_PROXY")
            .env_remove("MOZ_REMOTE_SETTINGS_DEVTOOLS")
            .env("MOZ_CRASHREPORTER_DISABLE", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        Firefox {
            child: c.spawn().unwrap(),
            _profile: profile,
        }
    }
}

impl Drop for Firefox {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `cp -rL INSTALL DEST`: the installation with Debian's links resolved
/// (its `distribution` and `browser/defaults/syspref` become folders of
/// the copy's own).
fn copy_install(dest: &Path) {
    let st = Command::new("cp")
        .arg("-rL")
        .arg(INSTALL)
        .arg(dest)
        .status()
        .unwrap();
    assert!(st.success(), "cp -rL {INSTALL} failed");
}

#[test]
fn an_idle_firefox_with_the_images_policy_asks_the_network_for_nothing() {
    let syspref = Path::new(INSTALL).join("browser/defaults/syspref");
    if !Path::new(INSTALL).join("firefox-esr").is_file() || !syspref.is_dir() {
        skip::skip(
            "browser",
            "firefox-esr with Debian's layout is not installed (make deps installs it)",
        );
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let install = tmp.path().join("firefox-esr");
    copy_install(&install);

    // The control: as packaged, an idle Firefox asks at once.
    let plain = Recorder::start();
    {
        let _ff = Firefox::start(&install, &plain, false);
        let end = Instant::now() + Duration::from_secs(30);
        while plain.seen().is_empty() && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    assert!(
        !plain.seen().is_empty(),
        "the plain Firefox asked nothing: the recording proxy is not reached, so the check below would prove nothing"
    );

    // With the image's two files where the image puts them.
    let dist = install.join("distribution");
    std::fs::create_dir_all(&dist).unwrap();
    std::fs::copy(
        repo().join("guest-image/firefox/policies.json"),
        dist.join("policies.json"),
    )
    .unwrap();
    std::fs::copy(
        repo().join("guest-image/firefox/sandtop-prefs.js"),
        install.join("browser/defaults/syspref/sandtop.js"),
    )
    .unwrap();
    let desktop = Recorder::start();
    let driver = Recorder::start();
    {
        let _a = Firefox::start(&install, &desktop, false);
        let _b = Firefox::start(&install, &driver, true);
        std::thread::sleep(WINDOW);
    }
    assert_eq!(
        desktop.seen(),
        Vec::<String>::new(),
        "the desktop's idle Firefox asked the network (plain, it asked: {:?})",
        plain.seen()
    );
    assert_eq!(
        driver.seen(),
        Vec::<String>::new(),
        "the driver's idle Firefox asked the network"
    );
}
