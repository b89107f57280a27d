//! Replay of a run folder (`host-cli replay RUN [--session S] [--until N]`): did it do the same?
//!
//! 1. [`plan`]: the inputs of a run folder that reached the desktop (the
//!    model's computer calls that ran, the operator's actions), each with
//!    the screenshot recorded after it.
//! 2. A fresh guest of the recorded screen's size (or session S), its
//!    screen left to settle; then each input through the same action API
//!    and its checks (the model's coordinate space included:
//!    `expect_scale_map`).
//! 3. Each resulting screen against the recorded one ([`diff`]: cells, a
//!    stated threshold, the panel's clock and any `--ignore` rectangle
//!    left out). A slower guest gets `--patience` for the screen to become
//!    the recorded one, counted from the screen's last change (a program
//!    still starting gets more), never past `--patience-cap`; what shows after the `wait`-only inputs that
//!    follow an input is a matter of time, so the screen may also match
//!    the recorded one of such a later input (a faster guest), and the
//!    replay skips ahead; it may match one recorded after the next input
//!    (the recording caught a screen still changing, which the replay has
//!    passed), and the replay sends that input next (`candidates`).
//! 4. The first divergence stops it: the step, the regions that differ,
//!    both screenshots in the output folder; exit 7. Exit 0 only when every
//!    compared step matched; 1 on an error.

pub mod diff;
mod error;
pub mod plan;

pub use error::Error;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Args;
use sandtop_protocol::{BatchRequest, Rect, ScaleMap, Screenshot, ScreenshotOptions, Size};

use sandtop_channel::Channel;
use sandtop_channel::image_check::{Rgb8, check_screenshot, decode_png};
use sandtop_guest::session::lock_session;
use sandtop_guest::session::{BackendKind, Store};
use sandtop_pool::acquire::session_for;

/// The exit status of a replay that diverged.
pub const DIVERGED: u8 = 7;

/// `host-cli replay`.
#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// The run folder to replay (its trajectory.jsonl and screenshots).
    pub run: PathBuf,
    /// Replay on this running session (default: a fresh guest, removed
    /// after). Its screen must start as the recorded run's did.
    #[arg(long)]
    pub session: Option<String>,
    /// Stop after this step (the model's request number).
    #[arg(long)]
    pub until: Option<u32>,
    /// How long a screen may take to become the recorded one, counted
    /// from its last change: while the screen is still changing (a
    /// program still starting) the wait goes on, up to `--patience-cap`.
    #[arg(long, default_value = "15s", value_parser = sandtop_hostkit::units::parse_duration)]
    pub patience: Duration,
    /// The longest wait for one screen, however long it keeps changing
    /// (at least `--patience`).
    #[arg(long, default_value = "60s", value_parser = sandtop_hostkit::units::parse_duration)]
    pub patience_cap: Duration,
    /// Keep the guest this replay boots.
    #[arg(long)]
    pub keep: bool,
    /// Leave this rectangle of the screen out of every comparison
    /// (`X,Y,W,H` in screen pixels; repeat for more): a part that shows
    /// the time or other content no run controls. The clock on the panel
    /// is always left out.
    #[arg(long, value_name = "X,Y,W,H", value_parser = parse_rect)]
    pub ignore: Vec<Rect>,
    /// Where the replay's screenshots go (default: RUN/replay-<unix time>).
    #[arg(short = 'o', long)]
    pub out: Option<PathBuf>,
    #[command(flatten)]
    pub guest: sandtop_guest::options::GuestArgs,
}

/// The screen a replay's guest gets: the recorded run's.
pub fn screen_of(plan: &plan::Plan) -> Size {
    plan.initial
        .as_ref()
        .map(|(_, m)| m.screen)
        .or_else(|| plan.inputs.iter().find_map(|i| i.expect.map(|m| m.screen)))
        .unwrap_or(Size::new(1280, 800))
}

