//! A guest's resource limits, the same figures for every backend that
//! enforces them (a container's cgroup, a VM's size).

use serde::Serialize;

const MIB: i64 = 1024 * 1024;

/// Resource limits of one guest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Limits {
    /// Memory, and memory plus swap (no swap at all).
    pub memory_bytes: i64,
    pub pids: i64,
    /// CPU in billionths of a CPU.
    pub nano_cpus: i64,
    pub shm_bytes: i64,
    /// tmpfs sizes (they count against the memory limit as they fill).
    pub tmp_bytes: i64,
    pub home_bytes: i64,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            memory_bytes: 2048 * MIB,
            pids: 512,
            nano_cpus: 2_000_000_000,
            shm_bytes: 256 * MIB,
            tmp_bytes: 256 * MIB,
            home_bytes: 512 * MIB,
        }
    }
}
