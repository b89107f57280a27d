//! The harness of the E tier's test binaries (`tests/e2e.rs`,
//! `tests/network.rs`; both `harness = false`), on `libtest-mimic`.
//!
//! Why its own harness: the cases of one binary share one world (a Docker
//! backend and state directory; for the network tier also a test network,
//! a fake internet and two booted guests) that is set up once, before the
//! first case, and torn down and checked after the last one. libtest has
//! no such hook, and booting a guest per `#[test]` would take minutes more
//! on a 2-core host. libtest-mimic gives the rest of libtest's command
//! line, so these binaries take the same arguments as every other test
//! binary of the workspace: a name filter (`cargo test --test e2e --
//! batched_form`), `--exact`, `--skip`, `--list`, `--ignored`,
//! `--include-ignored`.
//!
//! How a run goes:
//! 1. The command line is read; `--list` lists the cases and stops.
//! 2. When the filters leave no case to run, the world is not set up.
//! 3. Otherwise the world is set up (a Tokio runtime, a temporary folder,
//!    then the suite's `setup`); `Ok(None)` means the tier is skipped (the
//!    reason printed by `sandtop_testkit::skip`, which panics instead when
//!    `SANDTOP_REQUIRE` lists the tier).
//! 4. The cases run one after the other in the order given (one test
//!    thread: they share the world, and a 2-core host runs them faster
//!    that way than racing), each on the runtime in a task of its own, so
//!    a panic fails that case only.
//! 5. Each case's time is printed, then the suite's `finish` tears the
//!    world down and returns what is left of the run: the final check,
//!    printed as one more test line (`test <check> ... ok`).
//! 6. The last line is `<suite> result: ok` or `<suite> result: FAILED:
//!    <names>`.

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::process::ExitCode;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use libtest_mimic::{Arguments, Failed, Trial};
use tokio::runtime::Runtime;

/// One case: an async function of the shared world.
pub type CaseFn<W> = fn(Arc<W>) -> Pin<Box<dyn Future<Output = anyhow::Result<()>> + Send>>;

/// A case of a suite, in the order it runs.
#[derive(Debug)]
pub struct Case<W> {
    pub name: &'static str,
    pub run: CaseFn<W>,
    /// Why the case is ignored (a reported product bug); it then runs only
    /// with `--ignored` or `--include-ignored`.
    pub ignored: Option<&'static str>,
}

impl<W> Case<W> {
    pub fn new(name: &'static str, run: CaseFn<W>) -> Case<W> {
        Case {
            name,
            run,
            ignored: None,
        }
    }

    /// The same case, ignored for `reason` when `reason` is `Some`.
    pub fn ignored_because(mut self, reason: Option<&'static str>) -> Case<W> {
        self.ignored = reason;
        self
    }
}

/// The cases named, in that order: `cases![a, b]` for `async fn a(w:
/// Arc<W>) -> anyhow::Result<()>`.
#[macro_export]
macro_rules! cases {
    ($($name:ident),* $(,)?) => {
        vec![$($crate::harness::Case::new(
            stringify!($name),
            (|w| Box::pin($name(w))) as $crate::harness::CaseFn<_>,
        )),*]
    };
}

/// A suite: its name (`<name> result: ok`), the name of its final check,
/// its cases.
#[derive(Debug)]
pub struct Suite<W> {
    pub name: &'static str,
    pub final_check: &'static str,
    pub cases: Vec<Case<W>>,
}

