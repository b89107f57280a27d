use std::os::unix::fs::PermissionsExt as _;

use serde_json::json;
use tokio::io::{AsyncWriteExt as _, BufReader};
use tokio::net::UnixStream;

use super::*;
use crate::line::read_line;

fn hello() -> Hello {
    Hello {
        session: "s1".into(),
        run_folder: "/tmp/run".into(),
        task: "do it".into(),
        max_steps: 9,
    }
}

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

    async fn next(&mut self) -> Event {
        let mut line = Vec::new();
        let got =
            tokio::time::timeout(Duration::from_secs(5), read_line(&mut self.read, &mut line))
                .await
                .expect("an event within 5 s")
                .unwrap();
        assert!(got, "the run closed the socket");
        serde_json::from_slice(&line).unwrap()
    }

    async fn send(&mut self, c: serde_json::Value) {
        let mut line = serde_json::to_vec(&c).unwrap();
        line.push(b'\n');
        self.write.write_all(&line).await.unwrap();
    }
}

async fn viewers_become(s: &Served, n: usize) {
    for _ in 0..500 {
        if s.viewers() == n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{} viewers, wanted {n}", s.viewers());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_viewer_gets_the_state_and_open_questions_and_the_first_answer_wins() {
    let dir = tempfile::tempdir().unwrap();
    let s = Served::bind(dir.path(), hello()).unwrap();
    let mode = std::fs::metadata(dir.path().join(SOCKET_NAME))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    let id = s.open(
        QuestionKind::SafetyCheck,
        "Safety check".into(),
        "[code] text".into(),
        None,
        &["approve", "deny"],
    );
    let mut v = Viewer::connect(dir.path()).await;
    assert!(matches!(
        v.next().await,
        Event::Hello {
            version: VERSION,
            ..
        }
    ));
    assert!(matches!(
        v.next().await,
        Event::State {
            phase: Phase::Question,
            holder: Holder::Agent,
            max_steps: 9,
            ..
        }
    ));
    assert!(matches!(v.next().await, Event::Question { id: q, .. } if q == id));
    viewers_become(&s, 1).await;

    // Not one of its answers, an unknown question, text without `text`.
    v.send(json!({"type":"answer","id":id,"answer":"maybe"}))
        .await;
    assert!(matches!(v.next().await, Event::Refused { .. }));
    v.send(json!({"type":"answer","id":id + 7,"answer":"approve"}))
        .await;
    assert!(matches!(v.next().await, Event::Refused { .. }));
    v.send(json!({"type":"answer","id":id,"answer":"deny","text":"x"}))
        .await;
    assert!(matches!(v.next().await, Event::Refused { .. }));
    v.send(json!({"type":"bogus"})).await;
    assert!(matches!(v.next().await, Event::Refused { .. }));
    assert_eq!(s.answer_of(id), None);

    v.send(json!({"type":"answer","id":id,"answer":"approve"}))
        .await;
    v.send(json!({"type":"answer","id":id,"answer":"deny"}))
        .await;
    // The second answer has no reply of its own; a command that has one,
    // read back, shows both were handled before the run closes the
    // question (else the deny, arriving after the close, is refused, and
    // that reply may be written before the broadcast `closed`).
    v.send(json!({"type":"bogus"})).await;
    assert!(matches!(v.next().await, Event::Refused { what, .. } if what != "answer"));
    let s2 = s.clone();
    let got = tokio::task::spawn_blocking(move || s2.wait_answer(id, Duration::from_secs(5)))
        .await
        .unwrap();
    assert_eq!(
        got,
        Some(ViewAnswer {
            word: "approve".into(),
            text: None
        })
    );
    s.close(id, "view", "approve");
    assert_eq!(
        v.next().await,
        Event::Closed {
            id,
            by: "view".into(),
            answer: "approve".into()
        }
    );
    assert!(matches!(
        v.next().await,
        Event::State {
            phase: Phase::Starting,
            ..
        }
    ));
    let closed = s.take_closed();
    assert_eq!(closed.len(), 1);
    assert_eq!(closed[0].by, "view");
    // A late answer to a closed question is refused.
    v.send(json!({"type":"answer","id":id,"answer":"deny"}))
        .await;
    assert!(matches!(v.next().await, Event::Refused { .. }));

    s.finish("finished");
    assert!(matches!(
        v.next().await,
        Event::State {
            phase: Phase::Finished,
            ..
        }
    ));
    assert!(!dir.path().join(SOCKET_NAME).exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn takeover_is_asked_then_granted_at_the_boundary_and_acts_only_in_control() {
    let dir = tempfile::tempdir().unwrap();
    let s = Served::bind(dir.path(), hello()).unwrap();
    let mut v = Viewer::connect(dir.path()).await;
    v.next().await;
    v.next().await;
    let act = json!({"type":"act","actions":[{"type":"click","button":"left","x":1,"y":2}]});
    v.send(act.clone()).await;
    assert!(matches!(v.next().await, Event::Refused { what, .. } if what == "act"));
    v.send(json!({"type":"give"})).await;
    assert!(matches!(v.next().await, Event::Refused { what, .. } if what == "give"));

    v.send(json!({"type":"take"})).await;
    assert!(matches!(
        v.next().await,
        Event::State {
            holder: Holder::TakeRequested,
            ..
        }
    ));
    assert!(s.take_requested());
    // Still the agent's until the boundary: actions are refused.
    v.send(act.clone()).await;
    assert!(matches!(v.next().await, Event::Refused { .. }));

    s.hand_over();
    assert!(matches!(
        v.next().await,
        Event::State {
            holder: Holder::Operator,
            phase: Phase::Paused,
            ..
        }
    ));
    v.send(act.clone()).await;
    v.send(json!({"type":"give"})).await;
    let first = tokio::time::timeout(Duration::from_secs(5), s.next_command())
        .await
        .unwrap();
    assert_eq!(first, OperatorCommand::Act(vec![act["actions"][0].clone()]));
    let second = tokio::time::timeout(Duration::from_secs(5), s.next_command())
        .await
        .unwrap();
    assert_eq!(second, OperatorCommand::Give);
    s.hand_back(Phase::Model);
    assert!(matches!(
        v.next().await,
        Event::State {
            holder: Holder::Agent,
            phase: Phase::Model,
            ..
        }
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_take_withdrawn_before_the_boundary_leaves_the_agent_in_control() {
    let dir = tempfile::tempdir().unwrap();
    let s = Served::bind(dir.path(), hello()).unwrap();
    let mut v = Viewer::connect(dir.path()).await;
    v.next().await;
    v.next().await;
    v.send(json!({"type":"take"})).await;
    v.next().await;
    v.send(json!({"type":"give"})).await;
    assert!(matches!(
        v.next().await,
        Event::State {
            holder: Holder::Agent,
            ..
        }
    ));
    assert!(!s.take_requested());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_side_that_never_hands_over_refuses_take_and_still_asks() {
    let dir = tempfile::tempdir().unwrap();
    let s = Served::bind(dir.path(), hello()).unwrap();
    s.refuse_takeover("host-cli mcp does not hand the desktop over");
    let mut v = Viewer::connect(dir.path()).await;
    v.next().await;
    v.next().await;
    v.send(json!({"type":"take"})).await;
    assert!(matches!(
        v.next().await,
        Event::Refused { what, why } if what == "take" && why.contains("host-cli mcp")
    ));
    assert!(!s.take_requested());
    let id = s.open(
        QuestionKind::ConfirmAction,
        "t".into(),
        "x".into(),
        None,
        &["approve", "deny"],
    );
    assert!(matches!(v.next().await, Event::Question { id: q, .. } if q == id));
    v.send(json!({"type":"answer","id":id,"answer":"approve"}))
        .await;
    let a = s.wait_answer(id, Duration::from_secs(5)).unwrap();
    assert_eq!(a.word, "approve");
}

#[test]
fn a_stale_socket_is_replaced() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(SOCKET_NAME), b"stale").unwrap();
    rt.block_on(async {
        let s = Served::bind(dir.path(), hello()).unwrap();
        assert!(
            UnixStream::connect(dir.path().join(SOCKET_NAME))
                .await
                .is_ok()
        );
        s.finish("finished");
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_open_across_a_takeover_keeps_the_phase_right() {
    let dir = tempfile::tempdir().unwrap();
    let s = Served::bind(dir.path(), hello()).unwrap();
    let phase = |s: &Served| match s.shared().state.event() {
        Event::State { phase, .. } => phase,
        _ => unreachable!(),
    };
    s.update(|e| e.phase(Phase::Model));
    let id = s.open(
        QuestionKind::Origin,
        "o".into(),
        "t".into(),
        None,
        &["approve", "deny"],
    );
    s.hand_over();
    assert_eq!(phase(&s), Phase::Question, "an open question still shows");
    s.close(id, "terminal", "deny");
    assert_eq!(phase(&s), Phase::Paused);
    let id = s.open(
        QuestionKind::Origin,
        "o".into(),
        "t".into(),
        None,
        &["approve", "deny"],
    );
    s.hand_back(Phase::Model);
    assert_eq!(phase(&s), Phase::Question);
    s.close(id, "view", "approve");
    assert_eq!(
        phase(&s),
        Phase::Model,
        "not Paused after the agent got the desktop back"
    );
    // A question whose run ended is no longer open: nobody waits on it.
    let id = s.open(
        QuestionKind::Origin,
        "o".into(),
        "t".into(),
        None,
        &["approve", "deny"],
    );
    assert!(s.is_open(id));
    s.finish("finished");
    assert!(!s.is_open(id));
}
