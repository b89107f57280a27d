#![allow(clippy::unwrap_used)]

use std::time::Duration;

use clap::{CommandFactory as _, Parser as _};

use super::*;
use crate::agent::cmd::{Reconcile, RunArgs, ToolChoice};

fn run_args(argv: &[&str]) -> Result<RunArgs, clap::Error> {
    let mut full = vec!["host-cli", "run"];
    full.extend_from_slice(argv);
    match Cli::try_parse_from(full)?.command {
        Command::Run(a) => Ok(*a),
        other => panic!("{other:?}"),
    }
}

fn refused(argv: &[&str]) -> String {
    let mut full = vec!["host-cli"];
    full.extend_from_slice(argv);
    Cli::try_parse_from(full).unwrap_err().to_string()
}

/// A screen size is `--screen WxH` everywhere (the old `--display` is a
/// hidden alias); durations carry their unit; `--reconcile` is a value
/// enum; `--tool` also takes the API's own spelling.
#[test]
fn one_vocabulary_for_screens_durations_and_choices() {
    let a = run_args(&["--screen", "1024x640", "t"]).unwrap();
    assert_eq!(a.screen, Size::new(1024, 640));
    assert_eq!(
        run_args(&["--display", "800x600", "t"]).unwrap().screen,
        Size::new(800, 600)
    );
    for argv in [
        &["guest", "start", "--screen", "640x400"][..],
        &["guest", "start", "--display", "640x400"],
    ] {
        let mut full = vec!["host-cli"];
        full.extend_from_slice(argv);
        let Command::Guest(GuestCommand::Start(s)) = Cli::try_parse_from(full).unwrap().command
        else {
            panic!()
        };
        assert_eq!(s.screen, Size::new(640, 400));
    }
    let help = Cli::command()
        .find_subcommand_mut("run")
        .unwrap()
        .render_long_help()
        .to_string();
    assert!(
        help.contains("--screen <WxH>") && !help.contains("--display"),
        "{help}"
    );
    assert!(
        help.contains("--max-time <DURATION>") && !help.contains("--max-seconds"),
        "{help}"
    );

    assert_eq!(
        run_args(&["t"]).unwrap().max_time,
        Duration::from_secs(1800)
    );
    assert_eq!(
        run_args(&["--max-time", "90s", "t"]).unwrap().max_time,
        Duration::from_secs(90)
    );
    assert_eq!(
        run_args(&["--max-time", "2m", "t"]).unwrap().max_time,
        Duration::from_secs(120)
    );
    assert_eq!(
        run_args(&["--max-seconds", "90", "t"]).unwrap().max_seconds,
        Some(90)
    );
    assert!(refused(&["run", "--max-time", "90", "t"]).contains("no unit"));
    assert!(refused(&["run", "--max-time", "0s", "t"]).contains("between 1s and 24h"));
    assert!(
        refused(&["run", "--max-time", "1m", "--max-seconds", "5", "t"])
            .contains("cannot be used with")
    );
    let start =
        |v: &str| match Cli::try_parse_from(["host-cli", "guest", "start", "--ready-timeout", v]) {
            Ok(Cli {
                command: Command::Guest(GuestCommand::Start(s)),
            }) => Ok(s.guest.ready_timeout),
            Ok(other) => panic!("{other:?}"),
            Err(e) => Err(e.to_string()),
        };
    assert_eq!(start("45s").unwrap(), Some(Duration::from_secs(45)));
    assert_eq!(start("2m").unwrap(), Some(Duration::from_secs(120)));
    assert_eq!(
        start("30").unwrap(),
        Some(Duration::from_secs(30)),
        "the old spelling, for one release"
    );
    assert!(start("2h").unwrap_err().contains("between 0s and 1h"));

    assert_eq!(
        run_args(&["--resume", "r", "--reconcile", "not-done"])
            .unwrap()
            .reconcile,
        Some(Reconcile::NotDone)
    );
    assert!(
        refused(&["run", "--resume", "r", "--reconcile", "maybe"])
            .contains("[possible values: done, not-done]")
    );
    assert!(refused(&["run", "--reconcile", "done"]).contains("--resume"));
    for t in ["computer-use-preview", "computer_use_preview"] {
        assert_eq!(
            run_args(&["--tool", t, "t"]).unwrap().tool,
            Some(ToolChoice::ComputerUsePreview)
        );
    }
}

