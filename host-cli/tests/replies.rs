//! Replies checked against the request (docs/contract.md rule 3a;
//! docs/security.md L4): a fake daemon answers the channel's `screenshot` and `act` with
//! crafted screenshots, and the channel refuses each one before anything
//! decodes it. The checked decoder is shown to refuse a tiny PNG that
//! claims 60000x60000 under an address-space limit a naive decoder dies of.

#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use std::process::Command;
use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use host_cli::channel::{Channel, ChannelError, UnixConnector};
use host_cli::image_check::{self, DecodeError};
use host_cli::secret::Secret;
use sandtop_protocol::{
    Action, BatchRequest, Capabilities, Fit, ImageFormat, Info, Limits, PROTOCOL_VERSION, ScaleMap,
    Screenshot, ScreenshotOptions, Size, Timings,
};
use sandtopd::api::server::{bind_unix, serve};
use serde_json::{Value, json};

const SCREEN: Size = Size::new(1280, 800);

/// A real 8-bit RGB PNG.
fn png(w: u32, h: u32) -> Vec<u8> {
    let mut out = Vec::new();
    let mut enc = png::Encoder::new(&mut out, w, h);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    let mut wr = enc.write_header().unwrap();
    let px: Vec<u8> = (0..w * h * 3).map(|i| (i % 253) as u8).collect();
    wr.write_image_data(&px).unwrap();
    wr.finish().unwrap();
    out
}

fn crc32(data: &[u8]) -> u32 {
    let mut c = !0u32;
    for &x in data {
        c ^= u32::from(x);
        for _ in 0..8 {
            c = if c & 1 != 0 {
                0xedb8_8320 ^ (c >> 1)
            } else {
                c >> 1
            };
        }
    }
    !c
}

/// `png(w, h)` whose IHDR claims `cw` x `ch`, with a valid CRC: only the
/// size lies.
fn lying_png(w: u32, h: u32, cw: u32, ch: u32) -> Vec<u8> {
    let mut b = png(w, h);
    b[16..20].copy_from_slice(&cw.to_be_bytes());
    b[20..24].copy_from_slice(&ch.to_be_bytes());
    let crc = crc32(&b[12..29]);
    b[29..33].copy_from_slice(&crc.to_be_bytes());
    b
}

/// A 1x1 PNG (under 100 bytes) whose IHDR claims 60000x60000: 10.8 GB of
/// RGB for a decoder that believes it.
fn huge_png() -> Vec<u8> {
    lying_png(1, 1, 60_000, 60_000)
}

fn shot(format: ImageFormat, bytes: &[u8], w: u32, h: u32, map: ScaleMap) -> Screenshot {
    Screenshot {
        format,
        width: w,
        height: h,
        data: base64::engine::general_purpose::STANDARD.encode(bytes),
        scale_map: map,
    }
}

fn png_shot(bytes: &[u8], map: ScaleMap) -> Screenshot {
    shot(
        ImageFormat::Png,
        bytes,
        map.image.width,
        map.image.height,
        map,
    )
}

/// The map the real daemon makes for `size` on SCREEN.
fn scaled(size: Size) -> ScaleMap {
    ScaleMap::fit(SCREEN, None, Some(size), Fit::Contain).unwrap()
}

// ---- a fake daemon whose screenshot is whatever the test sets ----

struct FakeState {
    screenshot: Mutex<Value>,
}

struct FakeDaemon {
    _dir: tempfile::TempDir,
    socket: PathBuf,
    state: Arc<FakeState>,
    _stop: tokio::sync::oneshot::Sender<()>,
}

fn json_reply(v: Value) -> Response {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        v.to_string(),
    )
        .into_response()
}

