//! An unchanged screen is answered from the last screenshot (protocol 1.1
//! `timings.reused`): only while the display's mark is the same and the
//! region, size, format and pointer are too; never without DAMAGE.

use super::*;

fn captures(fx: &Fx) -> usize {
    fx.events()
        .iter()
        .filter(|e| matches!(e, Event::Capture(_)))
        .count()
}

async fn shot(fx: &Fx, body: Value) -> Value {
    let r = fx.call(fx.post(paths::SCREENSHOT, &body)).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json);
    r.json
}

fn reused(reply: &Value) -> bool {
    reply["timings"]["reused"] == json!(true)
}

#[tokio::test]
async fn an_undamaged_screen_is_answered_again_and_any_change_captures_anew() {
    let fx = Fx::new();
    fx.knobs(|s| s.damage = Some(7));
    let asked = json!({"size": {"width": 640, "height": 360}});
    let first = shot(&fx, asked.clone()).await;
    assert!(!reused(&first), "the first screenshot is captured");
    assert!(
        first["timings"].get("reused").is_none(),
        "absent when false"
    );
    assert_eq!(captures(&fx), 1);

    let again = shot(&fx, asked.clone()).await;
    assert!(reused(&again), "{}", again["timings"]);
    assert_eq!(again["screenshot"], first["screenshot"], "the same image");
    assert_eq!(captures(&fx), 1, "nothing captured for the reused one");

    // Another size, region or format is another image.
    let other_size = shot(&fx, json!({"size": {"width": 320, "height": 180}})).await;
    assert!(!reused(&other_size));
    let other_format = shot(
        &fx,
        json!({"size": {"width": 320, "height": 180}, "format": "webp"}),
    )
    .await;
    assert!(!reused(&other_format));
    let region = json!({"region": {"x": 0, "y": 0, "width": 100, "height": 100}});
    assert!(!reused(&shot(&fx, region.clone()).await));
    assert!(reused(&shot(&fx, region.clone()).await));
    assert_eq!(captures(&fx), 4);

    // Damage: the new window is in the next screenshot.
    fx.knobs(|s| {
        s.window = Some((
            Rect {
                x: 10,
                y: 10,
                width: 50,
                height: 50,
            },
            [255, 0, 0],
        ));
        s.damage = Some(8);
    });
    let damaged = shot(&fx, region.clone()).await;
    assert!(!reused(&damaged));
    assert_ne!(damaged["screenshot"]["data"], first["screenshot"]["data"]);
    assert_eq!(captures(&fx), 5);
}

#[tokio::test]
async fn without_damage_reports_every_screenshot_is_captured() {
    let fx = Fx::new();
    // The fake's default: it cannot tell (a server without DAMAGE).
    for _ in 0..3 {
        assert!(!reused(&shot(&fx, json!({})).await));
    }
    assert_eq!(captures(&fx), 3);
}

#[tokio::test]
async fn the_pointer_is_part_of_the_image_and_input_goes_through_the_mark() {
    let fx = Fx::new();
    fx.knobs(|s| s.damage = Some(1));
    let with_cursor = json!({"cursor": true});
    let a = shot(&fx, with_cursor.clone()).await;
    let b = shot(&fx, json!({})).await;
    assert!(!reused(&b), "with and without the pointer differ");
    assert!(!reused(&a));
    assert!(reused(&shot(&fx, json!({})).await));
    // A batch's own screenshot goes through the same check: the fake's
    // input draws nothing, so its mark holds and the image is reused.
    let r = fx.run(json!([click(5, 5)])).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json);
    assert_eq!(r.json["timings"]["reused"], json!(true), "{}", r.json);
}
