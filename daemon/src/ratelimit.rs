//! A limiter for log lines the guest can trigger (docs/security.md A13): a
//! hostile client must not be able to flood the log with rejected
//! requests, nor a chatty X server with its stderr.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// At most `per_window` lines per `window`; the first line after a
/// suppressed stretch says how many were dropped.
#[derive(Debug)]
pub struct LogLimiter {
    per_window: u32,
    window: Duration,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    start: Instant,
    count: u32,
    suppressed: u64,
}

impl LogLimiter {
    pub fn new(per_window: u32, window: Duration) -> LogLimiter {
        LogLimiter {
            per_window,
            window,
            state: Mutex::new(State {
                start: Instant::now(),
                count: 0,
                suppressed: 0,
            }),
        }
    }

    /// `Some(n)` when a line may be logged now, `n` being how many were
    /// suppressed since the last one; `None` when it must be dropped.
    pub fn allow(&self) -> Option<u64> {
        self.allow_at(Instant::now())
    }

    fn allow_at(&self, now: Instant) -> Option<u64> {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if now.duration_since(s.start) >= self.window {
            s.start = now;
            s.count = 0;
        }
        if s.count < self.per_window {
            s.count += 1;
            Some(std::mem::take(&mut s.suppressed))
        } else {
            s.suppressed += 1;
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drops_beyond_the_window_and_reports_how_many() {
        let l = LogLimiter::new(3, Duration::from_secs(10));
        let t = Instant::now();
        assert_eq!(l.allow_at(t), Some(0));
        assert_eq!(l.allow_at(t), Some(0));
        assert_eq!(l.allow_at(t), Some(0));
        for _ in 0..1000 {
            assert_eq!(l.allow_at(t), None);
        }
        assert_eq!(l.allow_at(t + Duration::from_secs(11)), Some(1000));
        assert_eq!(l.allow_at(t + Duration::from_secs(11)), Some(0));
    }
}
