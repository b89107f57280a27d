//! The desktop task: the single owner of the driver (and so of the X
//! connection). Requests come in over a channel, replies go out on
//! oneshots; input therefore never interleaves.
//!
//! One job:
//! 1. the API takes the input gate (a semaphore of one) or answers `busy`;
//! 2. the job reaches this thread with the gate's permit and a [`Cancel`];
//! 3. the thread connects the driver if needed, plans the batch (nothing
//!    runs if any action is refused), runs it, settles, captures, renders;
//! 4. it releases any held input, drops the permit, then replies, so the
//!    next request never sees a stale `busy`.

pub mod exec;
pub mod frames;

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sandtop_protocol::{
    BatchRequest, BatchResponse, Capabilities, ErrorBody, ErrorCode, ScaleMap, ScreenshotOptions,
    ScreenshotResponse, Size, Timings, limits,
};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot};

pub use crate::cancel::Cancel;
use crate::capture::Renderer;
use crate::driver::{Driver, DriverError};
use exec::Input;

/// What the desktop knows about its display, for `info` and `health`.
#[derive(Debug, Default)]
pub struct DesktopStatus {
    pub connected: AtomicBool,
    pub display: Mutex<Option<Size>>,
    pub capabilities: Mutex<Option<Capabilities>>,
    /// The live view's change counter ([`frames`]).
    pub frames: frames::FrameSignal,
}

/// Opens a driver (a new X connection, or a fake).
pub type Connect = Box<dyn FnMut() -> Result<Box<dyn Driver>, DriverError> + Send>;

type Reply<T> = oneshot::Sender<Result<T, ErrorBody>>;

/// A request for the desktop task.
#[derive(Debug)]
pub enum Job {
    Batch {
        request: BatchRequest,
        cancel: Cancel,
        permit: OwnedSemaphorePermit,
        reply: Reply<BatchResponse>,
    },
    Screenshot {
        options: ScreenshotOptions,
        cancel: Cancel,
        permit: OwnedSemaphorePermit,
        reply: Reply<ScreenshotResponse>,
    },
    /// A live-view frame showing change `seq`: no input gate (it reads
    /// the screen between input jobs).
    Frame {
        request: sandtop_protocol::frame::FrameRequest,
        seq: u64,
        reply: Reply<sandtop_protocol::frame::FrameReply>,
    },
    /// Where the pointer is, in the space of a screenshot taken with
    /// `options` (no input gate: it only reads).
    Cursor {
        options: ScreenshotOptions,
        reply: Reply<sandtop_protocol::CursorReply>,
    },
    /// The display was restarted: drop the old connection, open a new one.
    Reconnect,
    /// Release everything and stop.
    Stop,
}

/// The handle the API and the supervisor hold.
#[derive(Debug, Clone)]
pub struct DesktopHandle {
    tx: mpsc::Sender<Job>,
    /// One input request at a time; a second one gets `busy`.
    pub gate: Arc<Semaphore>,
    pub status: Arc<DesktopStatus>,
}

impl DesktopHandle {
    /// Queues a job. Fails only when the desktop task is gone.
    pub fn send(&self, job: Job) -> Result<(), ErrorBody> {
        self.tx
            .send(job)
            .map_err(|_| ErrorBody::new(ErrorCode::Internal, "the desktop task has stopped"))
    }

    /// Takes the input gate, or says `busy`.
    pub fn try_acquire(&self) -> Result<OwnedSemaphorePermit, ErrorBody> {
        Arc::clone(&self.gate).try_acquire_owned().map_err(|_| {
            ErrorBody::new(
                ErrorCode::Busy,
                "another input request is running on this desktop",
            )
        })
    }
}

/// Starts the desktop task on its own thread (the driver is blocking).
pub fn spawn(connect: Connect) -> (DesktopHandle, std::thread::JoinHandle<()>) {
    let (tx, rx) = mpsc::channel();
    let status = Arc::new(DesktopStatus::default());
    let handle = DesktopHandle {
        tx,
        gate: Arc::new(Semaphore::new(1)),
        status: Arc::clone(&status),
    };
    let join = std::thread::Builder::new()
        .name("desktop".into())
        .spawn(move || Desktop::new(connect, status).run(rx))
        .unwrap_or_else(|e| panic!("cannot start the desktop thread: {e}"));
    (handle, join)
}

struct Desktop {
    connect: Connect,
    driver: Option<Box<dyn Driver>>,
    status: Arc<DesktopStatus>,
    input: Input,
    renderer: Renderer,
    /// What the live view's watcher last saw.
    seen: frames::Seen,
    /// When a frame was last asked for: a viewer polls again at once, so
    /// changes are looked for often for a while after (a request that
    /// arrives while this task sleeps its idle tick would otherwise wait
    /// it out: ~3 frames/s under a screen that never stops changing).
    last_frame: Option<Instant>,
    /// The last screenshot and what it showed, to answer again while
    /// nothing was drawn ([`Driver::mark`]).
    last_shot: Option<LastShot>,
    /// When the last input request ended: a button a `mouse_down` left
    /// held is released once none came for `HELD_BUTTON_IDLE_MS`.
    last_input: Instant,
}

