//! The wall clock of the programs the daemon starts (`--fake-clock`):
//! libfaketime, preloaded into the window manager (and so the panel and
//! every application launched from it) and the browser, reads a shift
//! from one file that the daemon rewrites when the host sets the time
//! (`POST /v1/clock`, a replay showing the recorded run's time).
//!
//! - The library is the guest image's own build of libfaketime 0.9.12
//!   (guest-image/libfaketime: Debian's bookworm 0.9.10 hangs Firefox ESR
//!   and does not shift `statx`), with `FAKETIME_MAP_TIMESTAMP_FILE`: each
//!   process maps the file once when it starts and reads the shift from
//!   memory, so Firefox's sandboxed content processes (no `open()`) follow
//!   it too.
//! - The file holds one record, `"VALUE VALUE\n"` (a relative offset in
//!   seconds, `+0`, `-421`, written twice) padded with NULs to
//!   [`RECORD_LEN`] bytes. It is rewritten in place and never truncated (a
//!   mapped page past the end of a file is a SIGBUS); a reader that catches
//!   a write half done sees two different halves and keeps the last shift
//!   it read whole. Every program, whenever it started, reads the same
//!   time; libfaketime re-reads the record at most once a second
//!   (`FAKETIME_CACHE_DURATION=1`).
//! - Monotonic clocks are never shifted (`FAKETIME_DONT_FAKE_MONOTONIC`):
//!   timers, animations and timeouts stay sane.
//! - File dates (`stat`, `statx`) are shifted like the clock, so a file
//!   written now shows the shifted now (a file dialog's "Modified").
//! - The daemon's own clock is never shifted: it is not preloaded.

use std::ffi::OsString;
use std::os::unix::fs::FileExt as _;
use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

/// The clock file's size: one record, padded with NULs.
pub const RECORD_LEN: usize = 64;

/// The symbols libfaketime 0.9.12 looks up that bookworm's glibc lacks
/// (`FAKETIME_DEBUG_DLSYM=1` lists them): a failed `dlsym` allocates, and
/// inside Firefox's allocator's own initialisation that deadlocks.
const IGNORE_SYMBOLS: &str =
    "__ftime,clock_gettime64,__clock_gettime64,timer_settime@GLIBC_2.2,timer_gettime@GLIBC_2.2";

/// The fake clock's file and library.
#[derive(Debug, Clone)]
pub struct FakeClock {
    file: PathBuf,
    lib: PathBuf,
}

impl FakeClock {
    /// Uses `file` (created now, or rewritten in place, with no shift)
    /// and the libfaketime library `lib`, which must exist.
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
            ("FAKETIME_MAP_TIMESTAMP_FILE", "1".into()),
            ("FAKETIME_CACHE_DURATION", "1".into()),
            ("FAKETIME_DONT_FAKE_MONOTONIC", "1".into()),
            ("DONT_FAKE_MONOTONIC", "1".into()),
            ("FAKETIME_DISABLE_SHM", "1".into()),
            ("FAKETIME_IGNORE_SYMBOLS", IGNORE_SYMBOLS.into()),
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
        let f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(&self.file)?;
        f.write_all_at(&record(offset), 0)?;
        // A longer file (an older daemon's) keeps its record at the start;
        // growing a shorter one to the record's size never truncates a
        // mapping's page away.
        if f.metadata()?.len() < RECORD_LEN as u64 {
            f.set_len(RECORD_LEN as u64)?;
        }
        Ok(())
    }
}

/// The clock file's record for a shift of `offset` seconds.
pub fn record(offset: i64) -> [u8; RECORD_LEN] {
    let text = format!("{offset:+} {offset:+}\n");
    let mut r = [0u8; RECORD_LEN];
    r[..text.len()].copy_from_slice(text.as_bytes());
    r
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

    fn shift_in(file: &std::path::Path) -> String {
        let bytes = std::fs::read(file).unwrap();
        assert_eq!(bytes.len(), RECORD_LEN);
        let text = String::from_utf8(bytes).unwrap();
        let line = text.trim_end_matches('\0');
        let (a, b) = line.trim_end_matches('\n').split_once(' ').unwrap();
        assert_eq!(a, b, "{line:?}");
        assert!(line.ends_with('\n'));
        a.to_string()
    }

    #[test]
    fn the_file_holds_the_shift_twice_and_is_rewritten_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let lib = dir.path().join("libfaketime.so.1");
        std::fs::write(&lib, b"").unwrap();
        let file = dir.path().join("clock");
        let c = FakeClock::new(file.clone(), lib.clone()).unwrap();
        assert_eq!(shift_in(&file), "+0");
        let ino = |f: &std::path::Path| {
            use std::os::unix::fs::MetadataExt as _;
            std::fs::metadata(f).unwrap().ino()
        };
        let before = ino(&file);
        let an_hour_ago = now_ms() - 3_600_000;
        let off = c.set(Some(an_hour_ago)).unwrap();
        assert!((-3601..=-3599).contains(&off), "{off}");
        assert_eq!(shift_in(&file), format!("{off:+}"));
        // The same file (a program maps it once), never a shorter one.
        assert_eq!(ino(&file), before);
        assert_eq!(c.set(None).unwrap(), 0);
        assert_eq!(shift_in(&file), "+0");
        assert_eq!(ino(&file), before);
        // Nothing else is left in the folder.
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 2);
        // A new daemon on an old file rewrites it in place, no shift.
        c.set(Some(an_hour_ago)).unwrap();
        FakeClock::new(file.clone(), lib).unwrap();
        assert_eq!(shift_in(&file), "+0");
        assert_eq!(ino(&file), before);
        assert!(FakeClock::new(file, dir.path().join("missing.so")).is_err());
    }

    #[test]
    fn the_environment_maps_the_file_and_leaves_monotonic_time_alone() {
        let dir = tempfile::tempdir().unwrap();
        let lib = dir.path().join("libfaketime.so.1");
        std::fs::write(&lib, b"").unwrap();
        let c = FakeClock::new(dir.path().join("clock"), lib).unwrap();
        let env: std::collections::HashMap<_, _> = c.env().into_iter().collect();
        for (k, v) in [
            ("FAKETIME_MAP_TIMESTAMP_FILE", "1"),
            ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
            ("FAKETIME_DISABLE_SHM", "1"),
            ("FAKETIME_CACHE_DURATION", "1"),
        ] {
            assert_eq!(env[k], OsString::from(v), "{k}");
        }
        assert!(!env.contains_key("FAKETIME"));
    }

    #[test]
    fn records_are_the_shift_twice_padded_with_nuls() {
        let r = record(-421);
        assert_eq!(&r[..10], b"-421 -421\n");
        assert!(r[10..].iter().all(|&b| b == 0));
        // The widest shift still fits, its newline included.
        let r = record(i64::MIN);
        assert_eq!(r.iter().position(|&b| b == b'\n'), Some(41));
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
