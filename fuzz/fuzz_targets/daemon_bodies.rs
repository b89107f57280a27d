//! The daemon's request bodies past the HTTP layer (hyper parses the
//! head; the body limit is axum's): the strict JSON reader for every body
//! type the routes accept besides the batch (`batch_request`): the
//! screenshot options and a browser call (then its own checks), chosen by
//! the first byte. Never a panic; what parses serialises again.
#![no_main]
use sandtop_protocol::{BrowserCall, ScreenshotOptions, from_json_objects};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Some((&which, body)) = data.split_first() else {
        return;
    };
    match which % 2 {
        0 => {
            if let Ok(o) = from_json_objects::<ScreenshotOptions>(body) {
                let _ = serde_json::to_vec(&o);
            }
        }
        _ => {
            if let Ok(call) = from_json_objects::<BrowserCall>(body) {
                let _ = call.check();
                let _ = call.member();
                let _ = serde_json::to_vec(&call);
            }
        }
    }
});
