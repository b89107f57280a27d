//! When the screen has settled after input (docs/contract.md 2c): the
//! rule on its own, fed the times X reported damage, so that it is tested
//! without a server ([`Quiet`]); `x11` feeds it from DAMAGE.
//!
//! The wait starts once the server has processed the input (the batch's
//! delivery and a round trip). Then:
//! 1. **Nothing drawn yet**: the screen counts as settled when no damage
//!    came for [`Rule::idle`] (the final screenshot: 15 ms) since the
//!    start: a program's first paint is waited for that long.
//! 2. **Something drawn** (damage since the batch began, or during the
//!    wait): settled when no damage came, since the last one, for the
//!    longer of [`Rule::drawn`] (4 ms) and [`Rule::stretch`] times the
//!    longest interval of the reaction so far (from the start to its
//!    first damage, and between two damages), never more than
//!    [`Rule::idle`]. A program that answered at once and paints in one
//!    burst (an echoed key) ends the wait 4 ms after its last paint; one
//!    that took 5 ms to answer, or paints every 3 ms, gets twice that.
//! 3. Never longer than [`Rule::cap`] (an animation never goes quiet).
//!
//! Where it can be fooled: a first paint later than `idle` after the
//! input was processed (a page that loads: the `wait` action is for
//! that); a pause inside a reaction longer than what (2) asks for at that
//! point (a program that paints at once, then again 10 ms later); damage
//! from something else (a blinking caret, a clock, a button's hover
//! repaint after the pointer moved in the same batch) counts as a
//! reaction, so it can end the wait 4 ms after it while the real reaction
//! (a menu the click opens 8 ms later) is still to come; drawing the X
//! server has not processed yet is not seen.

use std::time::Duration;

use sandtop_protocol::limits;

/// How much quiet ends a wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule {
    /// Nothing drawn since the start: this long without damage.
    pub idle: Duration,
    /// Something drawn: at least this long without damage after the last.
    pub drawn: Duration,
    /// ... and at least this many times the longest interval of the
    /// reaction so far (0: `drawn` alone); never more than `idle`.
    pub stretch: u32,
    /// The whole wait, at most.
    pub cap: Duration,
}

impl Rule {
    /// Before the final screenshot of a batch.
    pub fn after_input() -> Rule {
        Rule {
            idle: Duration::from_millis(limits::SETTLE_QUIET_MS),
            drawn: Duration::from_millis(limits::SETTLE_DRAWN_QUIET_MS),
            stretch: limits::SETTLE_STRETCH,
            cap: Duration::from_millis(limits::SETTLE_CAP_MS),
        }
    }

    /// The `wait` action: one fixed quiet, whatever was drawn.
    pub fn wait() -> Rule {
        let quiet = Duration::from_millis(limits::WAIT_QUIET_MS);
        Rule {
            idle: quiet,
            drawn: quiet,
            stretch: 0,
            cap: Duration::from_millis(limits::WAIT_CAP_MS),
        }
    }
}

/// What to do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Quiet long enough: settled.
    Settled,
    /// The cap passed first.
    Capped,
    /// Look again after at most this long (or at the next damage).
    Wait(Duration),
}

/// One wait's state. Times are offsets from its start.
#[derive(Debug, Clone)]
pub struct Quiet {
    rule: Rule,
    /// The first and last damage (`None`: nothing drawn yet).
    first: Option<Duration>,
    last: Duration,
    /// The longest interval of the reaction so far.
    longest: Duration,
    damages: u32,
}

impl Quiet {
    pub fn new(rule: Rule) -> Quiet {
        Quiet {
            rule,
            first: None,
            last: Duration::ZERO,
            longest: Duration::ZERO,
            damages: 0,
        }
    }

    /// Damage came before the start (after the batch began): the reaction
    /// is under way, as if it had drawn at the start.
    pub fn drawn_before(&mut self) {
        self.damage(Duration::ZERO);
    }

    /// Damage was seen at `at`.
    pub fn damage(&mut self, at: Duration) {
        let at = at.max(self.last);
        self.longest = self.longest.max(at - self.last);
        self.first.get_or_insert(at);
        self.last = at;
        self.damages += 1;
    }

    /// The quiet the rule asks for now, after the last damage (or after
    /// the start when nothing was drawn).
    pub fn needed(&self) -> Duration {
        match self.first {
            None => self.rule.idle,
            Some(_) => (self.longest * self.rule.stretch)
                .max(self.rule.drawn)
                .min(self.rule.idle.max(self.rule.drawn)),
        }
    }

