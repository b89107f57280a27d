use std::time::Instant;

use super::*;
use crate::driver::fake::{Event, FakeDriver};

fn steps(actions: serde_json::Value) -> Vec<Step> {
    let req: BatchRequest =
        serde_json::from_value(serde_json::json!({"actions": actions})).unwrap();
    plan(&req, Size::new(800, 600)).unwrap().0
}

/// Runs `actions` on a fake driver; returns the events and, for each
/// delivery wait, how many events had been sent before it.
fn delivered(actions: serde_json::Value) -> (Vec<Event>, Vec<usize>) {
    let mut d = FakeDriver::new(Size::new(800, 600));
    let state = d.state();
    let mut input = Input::default();
    let cancel = Cancel::new(Instant::now() + Duration::from_secs(10));
    run(&mut d, &mut input, &steps(actions), &cancel).unwrap();
    let s = state.lock().unwrap();
    (s.events.clone(), s.delivered_at.clone())
}

#[test]
fn keys_after_a_click_wait_for_the_click_to_be_delivered() {
    let (ev, at) = delivered(serde_json::json!([
        {"type": "click", "button": "left", "x": 10, "y": 20},
        {"type": "type", "text": "ab"},
        {"type": "click", "button": "left", "x": 30, "y": 40}
    ]));
    // motion, press, release | a, b | motion, press, release |
    assert_eq!(ev.len(), 8, "{ev:?}");
    assert_eq!(ev[2], Event::Button(1, false));
    assert_eq!(ev[3], Event::Char('a'));
    // After each press (2, 7) and release (3, 8), and before the pointer
    // moves again after typing (5); the end of the batch adds nothing.
    assert_eq!(at, vec![2, 3, 5, 7, 8], "{ev:?}");
}

#[test]
fn held_keys_are_released_only_after_the_click_was_delivered() {
    let (ev, at) = delivered(serde_json::json!([
        {"type": "click", "button": "left", "x": 10, "y": 20, "keys": ["SHIFT"]}
    ]));
    let release = ev
        .iter()
        .position(|e| *e == Event::Button(1, false))
        .unwrap();
    let shift_up = ev
        .iter()
        .position(|e| matches!(e, Event::Key(_, false)))
        .unwrap();
    assert!(
        at.iter().any(|&n| n > release && n <= shift_up),
        "{ev:?} {at:?}"
    );
}

#[test]
fn a_drag_waits_after_its_first_motion_while_pressed() {
    let (ev, at) = delivered(serde_json::json!([
        {"type": "drag", "path": [{"x": 0, "y": 0}, {"x": 100, "y": 0}]}
    ]));
    let press = ev
        .iter()
        .position(|e| *e == Event::Button(1, true))
        .unwrap();
    // The press, and the first motion after it, are each followed by a
    // wait.
    assert_eq!(&at[..2], &[press + 1, press + 2], "{ev:?} {at:?}");
    assert_eq!(at.last(), Some(&ev.len()));
}

#[test]
fn a_batch_counts_as_done_only_once_delivered() {
    for actions in [
        serde_json::json!([{"type": "move", "x": 1, "y": 2}]),
        serde_json::json!([{"type": "type", "text": "x"}]),
        serde_json::json!([{"type": "keypress", "keys": ["CTRL", "A"]}]),
    ] {
        let (ev, at) = delivered(actions);
        assert_eq!(at.last(), Some(&ev.len()), "{ev:?} {at:?}");
    }
    // Nothing sent, nothing to wait for.
    let (_, at) = delivered(serde_json::json!([{"type": "screenshot"}]));
    assert!(at.is_empty());
}

