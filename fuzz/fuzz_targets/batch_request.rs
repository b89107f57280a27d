//! The daemon's request body parser (objects only, strict fields) and the
//! action limits checked before a batch is planned.
#![no_main]
use sandtop_protocol::BatchRequest;
use sandtop_protocol::from_json_objects;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Ok(req) = from_json_objects::<BatchRequest>(data) {
        for a in &req.actions {
            let _ = a.check_limits();
        }
    }
});
