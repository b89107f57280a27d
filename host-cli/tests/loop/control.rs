//! The run's control socket (docs/contract.md rules 50 and 51) end to end over the real loop: the
//! operator takes the desktop at a step boundary, acts through the same
//! checked action API, gives it back, and the model is told and shown the
//! screen; a question is answered from the view.

use tokio::io::{AsyncWriteExt as _, BufReader};
use tokio::net::UnixStream;

use host_cli::control::line::read_line;
use host_cli::control::served::{Hello, Served};
use host_cli::control::wire::{Event as Ev, Holder, SOCKET_NAME};

use super::*;

struct Viewer {
    read: BufReader<tokio::net::unix::OwnedReadHalf>,
    write: tokio::net::unix::OwnedWriteHalf,
}

impl Viewer {
    async fn connect(dir: &Path) -> Viewer {
        let s = UnixStream::connect(dir.join(SOCKET_NAME)).await.unwrap();
        let (read, write) = s.into_split();
        Viewer {
            read: BufReader::new(read),
            write,
        }
    }

    async fn send(&mut self, v: Value) {
        let mut line = serde_json::to_vec(&v).unwrap();
        line.push(b'\n');
        self.write.write_all(&line).await.unwrap();
    }

    /// The next event that `f` accepts (others are skipped).
    async fn until<T>(&mut self, mut f: impl FnMut(Ev) -> Option<T>) -> T {
        let mut line = Vec::new();
        loop {
            let ok = tokio::time::timeout(
                Duration::from_secs(10),
                read_line(&mut self.read, &mut line),
            )
            .await
            .expect("an event within 10 s")
            .unwrap();
            assert!(ok, "the run closed its control socket");
            if let Some(t) = f(serde_json::from_slice(&line).unwrap()) {
                return t;
            }
        }
    }
}

fn serve(dir: &Path) -> Served {
    Served::bind(
        dir,
        Hello {
            session: "test".into(),
            run_folder: "run".into(),
            task: "t".into(),
            max_steps: 10,
        },
    )
    .unwrap()
}