#[test]
fn input_still_frozen_at_the_deadline_fails_that_action_and_releases_everything() {
    let mut d = FakeDriver::new(Size::new(800, 600));
    let state = d.state();
    state.lock().unwrap().blocked = true;
    let mut input = Input::default();
    let cancel = Cancel::new(Instant::now() + Duration::from_secs(10));
    let f = run(
        &mut d,
        &mut input,
        &steps(serde_json::json!([
            {"type": "move", "x": 5, "y": 5},
            {"type": "click", "button": "left", "x": 10, "y": 20, "keys": ["SHIFT"]},
            {"type": "type", "text": "never"}
        ])),
        &cancel,
    )
    .unwrap_err();
    assert_eq!(f.index, 1);
    assert!(f.partial);
    assert!(
        matches!(f.error, DriverError::InputBlocked(_)),
        "{:?}",
        f.error
    );
    assert!(input.is_clear());
    let s = state.lock().unwrap();
    assert!(
        !s.events.iter().any(|e| matches!(e, Event::Char(_))),
        "{:?}",
        s.events
    );
    // Nothing stays held: every press has its release.
    let count = |want: &Event| s.events.iter().filter(|e| *e == want).count();
    let shift = xkeysym::key::Shift_L;
    assert_eq!(
        count(&Event::Key(shift, true)),
        count(&Event::Key(shift, false))
    );
    assert_eq!(
        count(&Event::Button(1, true)),
        count(&Event::Button(1, false))
    );
}

#[test]
fn scroll_distance_becomes_a_few_wheel_clicks() {
    assert_eq!(wheel_clicks(0), 0);
    assert_eq!(wheel_clicks(1), 1);
    assert_eq!(wheel_clicks(-1), -1);
    assert_eq!(wheel_clicks(50), 1);
    assert_eq!(wheel_clicks(74), 1);
    assert_eq!(wheel_clicks(75), 2);
    assert_eq!(wheel_clicks(300), 6);
    assert_eq!(wheel_clicks(-300), -6);
    assert_eq!(wheel_clicks(10_000), 200);
}

#[test]
fn intermediate_points_are_bounded_and_between() {
    assert!(intermediate((0, 0), (10, 0)).is_empty());
    let pts = intermediate((0, 0), (100, 50));
    assert_eq!(pts.len(), 6);
    let mut prev = (0u32, 0u32);
    for &p in pts.iter().chain([(100, 50)].iter()) {
        assert!(p.0.abs_diff(prev.0) <= DRAG_STEP_PX && p.1.abs_diff(prev.1) <= DRAG_STEP_PX);
        prev = p;
    }
    // Long segments are not capped into bigger jumps.
    let long = intermediate((0, 0), (8000, 10));
    assert_eq!(long.len(), 499);
    let mut prev = (0u32, 0u32);
    for &p in long.iter().chain([(8000, 10)].iter()) {
        assert!(p.0.abs_diff(prev.0) <= DRAG_STEP_PX);
        prev = p;
    }
    assert_eq!(intermediate((100, 100), (0, 0)).len(), 6);
}

#[test]
fn keys_after_a_shortcut_wait_for_its_reaction_once_it_is_delivered() {
    let (ev, at) = delivered(serde_json::json!([
        {"type": "keypress", "keys": ["CTRL", "L"]},
        {"type": "type", "text": "ab"},
        {"type": "keypress", "keys": ["F6"]},
        {"type": "keypress", "keys": ["ENTER"]}
    ]));
    // watch | ctrl down, l down, l up, ctrl up | react | a, b |
    // watch | F6 down, up | react | Enter down, up
    use xkeysym::key as k;
    assert_eq!(
        ev,
        vec![
            Event::Watch,
            Event::Key(k::Control_L, true),
            Event::Key(u32::from(b'l'), true),
            Event::Key(u32::from(b'l'), false),
            Event::Key(k::Control_L, false),
            Event::React,
            Event::Char('a'),
            Event::Char('b'),
            Event::Watch,
            Event::Key(k::F6, true),
            Event::Key(k::F6, false),
            Event::React,
            Event::Key(k::Return, true),
            Event::Key(k::Return, false),
        ]
    );
    // Delivered before each wait for the reaction (the record counts the
    // watches and waits too), and before watching the second shortcut.
    assert!(
        at.contains(&5) && at.contains(&8) && at.contains(&11),
        "{ev:?} {at:?}"
    );
}

