//! Cancellation and the deadline of one request: below the driver, the
//! desktop task and the API, which all check it (so none of them depends
//! on another for it).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use sandtop_protocol::ErrorCode;

/// The request was cancelled or ran past its deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("cancelled")]
pub struct Cancelled;

/// Cancellation and deadline of one request, checked between primitives.
#[derive(Debug, Clone)]
pub struct Cancel {
    flag: Arc<AtomicBool>,
    deadline: Instant,
}

impl Cancel {
    pub fn new(deadline: Instant) -> Cancel {
        Cancel {
            flag: Arc::default(),
            deadline,
        }
    }

    pub fn cancel(&self) {
        self.flag.store(true, Ordering::Release);
    }

    pub fn is_cancelled(&self) -> bool {
        self.flag.load(Ordering::Acquire)
    }

    /// `Err(Cancelled)` once cancelled or past the deadline.
    pub fn check(&self) -> Result<(), Cancelled> {
        if self.is_cancelled() || Instant::now() >= self.deadline {
            Err(Cancelled)
        } else {
            Ok(())
        }
    }

    /// The wire code for a stop: `cancelled` or `timeout`.
    pub fn code(&self) -> ErrorCode {
        if self.is_cancelled() {
            ErrorCode::Cancelled
        } else {
            ErrorCode::Timeout
        }
    }
}
