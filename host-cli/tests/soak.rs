//! The soak (docs/security.md L12): N steps of the real loop on one real guest
//! (Docker), the model being the mock Responses server, each step a
//! computer call (a pointer move) answered with a scaled screenshot,
//! responses chained with `previous_response_id`. What
//! must hold: the run finishes every step, the files held open by this
//! process (the loop's side) and by the guest's sandtopd do not grow, and
//! neither does memory beyond a bound; the figures go to stderr (for
//! BENCHMARKS.md). `SANDTOP_SOAK_STEPS` sets N: 300 in `make test`,
//! 10,000 in `make soak`.

#![allow(clippy::unwrap_used)]

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use host_cli::agent::approve::Approvals;
use host_cli::agent::model::{OpenAiModel, RetryPolicy};
use host_cli::agent::record::Recorder;
use host_cli::agent::runner::{
    ContextBudget, Ending, Interrupt, OnActionError, RunOptions, Runner,
};
use host_cli::agent::wire::ToolShape;
use host_cli::secret::Secret;
use host_cli::session::Store;
use sandtop_protocol::{ScreenshotOptions, Size};
use sandtop_testkit::mock_responses::{MockResponses, Reply, computer_call, move_to};
use sandtop_testkit::skip;

const HOST_CLI: &str = env!("CARGO_BIN_EXE_host-cli");

fn docker_ready() -> bool {
    skip::docker_guest()
}

/// Resident memory (KiB) and open files of a process, from /proc (`None`
/// where this process may not look).
fn usage_of(pid: &str) -> (Option<u64>, Option<usize>) {
    let rss = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|n| n.parse().ok())
        });
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .ok()
        .map(|d| d.count());
    (rss, fds)
}

/// The host pid of the guest's sandtopd (`docker top`).
fn daemon_pid(container: &str) -> Option<String> {
    let out = Command::new("docker")
        .args(["top", container, "-eo", "pid,comm"])
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find(|l| l.split_whitespace().nth(1) == Some("sandtopd"))
        .and_then(|l| l.split_whitespace().next())
        .map(str::to_string)
}