async fn info() -> Response {
    json_reply(json!(Info {
        protocol: PROTOCOL_VERSION.to_string(),
        daemon_version: "0.0.0-replies".into(),
        display: Some(SCREEN),
        x_display: None,
        capabilities: Capabilities {
            xtest: true,
            shm: true,
            damage: true,
            xfixes: true,
            randr: true,
            formats: vec![ImageFormat::Png, ImageFormat::Webp],
        },
        limits: Limits::current(),
    }))
}

async fn screenshot(State(st): State<Arc<FakeState>>) -> Response {
    let s = st.screenshot.lock().unwrap().clone();
    json_reply(json!({"screenshot": s, "timings": Timings::default()}))
}

async fn actions(State(st): State<Arc<FakeState>>, body: axum::body::Bytes) -> Response {
    let req: BatchRequest = serde_json::from_slice(&body).unwrap();
    let s = st.screenshot.lock().unwrap().clone();
    json_reply(
        json!({"executed": req.actions.len(), "screenshot": s, "timings": Timings::default()}),
    )
}

impl FakeDaemon {
    async fn start() -> FakeDaemon {
        let state = Arc::new(FakeState {
            screenshot: Mutex::new(Value::Null),
        });
        let app = axum::Router::new()
            .route("/v1/info", axum::routing::get(info))
            .route("/v1/screenshot", axum::routing::post(screenshot))
            .route("/v1/actions", axum::routing::post(actions))
            .with_state(Arc::clone(&state));
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("replies.sock");
        let listener = bind_unix(&socket).await.unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(serve(app, vec![listener], async {
            let _ = stopped.await;
        }));
        FakeDaemon {
            _dir: dir,
            socket,
            state,
            _stop: stop,
        }
    }

    fn answer(&self, s: &Screenshot) {
        *self.state.screenshot.lock().unwrap() = json!(s);
    }

    async fn channel(&self) -> Channel {
        Channel::open(
            Box::new(UnixConnector(self.socket.clone())),
            Secret::new("replies-test-token".into()),
        )
        .await
        .unwrap()
    }
}

/// The refusal's text; fails unless the reply was refused as invalid.
fn refused<T>(r: Result<T, ChannelError>) -> String {
    match r {
        Err(e @ ChannelError::BadReply(_)) => {
            assert!(e.outcome_unknown());
            e.to_string()
        }
        Err(e) => panic!("expected a BadReply, got {e}"),
        Ok(_) => panic!("expected a BadReply, the reply was accepted"),
    }
}

fn options(size: Option<Size>) -> ScreenshotOptions {
    ScreenshotOptions {
        size,
        ..ScreenshotOptions::default()
    }
}

fn click() -> Action {
    serde_json::from_value(json!({"type": "click", "button": "left", "x": 10, "y": 20})).unwrap()
}

#[tokio::test]
async fn a_screenshot_must_be_the_size_asked_for() {
    let d = FakeDaemon::start().await;
    let mut ch = d.channel().await;
    let small = Size::new(640, 400);
    // Control: the size asked for, with the daemon's own map.
    d.answer(&png_shot(&png(640, 400), scaled(small)));
    let r = ch.screenshot(&options(Some(small))).await.unwrap();
    assert_eq!((r.screenshot.width, r.screenshot.height), (640, 400));
    // The whole screen, self-consistent, but not what was asked.
    d.answer(&png_shot(&png(1280, 800), ScaleMap::identity(SCREEN)));
    let e = refused(ch.screenshot(&options(Some(small))).await);
    assert!(
        e.contains("asks for 640x400") && e.contains("reply is 1280x800"),
        "{e}"
    );
    // Unscaled asked, scaled answered.
    d.answer(&png_shot(&png(640, 400), scaled(small)));
    let e = refused(ch.screenshot(&options(None)).await);
    assert!(e.contains("asks for 1280x800"), "{e}");
    // PNG asked, WebP answered (a valid VP8L header of the right size).
    let mut webp = b"RIFF\0\0\0\0WEBPVP8L\0\0\0\0\x2f".to_vec();
    webp.extend_from_slice(&((640u32 - 1) | ((400 - 1) << 14)).to_le_bytes());
    d.answer(&shot(ImageFormat::Webp, &webp, 640, 400, scaled(small)));
    let e = refused(ch.screenshot(&options(Some(small))).await);
    assert!(e.contains("Png screenshot was asked for"), "{e}");
}