    /// At `now`: settled, capped, or how long to wait at most.
    pub fn next(&self, now: Duration) -> Next {
        let quiet_for = now.saturating_sub(self.last);
        let needed = self.needed();
        if quiet_for >= needed {
            return Next::Settled;
        }
        if now >= self.rule.cap {
            return Next::Capped;
        }
        Next::Wait((needed - quiet_for).min(self.rule.cap - now))
    }

    /// Whether anything was drawn.
    pub fn drawn(&self) -> bool {
        self.first.is_some()
    }

    /// (first damage, last damage, how many), for the log.
    pub fn summary(&self) -> (Option<Duration>, Option<Duration>, u32) {
        (self.first, self.first.map(|_| self.last), self.damages)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    fn us(v: u64) -> Duration {
        Duration::from_micros(v)
    }

    /// Runs the rule over damage at `times` (offsets): when it ends and how.
    fn run(rule: Rule, before: bool, times: &[Duration]) -> (Duration, Next) {
        let mut q = Quiet::new(rule);
        if before {
            q.drawn_before();
        }
        let mut now = Duration::ZERO;
        let mut i = 0;
        loop {
            match q.next(now) {
                Next::Wait(w) => {
                    let until = now + w;
                    match times.get(i) {
                        Some(&t) if t <= until => {
                            now = t.max(now);
                            q.damage(now);
                            i += 1;
                        }
                        _ => now = until,
                    }
                }
                end => return (now, end),
            }
        }
    }

    #[test]
    fn nothing_drawn_waits_the_idle_quiet_from_the_start() {
        let (at, how) = run(Rule::after_input(), false, &[]);
        assert_eq!((at, how), (ms(limits::SETTLE_QUIET_MS), Next::Settled));
    }

    #[test]
    fn a_first_paint_inside_the_idle_quiet_is_waited_for() {
        // 12 ms to answer: then twice that is asked, capped at 15 ms.
        let (at, how) = run(Rule::after_input(), false, &[ms(12)]);
        assert_eq!(how, Next::Settled);
        assert_eq!(at, ms(12 + 15));
        // Past the idle quiet: not waited for (where the rule is fooled).
        let (at, _) = run(Rule::after_input(), false, &[ms(16)]);
        assert_eq!(at, ms(15));
    }

    #[test]
    fn a_quick_burst_ends_the_wait_soon_after_its_last_paint() {
        // An echoed key: answered in 0.8 ms, three paints 0.2 ms apart.
        let (at, how) = run(Rule::after_input(), false, &[us(800), us(1000), us(1200)]);
        assert_eq!(how, Next::Settled);
        assert_eq!(at, us(1200) + ms(limits::SETTLE_DRAWN_QUIET_MS));
        // Drawn during the batch already: the short quiet from the start.
        let (at, _) = run(Rule::after_input(), true, &[]);
        assert_eq!(at, ms(limits::SETTLE_DRAWN_QUIET_MS));
    }

    #[test]
    fn a_window_still_drawing_is_waited_for_until_it_stops() {
        // Paints every 3 ms for 60 ms (shorter than the drawn quiet).
        let times: Vec<Duration> = (0..=20).map(|i| us(500) + ms(3 * i)).collect();
        let (at, how) = run(Rule::after_input(), false, &times);
        assert_eq!(how, Next::Settled);
        assert!(at > *times.last().unwrap(), "ended at {at:?}");
        // Every 6 ms, from a first paint 6 ms after the input: the
        // stretch keeps up (each interval is under twice the longest).
        let times: Vec<Duration> = (1..=10).map(|i| ms(6 * i)).collect();
        let (at, how) = run(Rule::after_input(), false, &times);
        assert_eq!(how, Next::Settled);
        assert_eq!(at, ms(60 + 12));
    }

    #[test]
    fn a_pause_longer_than_asked_for_ends_the_wait_early() {
        // Where the rule is fooled: at once, then again 10 ms later.
        let (at, _) = run(Rule::after_input(), false, &[us(300), us(10_300)]);
        assert_eq!(at, us(300) + ms(limits::SETTLE_DRAWN_QUIET_MS));
    }

    #[test]
    fn a_screen_that_never_goes_quiet_stops_at_the_cap() {
        let times: Vec<Duration> = (0..2_000).map(|i| us(500 * i)).collect();
        let (at, how) = run(Rule::after_input(), false, &times);
        assert_eq!(how, Next::Capped);
        assert_eq!(at, ms(limits::SETTLE_CAP_MS));
    }

    #[test]
    fn the_wait_action_asks_one_fixed_quiet() {
        let (at, _) = run(Rule::wait(), false, &[ms(1)]);
        assert_eq!(at, ms(1 + limits::WAIT_QUIET_MS));
        let (at, _) = run(Rule::wait(), false, &[]);
        assert_eq!(at, ms(limits::WAIT_QUIET_MS));
    }
}