pub async fn replay(a: ReplayArgs) -> Result<ExitCode, Error> {
    let plan = plan::plan(&a.run)?;
    let screen = screen_of(&plan);
    let out = a.out.clone().unwrap_or_else(|| {
        a.run
            .join(format!("replay-{}", sandtop_guest::session::now_unix()))
    });
    std::fs::create_dir_all(&out).map_err(Error::io(format!("creating {}", out.display())))?;
    let store = Store::open().map_err(sandtop_guest::GuestError::from)?;
    let t0 = Instant::now();
    let (dir, rec, booted) = session_for(
        &store,
        a.session.as_deref(),
        BackendKind::Docker,
        (screen, &a.guest),
        (a.keep, false),
        sandtop_egress::service::EgressConfig::none(),
    )
    .await?;
    let result = async {
        let _lock = lock_session(&dir).map_err(sandtop_guest::GuestError::from)?;
        let mut ch = sandtop_guest::open_channel(&dir, &rec).await?;
        Replayer {
            run: &a.run,
            out: &out,
            plan: &plan,
            patience: Patience::new(a.patience, a.patience_cap),
            until: a.until,
            ignore: &a.ignore,
        }
        .run(&mut ch)
        .await
    }
    .await;
    if let Some(b) = booted {
        b.remove().await;
    }
    let diverged = result?;
    let took = t0.elapsed().as_secs_f64();
    Ok(match diverged {
        None => {
            sandtop_hostkit::out!("replay: every step matched ({took:.1} s)");
            ExitCode::SUCCESS
        }
        Some(step) => {
            sandtop_hostkit::out!(
                "replay: diverged at step {step} ({took:.1} s); screenshots in {}",
                out.display()
            );
            ExitCode::from(DIVERGED)
        }
    })
}

struct Replayer<'a> {
    run: &'a Path,
    out: &'a Path,
    plan: &'a plan::Plan,
    patience: Patience,
    until: Option<u32>,
    /// Screen rectangles left out (`--ignore`).
    ignore: &'a [Rect],
}

/// How a screen compared with the recorded ones.
enum Compared {
    /// The recorded screen of this input (index), and the screen.
    Same(usize, Box<Screenshot>),
    /// It never became it; the regions of the last difference, and how
    /// long it was waited for.
    Diverged(Vec<Rect>, Duration),
}