#[tokio::test]
async fn an_act_reply_is_checked_against_its_batch() {
    let d = FakeDaemon::start().await;
    let mut ch = d.channel().await;
    let mut req = BatchRequest::new(vec![click()], options(None));
    req.expect_scale_map = Some(ScaleMap::identity(SCREEN));
    // Control.
    d.answer(&png_shot(&png(1280, 800), ScaleMap::identity(SCREEN)));
    assert_eq!(ch.act(&req).await.unwrap().executed, 1);
    // A scaled image for an unscaled batch.
    d.answer(&png_shot(&png(640, 400), scaled(Size::new(640, 400))));
    let e = refused(ch.act(&req).await);
    assert!(e.contains("asks for 1280x800"), "{e}");
    // An unscaled image of another screen than the batch's coordinates
    // refer to (the daemon refuses such a batch as stale_scale_map).
    let other = Size::new(1024, 768);
    d.answer(&png_shot(&png(1024, 768), ScaleMap::identity(other)));
    let e = refused(ch.act(&req).await);
    assert!(e.contains("refer to 1280x800"), "{e}");
}

#[tokio::test]
async fn crafted_pngs_are_refused_before_anything_decodes_them() {
    let d = FakeDaemon::start().await;
    let mut ch = d.channel().await;
    let small = Size::new(640, 400);
    let asked = options(Some(small));
    let cases: Vec<(&str, Screenshot, &str)> = vec![
        (
            "an IHDR lying about the size",
            png_shot(&lying_png(640, 400, 640, 401), scaled(small)),
            "the image is 640x401",
        ),
        (
            "a scale map disagreeing with the image",
            shot(
                ImageFormat::Png,
                &png(640, 400),
                640,
                400,
                ScaleMap::identity(SCREEN),
            ),
            "a 640x400 image with a scale map for 1280x800",
        ),
        (
            "a tiny file whose IHDR claims 60000x60000",
            png_shot(&huge_png(), scaled(small)),
            "the image is 60000x60000",
        ),
        (
            "the size asked for, but 16-bit RGBA",
            png_shot(&rgba16(640, 400), scaled(small)),
            "not 8-bit RGB",
        ),
        (
            "more base64 than an image of that size can take",
            Screenshot {
                data: "A".repeat(image_check::max_base64_len(small) as usize + 4),
                ..png_shot(&png(640, 400), scaled(small))
            },
            "bytes of base64 for a 640x400 image",
        ),
    ];
    for (what, s, says) in cases {
        d.answer(&s);
        let e = refused(ch.screenshot(&asked).await);
        assert!(e.contains(says), "{what}: {e}");
        let batch = BatchRequest::new(vec![click()], asked);
        let e = refused(ch.act(&batch).await);
        assert!(e.contains(says), "{what} (act): {e}");
    }
}

fn rgba16(w: u32, h: u32) -> Vec<u8> {
    let mut out = Vec::new();
    let mut enc = png::Encoder::new(&mut out, w, h);
    enc.set_color(png::ColorType::Rgba);
    enc.set_depth(png::BitDepth::Sixteen);
    let mut wr = enc.write_header().unwrap();
    wr.write_image_data(&vec![7u8; (w * h * 8) as usize])
        .unwrap();
    wr.finish().unwrap();
    out
}

