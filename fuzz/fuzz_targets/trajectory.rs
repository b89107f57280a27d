//! The trajectory reader (`--resume` reads it): any bytes give entries or
//! an error, never a panic; a torn line is skipped, a JSON line that is not
//! an entry is an error.
#![no_main]
use host_cli::agent::record::parse_trajectory;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Ok(entries) = parse_trajectory(data, "fuzz") {
        // What was read writes back (the recorder's own path).
        for e in &entries {
            let _ = serde_json::to_string(e);
        }
    }
});
