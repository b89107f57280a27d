//! A task's scripted solution as the scripted model's script: each turn
//! one `computer_call` (GA shape, no safety check) with the turn's
//! actions, then an assistant message that ends the run. The loop, the
//! preflight, the daemon and the checks are the real ones; only the
//! model's answers are fixed.

use std::collections::VecDeque;

use serde_json::Value;

use sandtop_agent::model::scripted::{Fixed, ScriptedModel, computer_call, message};

/// The scripted model that plays `turns`, then says it is done.
pub fn model(turns: &[Vec<Value>]) -> ScriptedModel {
    ScriptedModel::new(Box::new(fixed(turns)))
}

/// The script itself.
pub fn fixed(turns: &[Vec<Value>]) -> Fixed {
    let mut out: VecDeque<Vec<Value>> = turns
        .iter()
        .zip(1u32..)
        .map(|(actions, n)| vec![computer_call(n, actions.clone(), vec![])])
        .collect();
    let n = u32::try_from(turns.len())
        .unwrap_or(u32::MAX)
        .saturating_add(1);
    out.push_back(vec![message(n, "Done: the task's solution was played.")]);
    Fixed(out)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use sandtop_agent::model::scripted::Script as _;

    use super::*;

    #[test]
    fn a_solution_is_one_call_per_turn_then_a_message() {
        let mut f = fixed(&[
            vec![json!({"type": "wait"})],
            vec![json!({"type": "type", "text": "x"})],
        ]);
        let a = f.next(&json!({})).unwrap().unwrap();
        assert_eq!(a[0]["type"], "computer_call");
        assert_eq!(a[0]["actions"], json!([{"type": "wait"}]));
        assert_eq!(a[0]["pending_safety_checks"], json!([]));
        let b = f.next(&json!({})).unwrap().unwrap();
        assert_eq!(b[0]["call_id"], "call_scripted_2");
        let c = f.next(&json!({})).unwrap().unwrap();
        assert_eq!(c[0]["type"], "message");
        assert!(f.next(&json!({})).unwrap().is_none());
    }
}
