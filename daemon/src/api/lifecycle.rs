//! The daemon's lifecycle: `open`, then `draining` once a stop was
//! requested while work is in flight, then `closed` once none is
//! (docs/contract.md rule 7; reported by `/v1/info` as `state`).
//!
//! Work is what may act on the desktop or the browser: `/v1/actions`,
//! `/v1/screenshot` and `/v1/browser/*`. Each such request holds a
//! [`WorkGuard`] from the moment the router matched it until its handler
//! returns or is dropped, and a desktop job whose client went away still
//! holds the input gate until it stops: both count as in flight. Reads
//! (`/v1/health`, `/v1/info`) are not work; they are answered through the
//! drain so a host can watch it.
//!
//! Admission and the stop are serialised by the counter's lock: a request
//! either got in before the stop (and the drain waits for it) or is
//! refused with `shutting_down`; never both, never neither.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use sandtop_protocol::DaemonState;
use tokio::sync::{Semaphore, watch};

/// The lifecycle of one daemon.
#[derive(Debug)]
pub struct Lifecycle {
    stopping: AtomicBool,
    /// Work requests in flight.
    work: watch::Sender<usize>,
    /// The desktop's input gate: held while a job runs, even one whose
    /// request is gone.
    gate: Arc<Semaphore>,
}

/// One work request in flight; dropping it ends it.
#[derive(Debug)]
pub struct WorkGuard(Arc<Lifecycle>);

impl Drop for WorkGuard {
    fn drop(&mut self) {
        self.0.work.send_modify(|n| *n = n.saturating_sub(1));
    }
}

impl Lifecycle {
    /// An open lifecycle; `gate` is the desktop's input gate.
    pub fn new(gate: Arc<Semaphore>) -> Lifecycle {
        Lifecycle {
            stopping: AtomicBool::new(false),
            work: watch::Sender::new(0),
            gate,
        }
    }

    /// Admits one work request, or `None` once a stop was requested.
    pub fn begin_work(self: &Arc<Self>) -> Option<WorkGuard> {
        let mut admitted = false;
        self.work.send_if_modified(|n| {
            if self.stopping.load(Ordering::Acquire) {
                return false;
            }
            *n += 1;
            admitted = true;
            true
        });
        admitted.then(|| WorkGuard(Arc::clone(self)))
    }

    /// Requests the stop: from now on work is refused. Idempotent.
    pub fn stop(&self) {
        self.work
            .send_modify(|_| self.stopping.store(true, Ordering::Release));
    }

    /// Whether a stop was requested.
    pub fn stopping(&self) -> bool {
        self.stopping.load(Ordering::Acquire)
    }

    /// Work requests in flight now.
    pub fn work_in_flight(&self) -> usize {
        *self.work.borrow()
    }

    /// Whether nothing is in flight: no work request, no desktop job.
    pub fn idle(&self) -> bool {
        self.work_in_flight() == 0 && self.gate.available_permits() > 0
    }

    /// The state now.
    pub fn state(&self) -> DaemonState {
        if !self.stopping() {
            DaemonState::Open
        } else if self.idle() {
            DaemonState::Closed
        } else {
            DaemonState::Draining
        }
    }

    /// Waits until nothing is in flight. Work requests end with a wake-up;
    /// a desktop job whose request is gone is polled (its own deadline
    /// ends it).
    pub async fn drained(&self) {
        let mut work = self.work.subscribe();
        loop {
            if self.idle() {
                return;
            }
            tokio::select! {
                _ = work.changed() => {}
                _ = tokio::time::sleep(Duration::from_millis(20)) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn open_draining_closed() {
        let gate = Arc::new(Semaphore::new(1));
        let life = Arc::new(Lifecycle::new(Arc::clone(&gate)));
        assert_eq!(life.state(), DaemonState::Open);
        let a = life.begin_work().unwrap();
        let b = life.begin_work().unwrap();
        assert_eq!(life.work_in_flight(), 2);
        assert_eq!(life.state(), DaemonState::Open);
        life.stop();
        assert_eq!(life.state(), DaemonState::Draining);
        assert!(life.begin_work().is_none(), "work is refused once stopping");
        assert_eq!(life.work_in_flight(), 2);
        drop(a);
        assert_eq!(life.state(), DaemonState::Draining);
        let waiter = {
            let life = Arc::clone(&life);
            tokio::spawn(async move { life.drained().await })
        };
        // A desktop job that outlives its request keeps it draining.
        let job = Arc::clone(&gate).try_acquire_owned().unwrap();
        drop(b);
        assert_eq!(life.state(), DaemonState::Draining);
        tokio::time::sleep(Duration::from_millis(60)).await;
        assert!(!waiter.is_finished());
        drop(job);
        tokio::time::timeout(Duration::from_secs(2), waiter)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(life.state(), DaemonState::Closed);
        life.stop();
        assert_eq!(life.state(), DaemonState::Closed);
    }
}