/// A screenshot that may be answered again: the display's mark before its
/// capture, and everything that decided its bytes.
struct LastShot {
    mark: u64,
    map: ScaleMap,
    format: sandtop_protocol::ImageFormat,
    cursor: Option<crate::driver::CursorImage>,
    shot: sandtop_protocol::Screenshot,
}

/// How long the task waits for work before housekeeping.
const IDLE_TICK: Duration = Duration::from_millis(500);

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

impl Desktop {
    fn new(connect: Connect, status: Arc<DesktopStatus>) -> Desktop {
        Desktop {
            connect,
            driver: None,
            status,
            input: Input::default(),
            renderer: Renderer::new(),
            seen: frames::Seen::default(),
            last_frame: None,
            last_shot: None,
            last_input: Instant::now(),
        }
    }

    fn run(mut self, rx: mpsc::Receiver<Job>) {
        let _ = self.ensure_driver();
        let mut last_housekeeping = Instant::now();
        loop {
            // A viewer waiting for a frame: look for changes often.
            let viewing = self.status.frames.waiting()
                || self
                    .last_frame
                    .is_some_and(|t| t.elapsed() < frames::VIEWER_LINGER);
            let tick = if viewing {
                frames::FRAME_TICK
            } else {
                IDLE_TICK
            };
            let job = match rx.recv_timeout(tick) {
                Ok(job) => job,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    if viewing {
                        self.watch_changes();
                    }
                    if last_housekeeping.elapsed() >= IDLE_TICK {
                        self.housekeeping();
                        last_housekeeping = Instant::now();
                    }
                    continue;
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            };
            match job {
                Job::Batch {
                    request,
                    cancel,
                    permit,
                    reply,
                } => {
                    let result = self.guarded(|d| d.batch(&request, &cancel));
                    self.last_input = Instant::now();
                    drop(permit);
                    // Input changes what a viewer should see, whether or
                    // not the display reported damage yet.
                    self.status.frames.bump();
                    let _ = reply.send(result);
                }
                Job::Screenshot {
                    options,
                    cancel,
                    permit,
                    reply,
                } => {
                    let result = self.guarded(|d| d.screenshot_only(&options, &cancel));
                    drop(permit);
                    let _ = reply.send(result);
                }
                Job::Frame {
                    request,
                    seq,
                    reply,
                } => {
                    let result = self.guarded(|d| d.frame(&request, seq));
                    self.last_frame = Some(Instant::now());
                    let _ = reply.send(result);
                }
                Job::Cursor { options, reply } => {
                    let result = self.guarded(|d| d.cursor_position(&options));
                    let _ = reply.send(result);
                }
                Job::Reconnect => {
                    self.driver = None;
                    self.input = Input::default();
                    let _ = self.ensure_driver();
                }
                Job::Stop => break,
            }
        }
        self.release_input();
        self.driver = None;
        self.status.connected.store(false, Ordering::Release);
    }

    /// Runs one job's work. A panic inside must not take the daemon down or
    /// leave keys held (docs/security.md A11, A15): input is released (through a
    /// fresh connection if need be) *before* the caller drops the permit
    /// and replies `internal`.
    fn guarded<T>(
        &mut self,
        work: impl FnOnce(&mut Self) -> Result<T, ErrorBody>,
    ) -> Result<T, ErrorBody> {
        match std::panic::catch_unwind(AssertUnwindSafe(|| work(self))) {
            Ok(result) => result,
            Err(_) => {
                tracing::error!("a desktop job panicked; releasing input");
                self.recover_after_panic();
                Err(ErrorBody::new(
                    ErrorCode::Internal,
                    "internal error while running the request; input was released and the daemon is still running",
                ))
            }
        }
    }

    fn ensure_driver(&mut self) -> Result<(), ErrorBody> {
        if self.driver.is_none() {
            match (self.connect)() {
                Ok(mut d) => {
                    // Marks count from zero again on a new connection.
                    self.last_shot = None;
                    let size = d.screen_size().ok();
                    *lock(&self.status.display) = size;
                    *lock(&self.status.capabilities) = Some(d.capabilities());
                    self.status.connected.store(true, Ordering::Release);
                    self.driver = Some(d);
                    // Keys a lost connection left held are released
                    // through the new one.
                    self.release_input();
                }
                Err(e) => {
                    self.status.connected.store(false, Ordering::Release);
                    return Err(ErrorBody::new(ErrorCode::DisplayUnavailable, e.to_string()));
                }
            }
        }
        Ok(())
    }