#[test]
fn the_checked_decoder_refuses_a_huge_claim_and_decodes_what_was_asked() {
    let b = huge_png();
    assert!(b.len() < 100);
    assert_eq!(
        image_check::decode_png(&b, SCREEN),
        Err(DecodeError::WrongSize {
            found: Size::new(60_000, 60_000),
            expected: SCREEN
        })
    );
    assert!(matches!(
        image_check::decode_png_within(&b, image_check::MAX_SIZE),
        Err(DecodeError::TooLarge { .. })
    ));
    let img = image_check::decode_png(&png(640, 400), Size::new(640, 400)).unwrap();
    assert_eq!(img.rgb.len(), 640 * 400 * 3);
    assert_eq!(&img.rgb[..3], &[0, 1, 2]);
}

// ---- allocation: the decoders under an address-space limit ----

const CHILD_ENV: &str = "SANDTOP_REPLIES_CHILD";

fn status_kib(field: &str) -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// Decoding as `approve::mark_targets` and `exercise::Frame::from_data_url`
/// did before this change: the png crate's default limits and an output
/// buffer sized from the header.
fn naive_decode(bytes: &[u8]) -> Option<usize> {
    let mut reader = png::Decoder::new(std::io::Cursor::new(bytes))
        .read_info()
        .ok()?;
    let mut buf = vec![0u8; reader.output_buffer_size()?];
    reader.next_frame(&mut buf).ok()?;
    Some(buf.len())
}

/// Runs in a child process only (`--ignored`, with CHILD_ENV set): caps its
/// own address space at its current size + 256 MiB, then decodes the tiny
/// PNG that claims 60000x60000 with the decoder CHILD_ENV names.
#[test]
#[ignore = "run by a_tiny_png_claiming_60000x60000_cannot_make_the_decoder_allocate"]
fn child_decodes_under_an_address_space_limit() {
    let Ok(which) = std::env::var(CHILD_ENV) else {
        return;
    };
    let before = status_kib("VmSize:") * 1024;
    let cap = before + 256 * 1024 * 1024;
    rustix::process::setrlimit(
        rustix::process::Resource::As,
        rustix::process::Rlimit {
            current: Some(cap),
            maximum: Some(cap),
        },
    )
    .unwrap();
    let b = huge_png();
    match which.as_str() {
        "checked" => {
            let e = image_check::decode_png(&b, SCREEN).unwrap_err();
            let w = image_check::decode_png_within(&b, image_check::MAX_SIZE).unwrap_err();
            // What was asked for still decodes under the cap.
            let ok = image_check::decode_png(&png(1280, 800), SCREEN).unwrap();
            println!(
                "CHILD checked: refused ({e}; {w}); a real 1280x800 decoded ({} bytes); \
                 VmPeak {} kB, VmHWM {} kB, cap {} kB",
                ok.rgb.len(),
                status_kib("VmPeak:"),
                status_kib("VmHWM:"),
                cap / 1024
            );
        }
        _ => {
            // Dies here: the 10.8 GB buffer does not fit under the cap.
            let n = naive_decode(&b);
            println!("CHILD naive: survived with {n:?}");
        }
    }
}

fn run_child(which: &str) -> std::process::Output {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_decodes_under_an_address_space_limit",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, which)
        .output()
        .unwrap()
}

#[test]
fn a_tiny_png_claiming_60000x60000_cannot_make_the_decoder_allocate() {
    let checked = run_child("checked");
    let out = String::from_utf8_lossy(&checked.stdout);
    assert!(checked.status.success(), "{out}\n{checked:?}");
    assert!(out.contains("CHILD checked: refused"), "{out}");
    println!("{}", out.lines().find(|l| l.contains("CHILD")).unwrap());
    // Control: the decoder that believes the header dies of the same cap.
    let naive = run_child("naive");
    let err = String::from_utf8_lossy(&naive.stderr);
    assert!(!naive.status.success(), "{naive:?}");
    assert!(!String::from_utf8_lossy(&naive.stdout).contains("survived"));
    assert!(
        err.contains("memory allocation of 10800000000 bytes failed"),
        "{err}"
    );
}