async fn drive_served(rig: &Rig, served: &Served, op: &mut dyn Operator) -> Run {
    let dir = rig.new_run_dir();
    let mut model = rig.model(false, fast_retry());
    let mut channel = rig.daemon.channel().await;
    let mut recorder = start_recorder(&dir);
    let mut runner = Runner::new(
        &mut model,
        &mut channel,
        op,
        &mut recorder,
        rig.opts(),
        Interrupt::default(),
    )
    .with_control(served.clone());
    let outcome = tokio::time::timeout(RUN_LIMIT, runner.run(None))
        .await
        .expect("the run hung")
        .unwrap();
    drop(runner);
    drop(recorder);
    served.finish("done");
    Run {
        outcome,
        lines: trajectory(&dir),
        dir,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn takeover_pauses_at_the_boundary_runs_the_operators_input_and_tells_the_model() {
    let rig = Rig::new().await;
    rig.mock.push_all([
        Reply::output(vec![computer_call("call_1", vec![click(10, 20)])]),
        Reply::done("all done"),
    ]);
    let socket_dir = tempfile::tempdir().unwrap();
    let served = serve(socket_dir.path());
    let mut v = Viewer::connect(socket_dir.path()).await;
    // Asked before the first step: granted at the first boundary.
    v.send(json!({"type": "take"})).await;
    v.until(|e| {
        matches!(
            e,
            Ev::State {
                holder: Holder::TakeRequested,
                ..
            }
        )
        .then_some(())
    })
    .await;
    let operator = async {
        v.until(|e| {
            matches!(
                e,
                Ev::State {
                    holder: Holder::Operator,
                    ..
                }
            )
            .then_some(())
        })
        .await;
        // Nothing of the model's has reached the desktop yet.
        assert!(rig.probe().input_events().is_empty());
        assert_eq!(
            rig.mock.requests().len(),
            0,
            "the model was asked while paused"
        );
        // Checked like the model's: an unknown field runs nothing.
        v.send(json!({"type": "act", "actions": [{"type": "click", "button": "left", "x": 1, "y": 1, "z": 0}]}))
            .await;
        let bad = v
            .until(|e| match e {
                Ev::Acted { ok, .. } => Some(ok),
                _ => None,
            })
            .await;
        assert!(!bad);
        v.send(json!({"type": "act", "actions": [{"type": "click", "button": "left", "x": 50, "y": 60}]}))
            .await;
        let (ok, executed) = v
            .until(|e| match e {
                Ev::Acted { ok, executed, .. } => Some((ok, executed)),
                _ => None,
            })
            .await;
        assert!(ok && executed == 1);
        v.send(json!({"type": "give"})).await;
        v.until(|e| {
            matches!(
                e,
                Ev::State {
                    holder: Holder::Agent,
                    ..
                }
            )
            .then_some(())
        })
        .await;
    };
    let mut op = ScriptedOp::new(rig.probe());
    let (run, ()) = tokio::join!(drive_served(&rig, &served, &mut op), operator);
    run.assert_ending(Ending::Finished);
    // The operator's click first, then the model's.
    let events = rig.probe().input_events();
    assert_eq!(events[..3], clicked(50, 60)[..], "{events:?}");
    assert_eq!(events[3..6], clicked(10, 20)[..], "{events:?}");
    // Who did what.
    let kinds: Vec<String> = run
        .lines
        .iter()
        .map(|l| l["kind"].as_str().unwrap().to_string())
        .collect();
    let at = |k: &str| {
        kinds
            .iter()
            .position(|x| x == k)
            .unwrap_or_else(|| panic!("no {k}: {kinds:?}"))
    };
    assert!(at("operator_took") < at("operator_gave"));
    assert!(at("operator_gave") < at("request_input"));
    let acted = run.of_kind("operator_acted");
    assert_eq!(acted.len(), 2);
    assert_eq!(acted[0]["ok"], false);
    assert_eq!(acted[1]["ok"], true);
    assert_eq!(acted[1]["actions"][0]["x"], 50);
    let gave = &run.of_kind("operator_gave")[0];
    let file = gave["file"].as_str().unwrap();
    assert!(run.dir.join(file).is_file());
    // The model is told and shown the screen in the first request.
    let first = &rig.mock.requests()[0].body;
    let text = first.to_string();
    assert!(
        text.contains("The operator took control of the desktop"),
        "{text:.400}"
    );
    let told = first["input"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i.to_string().contains("The operator took control"))
        .unwrap();
    assert!(
        told["content"][1]["image_url"]
            .as_str()
            .unwrap()
            .starts_with("data:image/")
    );
    rig.assert_mock_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_safety_check_answered_in_the_view_runs_and_is_recorded_as_the_views() {
    let rig = Rig::new().await;
    rig.mock.push_all([
        Reply::output(vec![computer_call_checked(
            "call_1",
            vec![click(10, 20)],
            vec![safety_check(
                "sc_1",
                "sensitive_domain",
                "Check the domain.",
            )],
        )]),
        Reply::done("all done"),
    ]);
    let socket_dir = tempfile::tempdir().unwrap();
    let served = serve(socket_dir.path());
    let mut v = Viewer::connect(socket_dir.path()).await;
    v.until(|e| matches!(e, Ev::State { .. }).then_some(()))
        .await;
    // No terminal, no policy: without the view this check is denied.
    let mut op = Approvals {
        view: Some(served.clone()),
        ..Approvals::default()
    };
    // Its own task: the run blocks its thread while the question is open
    // (as on the terminal).
    let probe_events = {
        let log = rig.probe().clone();
        move || log.input_events()
    };
    let viewer = tokio::spawn(async move {
        let id = v
            .until(|e| match e {
                Ev::Question { id, .. } => Some(id),
                _ => None,
            })
            .await;
        assert!(probe_events().is_empty(), "ran before the answer");
        v.send(json!({"type": "answer", "id": id, "answer": "approve"}))
            .await;
        v.until(|e| match e {
            Ev::Closed { id: c, by, .. } if c == id => Some(by),
            _ => None,
        })
        .await
    });
    let run = drive_served(&rig, &served, &mut op).await;
    assert_eq!(viewer.await.unwrap(), "view");
    run.assert_ending(Ending::Finished);
    assert_eq!(rig.probe().input_events()[..3], clicked(10, 20)[..]);
    assert_eq!(run.of_kind("safety_checks")[0]["decision"], "approved");
    let answered = run.of_kind("answered");
    assert_eq!(answered.len(), 1);
    assert_eq!(answered[0]["by"], "view");
    assert_eq!(answered[0]["answer"], "approve");
    assert_eq!(answered[0]["question"], "safety_check");
    rig.assert_mock_clean();
}