    /// The driver with the input tracker and renderer, borrowed apart.
    fn parts(&mut self) -> Result<(&mut dyn Driver, &mut Input, &mut Renderer), ErrorBody> {
        self.ensure_driver()?;
        let Desktop {
            driver,
            input,
            renderer,
            ..
        } = self;
        let d = driver
            .as_deref_mut()
            .ok_or_else(|| ErrorBody::new(ErrorCode::DisplayUnavailable, "no display"))?;
        Ok((d, input, renderer))
    }

    /// Called when the driver reported a fatal error: forget it, so the
    /// next request reconnects.
    fn lose_driver(&mut self, e: &DriverError) {
        if e.is_fatal() {
            tracing::warn!(error = %e, "lost the X connection");
            self.driver = None;
            self.status.connected.store(false, Ordering::Release);
        }
    }

    fn driver_error(&mut self, e: DriverError, cancel: &Cancel) -> ErrorBody {
        let code = match &e {
            DriverError::Cancelled => cancel.code(),
            DriverError::Display(_) => ErrorCode::DisplayUnavailable,
            DriverError::InputBlocked(_) => ErrorCode::InputBlocked,
            _ => ErrorCode::Internal,
        };
        self.lose_driver(&e);
        let message = match code {
            ErrorCode::Timeout => "the request ran past its deadline".to_string(),
            ErrorCode::Cancelled => "the request was cancelled".to_string(),
            _ => e.to_string(),
        };
        ErrorBody::new(code, message)
    }

    fn batch(&mut self, req: &BatchRequest, cancel: &Cancel) -> Result<BatchResponse, ErrorBody> {
        let t0 = Instant::now();
        let (driver, _, _) = self.parts()?;
        let screen = match driver.screen_size() {
            Ok(s) => s,
            Err(e) => return Err(self.driver_error(e, cancel)),
        };
        let (steps, map) = exec::plan(req, screen)?;
        let (driver, _, _) = self.parts()?;
        // What was drawn before the batch is no reaction to it: the
        // settle counts damage from here (docs/contract.md 2c).
        if let Err(e) = driver.changes() {
            return Err(self.driver_error(e, cancel));
        }
        let (driver, input, _) = self.parts()?;
        let run = exec::run(driver, input, &steps, cancel);
        if let Err(f) = run {
            let mut body = self.driver_error(f.error, cancel);
            body.index = Some(f.index);
            body.executed = Some(f.index);
            body.partial = Some(f.partial);
            body.message = format!(
                "action {} ({}): {}",
                f.index,
                req.actions[f.index].kind(),
                body.message
            );
            return Err(body);
        }
        let actions_ms = ms(t0.elapsed());
        let executed = steps.len();
        if !req.final_screenshot {
            let (driver, _, _) = self.parts()?;
            if let Err(e) = driver.sync() {
                let mut body = self.driver_error(e, cancel);
                body.executed = Some(executed);
                return Err(body);
            }
            return Ok(BatchResponse {
                executed,
                screenshot: None,
                timings: Timings {
                    actions_ms,
                    total_ms: ms(t0.elapsed()),
                    ..Timings::default()
                },
            });
        }
        let (screenshot, mut timings) =
            self.capture(&map, &req.screenshot, true, cancel)
                .map_err(|mut body| {
                    // Every action ran; only the screenshot failed.
                    body.executed = Some(executed);
                    body
                })?;
        let screenshot = Some(screenshot);
        timings.actions_ms = actions_ms;
        timings.total_ms = ms(t0.elapsed());
        Ok(BatchResponse {
            executed,
            screenshot,
            timings,
        })
    }

    fn screenshot_only(
        &mut self,
        options: &ScreenshotOptions,
        cancel: &Cancel,
    ) -> Result<ScreenshotResponse, ErrorBody> {
        let t0 = Instant::now();
        let (driver, _, _) = self.parts()?;
        let screen = match driver.screen_size() {
            Ok(s) => s,
            Err(e) => return Err(self.driver_error(e, cancel)),
        };
        let map =
            ScaleMap::fit(screen, options.region, options.size, options.fit).map_err(|e| {
                ErrorBody::new(ErrorCode::BadRequest, format!("screenshot options: {e}"))
            })?;
        // A screenshot on its own captures now: settling is for after input.
        let (screenshot, mut timings) = self.capture(&map, options, false, cancel)?;
        timings.total_ms = ms(t0.elapsed());
        Ok(ScreenshotResponse {
            screenshot,
            timings,
        })
    }