/// Numeric limits are range-checked at parse time, naming the flag.
#[test]
fn numeric_limits_are_range_checked() {
    for (argv, flag) in [
        (&["run", "--max-steps", "0", "t"][..], "--max-steps"),
        (&["run", "--max-steps", "10001", "t"], "--max-steps"),
        (&["run", "--context-images", "0", "t"], "--context-images"),
        (&["run", "--context-bytes", "100", "t"], "--context-bytes"),
        (&["run", "--max-seconds", "0", "t"], "--max-seconds"),
        (&["guest", "start", "--pids", "5"], "--pids"),
        (&["guest", "start", "--memory", "1k"], "--memory"),
        (&["guest", "start", "--cpus", "0"], "--cpus"),
        (&["run", "--memory", "lots", "t"], "--memory"),
        #[cfg(feature = "bench")]
        (&["bench", "--idle", "5"], "--idle"),
    ] {
        let e = refused(argv);
        assert!(e.contains(flag), "{argv:?}: {e}");
    }
    assert_eq!(run_args(&["--max-steps", "1", "t"]).unwrap().max_steps, 1);
    let a = run_args(&[
        "--memory", "768m", "--cpus", "1.5", "--pids", "128", "--image", "img:x", "t",
    ])
    .unwrap();
    assert_eq!(a.guest.limits().memory_bytes, 768 * 1024 * 1024);
    assert_eq!(a.guest.limits().nano_cpus, 1_500_000_000);
    assert_eq!(a.guest.limits().pids, 128);
    assert_eq!(a.guest.image, "img:x");
}

/// `given` sees what the command line set, not the defaults.
#[test]
fn given_options_are_those_the_command_line_set() {
    let m = Cli::command()
        .try_get_matches_from([
            "host-cli",
            "run",
            "--max-steps",
            "3",
            "--keep",
            "--network",
            "none",
            "do it",
        ])
        .unwrap();
    let (_, sub) = m.subcommand().unwrap();
    let g = given(&Cli::command(), "run", sub);
    let shown: Vec<&str> = g.iter().map(|g| g.shown.as_str()).collect();
    assert_eq!(shown, ["the task", "--keep", "--max-steps", "--network"]);
    let ids: Vec<&str> = g.iter().map(|g| g.id.as_str()).collect();
    assert_eq!(ids, ["task", "keep", "max_steps", "network"]);
}

/// Every help text names only commands this binary has
/// (`host-cli bench` exists only in a `--features bench` build): each
/// command quoted as `` `host-cli WORD…` `` in the long help of every
/// command starts with a command of this build.
#[test]
fn help_texts_name_only_commands_this_binary_has() {
    fn helps(c: &mut clap::Command, out: &mut Vec<(String, String)>) {
        out.push((c.get_name().to_string(), c.render_long_help().to_string()));
        for s in c.get_subcommands_mut() {
            helps(s, out);
        }
    }
    let mut root = Cli::command();
    root.build();
    let mut all = Vec::new();
    helps(&mut root, &mut all);
    assert!(all.len() > 10, "{} help texts", all.len());
    let mut named = 0;
    for (cmd, text) in &all {
        for (i, _) in text.match_indices("`host-cli ") {
            let word: String = text[i + "`host-cli ".len()..]
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || *c == '-')
                .collect();
            if word.is_empty() || word.starts_with('-') {
                continue;
            }
            named += 1;
            assert!(
                root.find_subcommand(&word).is_some(),
                "the help of `{cmd}` names `host-cli {word}`, which this build does not have:\n{}",
                text[i..].chars().take(80).collect::<String>()
            );
        }
    }
    assert!(
        named > 0,
        "no help text names a command: the check saw nothing"
    );
}
