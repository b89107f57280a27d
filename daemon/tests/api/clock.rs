//! `POST /v1/clock` (docs/contract.md rule 53): strict, served only with a
//! fake clock, and what it sets is the shift in the clock's file.

use super::*;

#[tokio::test]
async fn the_clock_is_set_strictly_and_only_with_a_fake_clock() {
    let tmp = tempfile::tempdir().unwrap();
    let lib = tmp.path().join("libfaketime.so.1");
    std::fs::write(&lib, b"").unwrap();
    let file = tmp.path().join("clock");
    let clock = sandtopd::clock::FakeClock::new(file.clone(), lib).unwrap();
    let fx = Fx::build(SCREEN, move |s| s.clock = Some(clock));
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    // Seven minutes ago: the recorded run's time.
    let ok = fx
        .call(fx.post(paths::CLOCK, &json!({"unix_ms": now_ms - 420_000})))
        .await;
    ok.assert_ok();
    let off = ok.json["offset_s"].as_i64().unwrap();
    assert!((-421..=-419).contains(&off), "{}", ok.json);
    assert_eq!(
        std::fs::read(&file).unwrap(),
        sandtopd::clock::record(off).to_vec()
    );
    // Back to the real time.
    let ok = fx
        .call(fx.post(paths::CLOCK, &json!({"unix_ms": null})))
        .await;
    ok.assert_ok();
    assert_eq!(ok.json["offset_s"], 0);
    assert_eq!(
        std::fs::read(&file).unwrap(),
        sandtopd::clock::record(0).to_vec()
    );
    // Strict: the field is required, unknown fields and absurd times are
    // refused, and nothing is written.
    for bad in [
        json!({}),
        json!({"unix_ms": null, "x": 1}),
        json!({"unix_ms": 0}),
        json!({"unix_ms": "soon"}),
        json!({"unix_ms": 9_999_999_999_999u64}),
    ] {
        fx.call(fx.post(paths::CLOCK, &bad))
            .await
            .assert_error(400, ErrorCode::BadRequest);
    }
    assert_eq!(
        std::fs::read(&file).unwrap(),
        sandtopd::clock::record(0).to_vec()
    );
    // Without a fake clock: not found.
    let plain = Fx::new();
    plain
        .call(plain.post(paths::CLOCK, &json!({"unix_ms": null})))
        .await
        .assert_error(404, ErrorCode::NotFound);
}
