//! The wall clock of the programs the daemon starts (`--fake-clock`):
//! libfaketime, preloaded into the window manager (and so the panel and
//! every application launched from it) and the browser, reads a shift
//! from one file that the daemon rewrites when the host sets the time
//! (`POST /v1/clock`, a replay showing the recorded run's time).
//!
//! - The file holds a relative offset (`+0`, `-421`: seconds), so every
//!   program, whenever it started, reads the same time; libfaketime
//!   re-reads it at most once a second (`FAKETIME_CACHE_DURATION=1`).
//! - Monotonic clocks are never shifted (`FAKETIME_DONT_FAKE_MONOTONIC`):
//!   timers, animations and timeouts stay sane.
//! - The daemon's own clock is never shifted: it is not preloaded.
//! - The file is replaced by a rename, so a program never reads half of it.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// The fake clock's file and library.
#[derive(Debug, Clone)]
pub struct FakeClock {
    file: PathBuf,
    lib: PathBuf,
}

impl FakeClock {
    /// Uses `file` (created now with no shift) and the libfaketime
    /// library `lib`, which must exist.
    pub fn new(file: PathBuf, lib: PathBuf) -> std::io::Result<FakeClock> {
        if !lib.is_file() {
            return Err(std::io::Error::other(format!(
                "the fake clock's library {} is missing (Debian's libfaketime)",
                lib.display()
            )));
        }
        let c = FakeClock { file, lib };
        c.write(0)?;
        Ok(c)
    }

    /// The environment a program started with it reads the shifted clock
    /// through.
    pub fn env(&self) -> Vec<(&'static str, OsString)> {
        vec![
            ("LD_PRELOAD", self.lib.clone().into_os_string()),
            (
                "FAKETIME_TIMESTAMP_FILE",
                self.file.clone().into_os_string(),
            ),
            ("FAKETIME_CACHE_DURATION", "1".into()),
            ("FAKETIME_DONT_FAKE_MONOTONIC", "1".into()),
            ("DONT_FAKE_MONOTONIC", "1".into()),
        ]
    }

    /// Sets the programs' clock to `unix_ms` now (`None`: the real time);
    /// returns the shift in whole seconds.
    pub fn set(&self, unix_ms: Option<u64>) -> std::io::Result<i64> {
        let offset = match unix_ms {
            None => 0,
            Some(t) => offset_s(t, now_ms()),
        };
        self.write(offset)?;
        Ok(offset)
    }

    fn write(&self, offset: i64) -> std::io::Result<()> {
        let dir = self.file.parent().unwrap_or(Path::new("."));
        let name = self
            .file
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let tmp = dir.join(format!(".{name}.new"));
        std::fs::write(&tmp, format!("{offset:+}\n"))?;
        std::fs::rename(&tmp, &self.file)
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// The shift from `now_ms` to `target_ms`, in whole seconds (rounded).
pub fn offset_s(target_ms: u64, now_ms: u64) -> i64 {
    let d = i128::from(target_ms) - i128::from(now_ms);
    let s = (d + if d < 0 { -500 } else { 500 }) / 1000;
    i64::try_from(s).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_holds_the_shift_in_seconds_and_is_replaced_whole() {
        let dir = tempfile::tempdir().unwrap();
        let lib = dir.path().join("libfaketime.so.1");
        std::fs::write(&lib, b"").unwrap();
        let file = dir.path().join("clock");
        let c = FakeClock::new(file.clone(), lib).unwrap();
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "+0\n");
        let an_hour_ago = now_ms() - 3_600_000;
        let off = c.set(Some(an_hour_ago)).unwrap();
        assert!((-3601..=-3599).contains(&off), "{off}");
        assert_eq!(
            std::fs::read_to_string(&file).unwrap(),
            format!("{off:+}\n")
        );
        assert_eq!(c.set(None).unwrap(), 0);
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "+0\n");
        // Only the file itself is left: the temporary one was renamed.
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 2);
        assert!(FakeClock::new(file, dir.path().join("missing.so")).is_err());
    }

    #[test]
    fn offsets_round_to_the_nearest_second() {
        assert_eq!(offset_s(10_000, 10_000), 0);
        assert_eq!(offset_s(10_499, 10_000), 0);
        assert_eq!(offset_s(10_500, 10_000), 1);
        assert_eq!(offset_s(9_500, 10_000), -1);
        assert_eq!(offset_s(9_501, 10_000), 0);
        assert_eq!(offset_s(0, 421_000), -421);
    }
}