impl Replayer<'_> {
    /// Replays; the step that diverged, if one did.
    async fn run(&self, ch: &mut Channel) -> Result<Option<u32>, Error> {
        let clock = self.clock(ch, self.plan.started_ms).await?;
        let result = self.steps(ch, clock).await;
        if clock {
            // A session kept or reused runs on in real time.
            if let Err(e) = ch.set_clock(None).await {
                tracing::warn!(error = %e, "setting the guest's clock back");
            }
        }
        result
    }

    /// Shows the guest's programs the recorded time `at` (when the
    /// recording has one); whether the guest keeps a fake clock.
    async fn clock(&self, ch: &mut Channel, at: Option<u64>) -> Result<bool, Error> {
        let Some(t) = at else {
            return Ok(true);
        };
        match ch.set_clock(Some(t)).await.map_err(Error::daemon(
            "setting the guest's clock to the recorded time",
        ))? {
            Some(_) => Ok(true),
            None => {
                sandtop_hostkit::out!(
                    "replay: the guest keeps no fake clock (an image older than host-cli?): \
                     its programs show the real time"
                );
                Ok(false)
            }
        }
    }

    async fn steps(&self, ch: &mut Channel, mut clock: bool) -> Result<Option<u32>, Error> {
        self.settle(ch).await?;
        let inputs = &self.plan.inputs;
        let mut k = 0;
        while k < inputs.len() {
            let input = &inputs[k];
            if self.until.is_some_and(|u| input.step > u) {
                break;
            }
            // The screens were recorded with the run's options; the
            // operator's actions are in screen pixels (the default
            // options' space), so their screen is taken apart.
            let options = self.plan.screenshot;
            let mut req = BatchRequest::new(
                input.actions.clone(),
                input
                    .expect
                    .map_or(ScreenshotOptions::default(), |_| options),
            );
            req.expect_scale_map = input.expect;
            req.final_screenshot = input.expect.is_some() && input.after.is_some();
            if clock {
                clock = self.clock(ch, input.at_ms).await?;
            }
            let reply = ch.act(&req).await.map_err(|source| Error::Daemon {
                doing: format!(
                    "step {} ({}): the daemon refused the recorded actions",
                    input.step, input.who
                ),
                source,
            })?;
            let Some(_) = &input.after else {
                k += 1;
                continue;
            };
            let shot = match reply.screenshot {
                Some(s) => s,
                None => grab(ch, options).await?.0,
            };
            match self.compare(ch, shot, k, options).await? {
                Compared::Same(j, shot) => {
                    // The input to send next: after the one matched, or,
                    // when the screen was one recorded past the next
                    // input, that input (it still has to run).
                    let next = match next_input(inputs, k, self.until) {
                        Some(n) if j >= n => n,
                        _ => j + 1,
                    };
                    // For `host-cli report RUN --replay OUT`: the screen
                    // after this input (and after the waits it caught up).
                    for i in &inputs[k..next.min(j + 1)] {
                        save(
                            self.out,
                            &sandtop_report::replayed_name(i.step, &i.who),
                            &shot,
                        )?;
                    }
                    if next <= j {
                        sandtop_hostkit::out!(
                            "step {:>3} {}: matches the screen recorded at step {}, after the next input (the recording caught the screen still changing before it)",
                            input.step,
                            input.who,
                            inputs[j].step
                        );
                    } else if j > k {
                        sandtop_hostkit::out!(
                            "step {:>3} {}: matches the screen recorded at step {} (its waits passed sooner)",
                            input.step,
                            input.who,
                            inputs[j].step
                        );
                    } else {
                        sandtop_hostkit::out!("step {:>3} {}: same screen", input.step, input.who);
                    }
                    k = next;
                }
                Compared::Diverged(regions, waited) => {
                    let list: Vec<String> = regions
                        .iter()
                        .map(|r| format!("{}x{} at ({}, {})", r.width, r.height, r.x, r.y))
                        .collect();
                    sandtop_hostkit::out!(
                        "step {:>3} {}: DIVERGED after {:.0} s: {} region(s) differ: {}",
                        input.step,
                        input.who,
                        waited.as_secs_f64(),
                        regions.len(),
                        list.join(", ")
                    );
                    return Ok(Some(input.step));
                }
            }
        }
        Ok(None)
    }

    /// Waits until the screen stops changing (the panel drawn, windows
    /// mapped), at most the patience's cap.
    async fn settle(&self, ch: &mut Channel) -> Result<(), Error> {
        let end = Instant::now() + self.patience.cap;
        let mut last = grab(ch, ScreenshotOptions::default()).await?;
        while Instant::now() < end {
            tokio::time::sleep(Duration::from_millis(500)).await;
            let now = grab(ch, ScreenshotOptions::default()).await?;
            let same = diff::compare(&last.1, &now.1, &self.left_out(&now.0.scale_map))
                .map(|d| d.matches())
                .unwrap_or(false);
            if same {
                return Ok(());
            }
            last = now;
        }
        Ok(())
    }

    /// The screen after input `k` against the recorded one and the later
    /// ones it may match ([`candidates`]: those recorded in another
    /// coordinate space, the model's against the operator's, are not
    /// compared); taken again until one matches or the patience runs out.
    async fn compare(
        &self,
        ch: &mut Channel,
        shot: Screenshot,
        k: usize,
        options: ScreenshotOptions,
    ) -> Result<Compared, Error> {
        let inputs = &self.plan.inputs;
        let mut recorded = Vec::new();
        let space = |i: &plan::Input| i.expect.map(|m| m.image);
        for j in candidates(inputs, k, self.until)
            .into_iter()
            .filter(|&j| space(&inputs[j]) == space(&inputs[k]))
        {
            let file = inputs[j].after.as_deref().unwrap_or_default();
            recorded.push((j, self.recorded(file, shot.scale_map.image)?));
        }
        let ignore = self.left_out(&shot.scale_map);
        let mut wait = self.patience.start(Instant::now());
        let mut now = (shot.clone(), decode(&shot)?);
        loop {
            let mut first = None;
            for (j, rec) in &recorded {
                let d = diff::compare(&now.1, rec, &ignore)
                    .map_err(|why| Error::screenshot("comparing the screens", why))?;
                if d.matches() {
                    return Ok(Compared::Same(*j, Box::new(now.0)));
                }
                first.get_or_insert(d);
            }
            if Instant::now() >= wait.deadline() {
                let (step, who) = (inputs[k].step, &inputs[k].who);
                let replayed = sandtop_report::replayed_name(step, who);
                save(self.out, &replayed, &now.0)?;
                let file = inputs[k].after.as_deref().unwrap_or_default();
                let recorded_copy = replayed.replace("-replayed.png", "-recorded.png");
                std::fs::copy(self.run.join(file), self.out.join(&recorded_copy))
                    .map_err(Error::io(format!("copying {file} to {recorded_copy}")))?;
                return Ok(Compared::Diverged(
                    first.map(|d| d.regions).unwrap_or_default(),
                    wait.waited(Instant::now()),
                ));
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
            let next = grab(ch, options).await?;
            // Still changing: the patience counts from now.
            let moved = diff::compare(&now.1, &next.1, &ignore)
                .map(|d| !d.matches())
                .unwrap_or(true);
            if moved {
                wait.changed(Instant::now());
            }
            now = next;
        }
    }

    /// The rectangles of `map`'s image left out: the clock, `--ignore`.
    fn left_out(&self, map: &ScaleMap) -> Vec<Rect> {
        let mut out = clock(map);
        out.extend(self.ignore.iter().filter_map(|r| to_image(map, *r)));
        out
    }

    fn recorded(&self, file: &str, size: Size) -> Result<Rgb8, Error> {
        if file.contains('/') || !file.ends_with(".png") {
            return Err(Error::screenshot(
                &format!("the recording's screenshot `{file}`"),
                "not a PNG of the run folder (replay compares PNG screenshots)",
            ));
        }
        let bytes = std::fs::read(self.run.join(file))
            .map_err(Error::io(format!("reading {file} from the run folder")))?;
        decode_png(&bytes, size).map_err(|e| Error::screenshot(file, e))
    }
}