impl<W: Send + Sync + 'static> Suite<W> {
    /// Runs the suite as the binary's `main` (see the module's steps).
    /// `setup` gets the runtime and a temporary folder that lives until
    /// the end of the run; `finish` gets the world back after the last
    /// case and returns what is left of the run (empty: nothing).
    pub fn run<S, F>(self, setup: S, finish: F) -> ExitCode
    where
        S: FnOnce(&Runtime, &Path) -> anyhow::Result<Option<W>>,
        F: FnOnce(&Runtime, Arc<W>) -> anyhow::Result<Vec<String>>,
    {
        let Suite {
            name: suite,
            final_check,
            cases,
        } = self;
        let mut args = Arguments::from_args();
        args.test_threads = Some(1);

        // 1. and 2.: what would run, without the world.
        let placeholders = || -> Vec<Trial> {
            cases
                .iter()
                .map(|c| Trial::test(c.name, || Ok(())).with_ignored_flag(c.ignored.is_some()))
                .collect()
        };
        if args.list {
            let _ = libtest_mimic::run(&args, placeholders());
            return ExitCode::SUCCESS;
        }
        let selected = placeholders()
            .iter()
            .filter(|t| !args.is_filtered_out(t) && !args.is_ignored(t))
            .count();
        for c in &cases {
            if let Some(reason) = c.ignored {
                println!("{suite}: {} is ignored: {reason}", c.name);
            }
        }
        if selected == 0 {
            println!("{suite}: no case selected; nothing set up");
            // Placeholders run nothing and cannot fail.
            let _ = libtest_mimic::run(&args, placeholders());
            return result_line(suite, &[]);
        }

        // 3. The world.
        let rt = match tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
        {
            Ok(rt) => rt,
            Err(e) => {
                eprintln!("{suite}: cannot start a runtime: {e}");
                return ExitCode::FAILURE;
            }
        };
        let tmp = match tempfile::Builder::new()
            .prefix(&format!("sandtop-{suite}-"))
            .tempdir()
        {
            Ok(t) => t,
            Err(e) => {
                eprintln!("{suite}: no temporary folder: {e}");
                return ExitCode::FAILURE;
            }
        };
        let world = match setup(&rt, tmp.path()) {
            Ok(Some(w)) => Arc::new(w),
            Ok(None) => return ExitCode::SUCCESS, // skipped, reason printed
            Err(e) => {
                eprintln!("{suite}: setup failed: {e:#}");
                return ExitCode::FAILURE;
            }
        };

        // 4. The cases.
        let times: Arc<Mutex<Vec<(&'static str, f64)>>> = Arc::default();
        let failed: Arc<Mutex<Vec<&'static str>>> = Arc::default();
        let trials = cases
            .into_iter()
            .map(|c| {
                let (world, times, failed) =
                    (Arc::clone(&world), Arc::clone(&times), Arc::clone(&failed));
                let handle = rt.handle().clone();
                let (name, run) = (c.name, c.run);
                Trial::test(name, move || {
                    let t = Instant::now();
                    let r = handle.block_on(async move { tokio::spawn(run(world)).await });
                    let secs = t.elapsed().as_secs_f64();
                    lock(&times).push((name, secs));
                    let msg = match r {
                        Ok(Ok(())) => return Ok(()),
                        Ok(Err(e)) => format!("{e:#} ({secs:.1} s)"),
                        Err(e) => format!("panicked: {e} ({secs:.1} s)"),
                    };
                    lock(&failed).push(name);
                    Err(Failed::from(msg))
                })
                .with_ignored_flag(c.ignored.is_some())
            })
            .collect();
        let _ = libtest_mimic::run(&args, trials);

        // 5. Times, then the final check. The trials (and their handles on
        // the world) are gone: `finish` holds the only one unless a case
        // left a task behind.
        let times = std::mem::take(&mut *lock(&times));
        if !times.is_empty() {
            println!("{suite} case times:");
            let width = times.iter().map(|(n, _)| n.len()).max().unwrap_or(0);
            for (name, secs) in &times {
                println!("  {name:<width$} {secs:7.1} s");
            }
        }
        let mut failed = std::mem::take(&mut *lock(&failed));
        match finish(&rt, world) {
            Ok(left) if left.is_empty() => println!("test {final_check} ... ok"),
            Ok(left) => {
                println!("test {final_check} ... FAILED\n  left: {left:?}");
                failed.push(final_check);
            }
            Err(e) => {
                println!("test {final_check} ... FAILED\n  {e:#}");
                failed.push(final_check);
            }
        }
        drop(rt);
        drop(tmp);

        // 6.
        result_line(suite, &failed)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A poisoned lock only means a runner panicked after pushing.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn result_line(suite: &str, failed: &[&str]) -> ExitCode {
    if failed.is_empty() {
        println!("\n{suite} result: ok");
        ExitCode::SUCCESS
    } else {
        println!("\n{suite} result: FAILED: {}", failed.join(", "));
        ExitCode::FAILURE
    }
}
