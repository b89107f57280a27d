//! What both ends of the control socket share: the capped line reader and
//! the check of the operator's actions.

use sandtop_protocol::Action;
use tokio::io::AsyncBufReadExt as _;

use super::wire::MAX_LINE_BYTES;

/// Reads one line (without its end) of at most [`MAX_LINE_BYTES`];
/// `Ok(false)` at the end of the stream. A longer line is an error (the
/// connection is dropped), never a partial message. Not for a
/// `tokio::select!` branch: dropped mid-line, it loses what it had read
/// (use [`fill_line`] there).
pub async fn read_line<R: tokio::io::AsyncBufRead + Unpin>(
    r: &mut R,
    line: &mut Vec<u8>,
) -> std::io::Result<bool> {
    line.clear();
    fill_line(r, line).await
}

/// [`read_line`] that goes on from what `line` holds and does not clear
/// it: cancel-safe, so a `tokio::select!` branch whose future is dropped
/// while a line is half arrived (another branch won) loses nothing; the
/// next call completes the line. The caller clears `line` once it has used
/// a complete one. (A line written in pieces, as `writeln!` on an
/// unbuffered socket does, with an event sent meanwhile, was lost whole:
/// an answer from the view that never arrived.)
pub async fn fill_line<R: tokio::io::AsyncBufRead + Unpin>(
    r: &mut R,
    line: &mut Vec<u8>,
) -> std::io::Result<bool> {
    loop {
        let buf = r.fill_buf().await?;
        if buf.is_empty() {
            return Ok(false);
        }
        let (take, done) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (buf.len(), false),
        };
        if line.len() + take > MAX_LINE_BYTES + 1 {
            return Err(std::io::Error::other("a control line over its limit"));
        }
        line.extend_from_slice(&buf[..take]);
        r.consume(take);
        if done {
            line.pop();
            return Ok(true);
        }
    }
}

/// The operator's actions, checked as strictly as the model's: the
/// Responses API shape (unknown fields refused), the limits. They are in
/// screen pixels; the daemon refuses a point outside the screen.
pub fn parse_actions(actions: &[serde_json::Value]) -> Result<Vec<Action>, String> {
    if actions.is_empty() || actions.len() > sandtop_protocol::limits::MAX_ACTIONS {
        return Err(format!(
            "1 to {} actions, got {}",
            sandtop_protocol::limits::MAX_ACTIONS,
            actions.len()
        ));
    }
    actions
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let a = Action::from_model_value(v).map_err(|e| format!("action {i}: {e}"))?;
            a.check_limits().map_err(|e| format!("action {i}: {e}"))?;
            Ok(a)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use tokio::io::BufReader;

    #[test]
    fn operator_actions_are_checked_like_the_models() {
        assert!(parse_actions(&[json!({"type":"click","button":"left","x":3,"y":4})]).is_ok());
        let e = parse_actions(&[json!({"type":"click","button":"left","x":3,"y":4,"z":1})])
            .unwrap_err();
        assert!(e.starts_with("action 0"), "{e}");
        assert!(parse_actions(&[]).is_err());
        let long = "x".repeat(sandtop_protocol::limits::MAX_TYPE_CHARS + 1);
        assert!(parse_actions(&[json!({"type":"type","text": long})]).is_err());
    }

    #[tokio::test]
    async fn a_control_line_over_its_limit_is_refused() {
        let mut big = vec![b'a'; MAX_LINE_BYTES + 10];
        big.push(b'\n');
        let mut r = BufReader::new(&big[..]);
        let mut line = Vec::new();
        assert!(read_line(&mut r, &mut line).await.is_err());
        let mut r = BufReader::new(&b"{\"a\":1}\nrest"[..]);
        assert!(read_line(&mut r, &mut line).await.unwrap());
        assert_eq!(line, b"{\"a\":1}");
        // An unterminated tail is no message: the end of the stream.
        assert!(!read_line(&mut r, &mut line).await.unwrap());
    }

    /// A line that arrives in pieces, its read dropped between them as a
    /// `select!` branch that lost is: the next read completes it.
    #[tokio::test]
    async fn a_line_whose_read_is_dropped_halfway_is_completed_by_the_next() {
        let (mut w, r) = tokio::io::duplex(64);
        let mut r = BufReader::new(r);
        let mut line = Vec::new();
        use tokio::io::AsyncWriteExt as _;
        w.write_all(b"{\"type\":\"answer\",").await.unwrap();
        let dropped = tokio::time::timeout(
            std::time::Duration::from_millis(50),
            fill_line(&mut r, &mut line),
        )
        .await;
        assert!(dropped.is_err(), "no line was complete yet");
        w.write_all(b"\"id\":2}\nnext\n").await.unwrap();
        assert!(fill_line(&mut r, &mut line).await.unwrap());
        assert_eq!(line, b"{\"type\":\"answer\",\"id\":2}");
        line.clear();
        assert!(fill_line(&mut r, &mut line).await.unwrap());
        assert_eq!(line, b"next");
    }
}