/// The last of the waits-only inputs with a recorded screen (within
/// `until`) that follow input `k` without a gap (`k` when none): the end
/// of the stretch whose screens are a matter of time.
fn waits_after(inputs: &[plan::Input], k: usize, until: Option<u32>) -> usize {
    let mut end = k;
    while end + 1 < inputs.len()
        && inputs[end + 1].waits_only()
        && inputs[end + 1].after.is_some()
        && until.is_none_or(|u| inputs[end + 1].step <= u)
    {
        end += 1;
    }
    end
}

/// The input after input `k`'s stretch of waits (see [`candidates`]),
/// when there is one to replay with a recorded screen.
fn next_input(inputs: &[plan::Input], k: usize, until: Option<u32>) -> Option<usize> {
    let n = waits_after(inputs, k, until) + 1;
    (n < inputs.len() && inputs[n].after.is_some() && until.is_none_or(|u| inputs[n].step <= u))
        .then_some(n)
}

/// The recorded screens (indices of `inputs`) that the screen after input
/// `k` may match, in the order they are tried:
///
/// 1. its own;
/// 2. those after the waits-only inputs that follow it: what shows after
///    a wait is a matter of time, and a faster guest may show it already;
/// 3. those after the next input and its own waits: a recording that
///    caught the screen still changing (a page still loading, a window's
///    title not yet updated: on a loaded machine, for seconds) shows a
///    screen that a faster replay has already passed, and the screen it
///    settled on shows in the recording only after the next input, when
///    that input had not changed it yet (a program it starts still
///    starting). The replay then sends that input, whose screen is
///    compared in turn: no input goes unchecked.
fn candidates(inputs: &[plan::Input], k: usize, until: Option<u32>) -> Vec<usize> {
    let mut out: Vec<usize> = (k..=waits_after(inputs, k, until)).collect();
    if let Some(n) = next_input(inputs, k, until) {
        out.extend(n..=waits_after(inputs, n, until));
    }
    out
}

/// How long a replay waits for a screen: `patience` from the screen's
/// last change, never more than `cap` from the input.
#[derive(Debug, Clone, Copy)]
pub struct Patience {
    pub patience: Duration,
    pub cap: Duration,
}