    /// Settle (after input), capture, render. The map was computed for
    /// this screen.
    fn capture(
        &mut self,
        map: &ScaleMap,
        options: &ScreenshotOptions,
        settle: bool,
        cancel: &Cancel,
    ) -> Result<(sandtop_protocol::Screenshot, Timings), ErrorBody> {
        let mut timings = Timings::default();
        let (driver, _, _) = self.parts()?;
        let t = Instant::now();
        let settled = if settle {
            driver
                .sync()
                .and_then(|()| driver.settle(crate::driver::settle::Rule::after_input(), cancel))
        } else {
            Ok(false)
        };
        let settled = match settled {
            Ok(s) => s,
            Err(e) => return Err(self.driver_error(e, cancel)),
        };
        timings.settle_ms = ms(t.elapsed());
        timings.settled = settled;
        let (driver, _, _) = self.parts()?;
        let cursor = if options.cursor {
            match driver.cursor() {
                Ok(c) => c,
                Err(e) => return Err(self.driver_error(e, cancel)),
            }
        } else {
            None
        };
        let t = Instant::now();
        let (driver, _, _) = self.parts()?;
        let mark = match driver.mark() {
            Ok(m) => m,
            Err(e) => return Err(self.driver_error(e, cancel)),
        };
        if let (Some(mark), Some(last)) = (mark, &self.last_shot)
            && last.mark == mark
            && last.map == *map
            && last.format == options.format
            && last.cursor == cursor
        {
            // Nothing was drawn since that capture (docs/contract.md 1i).
            timings.capture_ms = ms(t.elapsed());
            timings.reused = true;
            return Ok((last.shot.clone(), timings));
        }
        self.last_shot = None;
        let (driver, _, renderer) = self.parts()?;
        let frame = match driver.capture(map.region) {
            Ok(f) => f,
            Err(e) => return Err(self.driver_error(e, cancel)),
        };
        timings.capture_ms = ms(t.elapsed());
        let (shot, rt) = renderer
            .render(frame, cursor.as_ref(), map, options.format)
            .map_err(|e| ErrorBody::new(ErrorCode::Internal, e.to_string()))?;
        timings.scale_ms = rt.scale_ms;
        timings.encode_ms = rt.encode_ms;
        if let Some(mark) = mark {
            self.last_shot = Some(LastShot {
                mark,
                map: *map,
                format: options.format,
                cursor,
                shot: shot.clone(),
            });
        }
        Ok((shot, timings))
    }

    fn cursor_position(
        &mut self,
        options: &ScreenshotOptions,
    ) -> Result<sandtop_protocol::CursorReply, ErrorBody> {
        let no_cancel = Cancel::new(Instant::now() + Duration::from_secs(5));
        let (driver, _, _) = self.parts()?;
        let screen = match driver.screen_size() {
            Ok(s) => s,
            Err(e) => return Err(self.driver_error(e, &no_cancel)),
        };
        let map =
            ScaleMap::fit(screen, options.region, options.size, options.fit).map_err(|e| {
                ErrorBody::new(ErrorCode::BadRequest, format!("screenshot options: {e}"))
            })?;
        let (driver, _, _) = self.parts()?;
        let at = match driver.pointer() {
            Ok(Some(p)) => p,
            Ok(None) => {
                return Err(ErrorBody::new(
                    ErrorCode::DisplayUnavailable,
                    "the display does not tell where the pointer is",
                ));
            }
            Err(e) => return Err(self.driver_error(e, &no_cancel)),
        };
        let (sx, sy) = (u32::try_from(at.0).ok(), u32::try_from(at.1).ok());
        match sx.zip(sy).and_then(|(x, y)| map.to_image(x, y)) {
            Some((x, y)) => Ok(sandtop_protocol::CursorReply {
                x,
                y,
                scale_map: map,
            }),
            None => Err(ErrorBody::new(
                ErrorCode::OutOfBounds,
                format!(
                    "the pointer ({}, {}) is outside the captured region",
                    at.0, at.1
                ),
            )),
        }
    }

    fn housekeeping(&mut self) {
        if !self.input.is_clear()
            && self.last_input.elapsed() >= Duration::from_millis(limits::HELD_BUTTON_IDLE_MS)
        {
            tracing::info!("releasing a button held past the idle limit");
            self.release_input();
        }
        if let Some(d) = self.driver.as_mut()
            && let Err(e) = d.idle()
        {
            self.lose_driver(&e);
        }
        if self.driver.is_none() {
            let _ = self.ensure_driver();
        }
    }

    fn release_input(&mut self) {
        if self.input.is_clear() {
            return;
        }
        if let Some(d) = self.driver.as_deref_mut()
            && let Err(e) = self.input.release_all(d)
        {
            tracing::warn!(error = %e, "releasing held input");
        }
    }

    fn recover_after_panic(&mut self) {
        self.release_input();
        if !self.input.is_clear() {
            // The old connection is suspect: release through a new one.
            self.driver = None;
            let _ = self.ensure_driver();
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