#[test]
fn only_a_shortcut_followed_by_keys_waits_for_a_reaction() {
    for actions in [
        // The last action: the final settle covers it.
        serde_json::json!([{"type": "keypress", "keys": ["CTRL", "T"]}]),
        // Shift alone types; Enter and Tab are keys, not shortcuts.
        serde_json::json!([
            {"type": "keypress", "keys": ["SHIFT", "A"]},
            {"type": "type", "text": "b"},
            {"type": "keypress", "keys": ["ENTER"]},
            {"type": "type", "text": "c"},
            {"type": "keypress", "keys": ["TAB"]},
            {"type": "keypress", "keys": ["A"]}
        ]),
        // Pointer input next: no keys to misplace.
        serde_json::json!([
            {"type": "keypress", "keys": ["CTRL", "L"]},
            {"type": "click", "button": "left", "x": 1, "y": 1}
        ]),
        // A wait in between settles anyway.
        serde_json::json!([
            {"type": "keypress", "keys": ["ALT", "F4"]},
            {"type": "wait"},
            {"type": "type", "text": "x"}
        ]),
    ] {
        let (ev, _) = delivered(actions.clone());
        assert!(
            !ev.contains(&Event::React) && !ev.contains(&Event::Watch),
            "{actions}: {ev:?}"
        );
    }
    for keys in [
        vec!["ALT", "TAB"],
        vec!["SUPER", "E"],
        vec!["META", "X"],
        vec!["F3"],
        vec!["CTRL", "SHIFT", "T"],
    ] {
        let (ev, _) = delivered(serde_json::json!([
            {"type": "keypress", "keys": keys},
            {"type": "type", "text": "x"}
        ]));
        assert!(ev.contains(&Event::React), "{keys:?}: {ev:?}");
    }
}

/// `mouse_down` leaves its button held past the batch (the one exception to
/// "nothing stays held", docs/contract.md rule 66); a second press of a held
/// button and a release of one not held send nothing; a later failure
/// releases it.
#[test]
fn mouse_down_stays_held_until_mouse_up_or_a_failure() {
    let mut d = FakeDriver::new(Size::new(800, 600));
    let state = d.state();
    let mut input = Input::default();
    let cancel = Cancel::new(Instant::now() + Duration::from_secs(10));
    let down = steps(serde_json::json!([
        {"type": "move", "x": 10, "y": 20},
        {"type": "mouse_down", "button": "left"},
        {"type": "mouse_down", "button": "left"}
    ]));
    run(&mut d, &mut input, &down, &cancel).unwrap();
    assert!(input.holds_button(1) && !input.is_clear());
    let up = steps(serde_json::json!([
        {"type": "mouse_up", "button": "left"},
        {"type": "mouse_up", "button": "left"}
    ]));
    run(&mut d, &mut input, &up, &cancel).unwrap();
    assert!(input.is_clear());
    {
        let s = state.lock().unwrap();
        let buttons: Vec<&Event> = s
            .events
            .iter()
            .filter(|e| matches!(e, Event::Button(..)))
            .collect();
        assert_eq!(buttons, [&Event::Button(1, true), &Event::Button(1, false)]);
    }
    // Held again, then a batch that fails while running releases it.
    run(&mut d, &mut input, &down, &cancel).unwrap();
    let stopped = Cancel::new(Instant::now());
    let typing = steps(serde_json::json!([{"type": "type", "text": "abc"}]));
    run(&mut d, &mut input, &typing, &stopped).unwrap_err();
    assert!(input.is_clear());
    let s = state.lock().unwrap();
    assert_eq!(s.events.last(), Some(&Event::Button(1, false)));
}

#[test]
fn hold_key_presses_in_order_and_releases_in_reverse() {
    let (ev, _) = delivered(serde_json::json!([
        {"type": "hold_key", "keys": ["SHIFT", "a"], "duration_ms": 5}
    ]));
    let (shift, a) = (xkeysym::key::Shift_L, xkeysym::key::a);
    let keys: Vec<(u32, bool)> = ev
        .iter()
        .filter_map(|e| match e {
            Event::Key(k, down) => Some((*k, *down)),
            _ => None,
        })
        .collect();
    assert_eq!(keys, [(shift, true), (a, true), (a, false), (shift, false)]);
}