impl Patience {
    /// The cap is at least the patience.
    pub fn new(patience: Duration, cap: Duration) -> Patience {
        Patience {
            patience,
            cap: cap.max(patience),
        }
    }

    /// A wait that starts at `at`.
    pub fn start(&self, at: Instant) -> Wait {
        Wait {
            rule: *self,
            start: at,
            last_change: at,
        }
    }
}

/// One screen's wait (see [`Patience`]).
#[derive(Debug, Clone, Copy)]
pub struct Wait {
    rule: Patience,
    start: Instant,
    last_change: Instant,
}

impl Wait {
    /// The screen changed at `at`.
    pub fn changed(&mut self, at: Instant) {
        self.last_change = self.last_change.max(at);
    }

    /// When the wait ends.
    pub fn deadline(&self) -> Instant {
        (self.last_change + self.rule.patience).min(self.start + self.rule.cap)
    }

    /// How long it has waited at `now`.
    pub fn waited(&self, now: Instant) -> Duration {
        now.saturating_duration_since(self.start)
    }
}

/// `X,Y,W,H`, screen pixels, W and H at least 1.
fn parse_rect(s: &str) -> Result<Rect, String> {
    let v: Vec<u32> = s
        .split(',')
        .map(|p| p.trim().parse::<u32>())
        .collect::<Result<_, _>>()
        .map_err(|_| format!("`{s}` is not X,Y,W,H (four whole numbers)"))?;
    match v[..] {
        [x, y, width, height] if width > 0 && height > 0 => Ok(Rect {
            x,
            y,
            width,
            height,
        }),
        _ => Err(format!("`{s}` is not X,Y,W,H with W and H at least 1")),
    }
}

/// The clock's rectangle in the image of `map` (a replay ignores it).
pub fn clock(map: &ScaleMap) -> Vec<Rect> {
    to_image(map, sandtop_protocol::desktop::clock_rect(map.screen))
        .into_iter()
        .collect()
}

/// A screen rectangle in the image of `map` (clipped to its region).
fn to_image(map: &ScaleMap, c: Rect) -> Option<Rect> {
    let r = map.region;
    let (x0, y0) = (c.x.max(r.x), c.y.max(r.y));
    let (x1, y1) = (
        (c.x + c.width).min(r.x + r.width),
        (c.y + c.height).min(r.y + r.height),
    );
    if x0 >= x1 || y0 >= y1 || r.width == 0 || r.height == 0 {
        return None;
    }
    let sx = |x: u32| (u64::from(x - r.x) * u64::from(map.image.width) / u64::from(r.width)) as u32;
    let sy =
        |y: u32| (u64::from(y - r.y) * u64::from(map.image.height) / u64::from(r.height)) as u32;
    Some(Rect {
        x: sx(x0),
        y: sy(y0),
        width: sx(x1) - sx(x0),
        height: sy(y1) - sy(y0),
    })
}

async fn grab(ch: &mut Channel, options: ScreenshotOptions) -> Result<(Screenshot, Rgb8), Error> {
    let s = ch
        .screenshot(&options)
        .await
        .map_err(Error::daemon("taking a screenshot of the replay's guest"))?
        .screenshot;
    let img = decode(&s)?;
    Ok((s, img))
}

fn decode(s: &Screenshot) -> Result<Rgb8, Error> {
    let what = "the replay's screenshot";
    let bytes = check_screenshot(s).map_err(|why| Error::screenshot(what, why))?;
    decode_png(&bytes, Size::new(s.width, s.height)).map_err(|e| Error::screenshot(what, e))
}

fn save(dir: &Path, name: &str, s: &Screenshot) -> Result<(), Error> {
    let bytes = check_screenshot(s).map_err(|why| Error::screenshot(name, why))?;
    std::fs::write(dir.join(name), bytes).map_err(Error::io(format!("writing {name}")))
}

#[cfg(test)]
mod tests {
    use sandtop_protocol::Action;

    use super::*;