#[derive(Debug, Clone, Copy, Default)]
struct Sample {
    host_rss: Option<u64>,
    host_fds: Option<usize>,
    daemon_rss: Option<u64>,
    daemon_fds: Option<usize>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn soak_steps_on_one_guest_keep_files_and_memory_flat() {
    if !docker_ready() {
        return;
    }
    let steps: u32 = std::env::var("SANDTOP_SOAK_STEPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(300);
    let state = tempfile::tempdir().unwrap();
    let out = Command::new(HOST_CLI)
        .env("SANDTOP_STATE_DIR", state.path())
        .args(["guest", "start", "--name", "soak"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    /// Stops the guest however the test ends.
    struct Guest<'a>(&'a std::path::Path);
    impl Drop for Guest<'_> {
        fn drop(&mut self) {
            let _ = Command::new(HOST_CLI)
                .env("SANDTOP_STATE_DIR", self.0)
                .args(["guest", "stop", "soak"])
                .stdin(Stdio::null())
                .output();
        }
    }
    let guest = Guest(state.path());
    let store = Store::at(state.path().to_path_buf()).unwrap();
    let dir = store.get("soak").unwrap();
    let rec = dir.load().unwrap();
    let container = rec.docker().unwrap().container_id.clone();
    let pid = daemon_pid(&container).expect("sandtopd runs in the guest");
    let mut channel = host_cli::guest::open_channel(&dir, &rec).await.unwrap();

    let key = format!("sk-soak-{}", std::process::id());
    let mock = MockResponses::start(&key).await;
    mock.retain_last(2);
    for i in 0..steps {
        // In the 320x200 screenshot's space.
        let (x, y) = (i64::from(i * 37 % 300) + 10, i64::from(i * 53 % 180) + 10);
        mock.push(Reply::output(vec![computer_call(
            &format!("call_{i}"),
            vec![move_to(x, y)],
        )]));
    }
    mock.push(Reply::done("done"));
    let mut model = OpenAiModel::with_base_url(
        Secret::new(key.clone()),
        &mock.base_url(),
        false,
        RetryPolicy::default(),
    )
    .unwrap();
    let runs = tempfile::tempdir().unwrap();
    let mut recorder = Recorder::create(&runs.path().join("run")).unwrap();
    let mut op = Approvals::default();
    let opts = RunOptions {
        task: "Move the pointer around.".into(),
        model: "gpt-5.5".into(),
        shape: ToolShape::Computer,
        computer: true,
        browser: None,
        instructions: None,
        max_steps: steps + 1,
        max_duration: Some(Duration::from_secs(3600)),
        // Chained with previous_response_id: each request carries the new
        // items only, so what grows is what the loop keeps, not the
        // conversation it would otherwise resend (which grows by design
        // without storage, about 400 bytes of text per step once old
        // screenshots are dropped).
        store: true,
        stream: false,
        screenshot: ScreenshotOptions {
            size: Some(Size::new(320, 200)),
            ..ScreenshotOptions::default()
        },
        confirm_actions: false,
        ask_user: false,
        sign_in: false,
        initial_screenshot: true,
        context: ContextBudget {
            max_images: 1,
            max_bytes: 256 * 1024,
        },
        compaction: host_cli::agent::runner::Compaction::Off,
        on_action_error: OnActionError::Stop,
    };
    // Samples every second while the loop runs.
    let sampling = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let t0 = Instant::now();
    let sampler = {
        let (sampling, pid) = (std::sync::Arc::clone(&sampling), pid.clone());
        std::thread::spawn(move || {
            let mut samples = Vec::new();
            while sampling.load(std::sync::atomic::Ordering::Relaxed) {
                let (host_rss, host_fds) = usage_of("self");
                let (daemon_rss, daemon_fds) = usage_of(&pid);
                samples.push(Sample {
                    host_rss,
                    host_fds,
                    daemon_rss,
                    daemon_fds,
                });
                std::thread::sleep(Duration::from_millis(1000));
            }
            samples
        })
    };
    let outcome = {
        let mut runner = Runner::new(
            &mut model,
            &mut channel,
            &mut op,
            &mut recorder,
            opts,
            Interrupt::default(),
        );
        runner.run(None).await
    };
    sampling.store(false, std::sync::atomic::Ordering::Relaxed);
    let samples = sampler.join().unwrap();
    let wall = t0.elapsed();
    drop(guest);
    let outcome = outcome.unwrap();
    assert_eq!(outcome.ending, Ending::Finished, "{}", outcome.message);
    assert_eq!(outcome.steps, steps + 1);
    assert_eq!(mock.validation_errors(), Vec::<String>::new());

    // Flat: after the first tenth (warm-up: connections, caches, the
    // first screenshots), neither side holds more files, and memory grows
    // by less than a bound.
    assert!(samples.len() >= 3, "too short to sample: {samples:?}");
    let warm = &samples[samples.len() / 10];
    let last = samples.last().unwrap();
    eprintln!(
        "soak: {steps} steps in {wall:?} ({:.1} ms/step); samples {}",
        wall.as_secs_f64() * 1000.0 / f64::from(steps),
        samples.len()
    );
    eprintln!(
        "soak: loop side RSS {:?} -> {:?} KiB, files {:?} -> {:?}",
        warm.host_rss, last.host_rss, warm.host_fds, last.host_fds
    );
    eprintln!(
        "soak: sandtopd RSS {:?} -> {:?} KiB, files {:?} -> {:?}",
        warm.daemon_rss, last.daemon_rss, warm.daemon_fds, last.daemon_fds
    );
    let max_fds =
        |f: fn(&Sample) -> Option<usize>| samples[samples.len() / 10..].iter().filter_map(f).max();
    if let (Some(w), Some(m)) = (warm.host_fds, max_fds(|s| s.host_fds)) {
        assert!(m <= w + 8, "the loop's open files grew from {w} to {m}");
    }
    if let (Some(w), Some(m)) = (warm.daemon_fds, max_fds(|s| s.daemon_fds)) {
        assert!(m <= w + 8, "sandtopd's open files grew from {w} to {m}");
    }
    const BOUND_KIB: u64 = 64 * 1024;
    if let (Some(w), Some(l)) = (warm.host_rss, last.host_rss) {
        assert!(
            l <= w + BOUND_KIB,
            "the loop's memory grew from {w} to {l} KiB"
        );
    }
    if let (Some(w), Some(l)) = (warm.daemon_rss, last.daemon_rss) {
        assert!(
            l <= w + BOUND_KIB,
            "sandtopd's memory grew from {w} to {l} KiB"
        );
    }
}
