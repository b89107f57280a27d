//! `host-cli replay` on the real guest (E tier, docs/contract.md rule 53): the
//! recording of the offline exercise replayed on a fresh guest matches
//! step by step (exit 0), and its report shows every step's replayed
//! screen beside the recorded one; the same recording with one click moved (to the
//! terminal's launcher instead of the browser's) diverges at that step
//! (exit 7; or at one of the waits right after it, when neither run's
//! window had shown yet), naming it and the regions that differ; with `--until` the
//! step before it, the tampered recording matches. The replay starts over
//! a minute after the recording ended, so every step is replayed in
//! another minute than it was recorded in: what the guest's programs show
//! of the time (a file dialog's "Modified") matches only because the
//! guest's fake clock reads the recorded time (rule 53 too).

#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::Command;

use base64::Engine as _;
use host_cli::agent::exercise::Frame;
use sandtop_testkit::skip;
use serde_json::Value;

const HOST_CLI: &str = env!("CARGO_BIN_EXE_host-cli");

fn host_cli(state: &Path) -> Command {
    let mut c = sandtop_testkit::command::detached(HOST_CLI);
    c.env("SANDTOP_STATE_DIR", state)
        .env_remove("OPENAI_API_KEY");
    c
}

fn lines(run: &Path) -> Vec<Value> {
    std::fs::read_to_string(run.join("trajectory.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_file() {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

/// The first step after `step` whose input is not only `wait`s.
fn next_input(run: &Path, step: u32) -> u32 {
    lines(run)
        .iter()
        .filter(|l| l["kind"] == "ledger" && l["state"] == "pending")
        .filter(|l| l["step"].as_u64().is_some_and(|s| s as u32 > step))
        .find(|l| {
            l["detail"]["actions"]
                .as_array()
                .is_some_and(|a| a.iter().any(|x| x["type"] != "wait"))
        })
        .and_then(|l| l["step"].as_u64())
        .map_or(u32::MAX, |s| s as u32)
}

/// Moves the run's click on the browser's launcher to the terminal's (the
/// third launcher, found in the screenshot the click was aimed on);
/// returns the step it is in.
fn tamper(run: &Path) -> u32 {
    let mut all = lines(run);
    let mut seen = String::from("step-000-initial.png");
    let mut at = None;
    for (i, l) in all.iter().enumerate() {
        if l["kind"] == "call_output"
            && let Some(f) = l["item"]["output"]["image_url"]
                .as_str()
                .and_then(|u| u.strip_prefix("sandtop-file:"))
        {
            seen = f.to_string();
        }
        if l["kind"] == "ledger"
            && l["state"] == "pending"
            && l["detail"]["actions"][0]["type"] == "click"
        {
            at = Some(i);
            break;
        }
    }
    let i = at.expect("the exercise's run has no click");
    let png = std::fs::read(run.join(&seen)).unwrap();
    let url = format!(
        "data:image/png;base64,{}",
        base64::engine::general_purpose::STANDARD.encode(png)
    );
    let frame = Frame::from_data_url(&url).unwrap();
    let (x, y) = frame.launchers()[2];
    all[i]["detail"]["actions"][0]["x"] = x.into();
    all[i]["detail"]["actions"][0]["y"] = y.into();
    let step = all[i]["step"].as_u64().unwrap() as u32;
    let text: String = all.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(run.join("trajectory.jsonl"), text).unwrap();
    step
}

#[test]
fn the_exercise_replays_step_for_step_and_a_moved_click_diverges_at_its_step() {
    if !skip::docker_guest() {
        return;
    }
    let state = tempfile::tempdir().unwrap();
    let run = state.path().join("recorded");
    let ex = host_cli(state.path())
        .args(["exercise", "--approve-scripted-checks", "--record"])
        .arg(&run)
        .output()
        .unwrap();
    assert!(
        ex.status.success(),
        "{}{}",
        String::from_utf8_lossy(&ex.stdout),
        String::from_utf8_lossy(&ex.stderr)
    );
    // The minute changes: every step is replayed at least 61 s after the
    // last one was recorded.
    let recorded_end = std::fs::metadata(run.join("trajectory.jsonl"))
        .unwrap()
        .modified()
        .unwrap();
    if let Ok(d) = (recorded_end + std::time::Duration::from_secs(61))
        .duration_since(std::time::SystemTime::now())
    {
        std::thread::sleep(d);
    }
    let t = std::time::Instant::now();
    let out = state.path().join("replayed");
    let r = host_cli(state.path())
        .arg("replay")
        .arg(&run)
        .arg("-o")
        .arg(&out)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&r.stdout).to_string();
    eprintln!("{said}{}", String::from_utf8_lossy(&r.stderr));
    eprintln!("replay took {:.1} s", t.elapsed().as_secs_f64());
    assert_eq!(r.status.code(), Some(0), "{said}");
    assert!(said.contains("every step matched"), "{said}");
    assert!(!said.contains("keeps no fake clock"), "{said}");
    // The report shows the replay beside the recording, every step.
    let html_path = state.path().join("side-by-side.html");
    let rep = host_cli(state.path())
        .arg("report")
        .arg(&run)
        .arg("--replay")
        .arg(&out)
        .arg("-o")
        .arg(&html_path)
        .output()
        .unwrap();
    assert!(
        rep.status.success(),
        "{}",
        String::from_utf8_lossy(&rep.stderr)
    );
    let html = std::fs::read_to_string(&html_path).unwrap();
    let calls = lines(&run)
        .iter()
        .filter(|l| l["kind"] == "call_output")
        .count();
    assert_eq!(
        html.matches("After the call, replayed</p><div").count(),
        calls
    );
    assert!(!html.contains("After the call, replayed: none"));

    let tampered = state.path().join("tampered");
    copy_dir(&run, &tampered);
    let step = tamper(&tampered);
    let out = state.path().join("diverged");
    let r = host_cli(state.path())
        .args(["replay", "--patience", "5s"])
        .arg(&tampered)
        .arg("-o")
        .arg(&out)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&r.stdout).to_string();
    eprintln!("{said}{}", String::from_utf8_lossy(&r.stderr));
    assert_eq!(r.status.code(), Some(7), "{said}");
    // At the tampered step, or at one of the waits right after it: a
    // window takes a while to show, and until either run's shows, the two
    // screens (the bare desktop) match. Never before it, never past the
    // next input.
    let tampered_step = step;
    let step: u32 = said
        .split("diverged at step ")
        .nth(1)
        .and_then(|t| t.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no divergence named: {said}"));
    let next = next_input(&tampered, tampered_step);
    assert!(
        (tampered_step..=next).contains(&step),
        "diverged at step {step}, not between the tampered step {tampered_step} and the next input {next}: {said}"
    );
    // The step's line names the regions that differ (WxH at (x, y)).
    let line = said
        .lines()
        .find(|l| l.contains("DIVERGED"))
        .unwrap_or_else(|| panic!("no DIVERGED line: {said}"));
    assert!(
        line.trim_start().starts_with(&format!("step {step:>3}"))
            && line.contains("region(s) differ: ")
            && line.contains(" at ("),
        "{line}"
    );
    let written: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    let of_step = |end: &str| {
        written
            .iter()
            .any(|n| n.starts_with(&format!("step-{step:03}-")) && n.ends_with(end))
    };
    assert!(
        of_step("-replayed.png") && of_step("-recorded.png"),
        "{written:?}"
    );
    // --until stops before the tampered step: what came before matches.
    let r = host_cli(state.path())
        .args(["replay", "--until"])
        .arg((tampered_step - 1).to_string())
        .arg(&tampered)
        .arg("-o")
        .arg(state.path().join("until"))
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&r.stdout).to_string();
    assert_eq!(r.status.code(), Some(0), "{said}");
    let compared = said
        .lines()
        .filter(|l| l.trim_start().starts_with("step "))
        .count();
    assert!(
        compared >= 1
            && said.contains("every step matched")
            && !said.contains(&format!("step {tampered_step:>3} ")),
        "{said}"
    );
}