    #[test]
    fn patience_counts_from_the_last_change_up_to_the_cap() {
        let s = |n: u64| Duration::from_secs(n);
        let t0 = Instant::now();
        let mut w = Patience::new(s(15), s(60)).start(t0);
        // A still screen: the patience from the input.
        assert_eq!(w.deadline(), t0 + s(15));
        // Still changing at 10 s and 30 s: 15 s from the last change.
        w.changed(t0 + s(10));
        assert_eq!(w.deadline(), t0 + s(25));
        w.changed(t0 + s(30));
        assert_eq!(w.deadline(), t0 + s(45));
        // Never past the cap, however long it changes.
        w.changed(t0 + s(55));
        assert_eq!(w.deadline(), t0 + s(60));
        // An earlier change reported late moves nothing back.
        w.changed(t0 + s(1));
        assert_eq!(w.deadline(), t0 + s(60));
        assert_eq!(w.waited(t0 + s(61)), s(61));
        // A cap below the patience is the patience.
        let w = Patience::new(s(15), s(5)).start(t0);
        assert_eq!(w.deadline(), t0 + s(15));
    }

    /// Inputs of steps 1.. from a pattern: `w` waits only, `i` an input
    /// (a key), `-` waits only with no recorded screen.
    fn inputs(pattern: &str) -> Vec<plan::Input> {
        pattern
            .chars()
            .enumerate()
            .map(|(n, c)| plan::Input {
                step: n as u32 + 1,
                who: format!("call_{}", n + 1),
                actions: vec![if c == 'i' {
                    Action::Keypress {
                        keys: vec!["ENTER".into()],
                    }
                } else {
                    Action::Wait {}
                }],
                expect: None,
                after: (c != '-').then(|| format!("step-{:03}.png", n + 1)),
                at_ms: None,
            })
            .collect()
    }

    #[test]
    fn a_screen_may_match_later_waits_and_past_one_input_never_two() {
        // i0 w1 w2 i3 w4 i5 i6
        let all = inputs("iwwiwii");
        // Its own, its waits, then the next input and that input's waits.
        assert_eq!(candidates(&all, 0, None), vec![0, 1, 2, 3, 4]);
        assert_eq!(next_input(&all, 0, None), Some(3));
        assert_eq!(candidates(&all, 1, None), vec![1, 2, 3, 4]);
        assert_eq!(candidates(&all, 3, None), vec![3, 4, 5]);
        // Two inputs in a row: one past the next, never two.
        assert_eq!(candidates(&all, 5, None), vec![5, 6]);
        // The last input: its own only.
        assert_eq!(candidates(&all, 6, None), vec![6]);
        assert_eq!(next_input(&all, 6, None), None);
        // `--until` ends the stretch (steps are 1-based: step 3 is index 2).
        assert_eq!(candidates(&all, 0, Some(3)), vec![0, 1, 2]);
        assert_eq!(next_input(&all, 0, Some(3)), None);
        // A wait with no recorded screen ends the stretch, and nothing past
        // it is tried.
        let gap = inputs("iw-wi");
        assert_eq!(candidates(&gap, 0, None), vec![0, 1]);
        assert_eq!(next_input(&gap, 0, None), None);
    }

    #[test]
    fn ignore_rectangles_are_four_whole_numbers() {
        assert_eq!(
            parse_rect("10, 20,30,40"),
            Ok(Rect {
                x: 10,
                y: 20,
                width: 30,
                height: 40
            })
        );
        for bad in ["", "1,2,3", "1,2,3,4,5", "1,2,0,4", "a,b,c,d", "-1,2,3,4"] {
            assert!(parse_rect(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_clock_is_ignored_where_the_image_shows_it() {
        let map = |w, h, iw, ih| ScaleMap {
            screen: Size::new(w, h),
            region: Rect {
                x: 0,
                y: 0,
                width: w,
                height: h,
            },
            image: Size::new(iw, ih),
        };
        assert_eq!(
            clock(&map(1280, 800, 1280, 800)),
            vec![Rect {
                x: 1160,
                y: 770,
                width: 120,
                height: 30
            }]
        );
        assert_eq!(
            clock(&map(1280, 800, 640, 400)),
            vec![Rect {
                x: 580,
                y: 385,
                width: 60,
                height: 15
            }]
        );
    }
}
