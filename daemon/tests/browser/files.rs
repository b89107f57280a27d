//! The file calls against the real Firefox (docs/contract.md rule 48, the
//! driver's half): `set_file` puts a file into the page's one file input (the
//! page sees its change, name and bytes), refuses when the input is
//! ambiguous; `take_download` takes the newest finished download (served
//! as an attachment, saved without a dialog), `remove_download` cleans up.

use super::*;

pub const PAGE: &str = r#"<!doctype html><title>Upload</title><body>
<label for="f">CV</label> <input id="f" type="file">
<div id="out">none</div>
<script>
document.getElementById('f').addEventListener('change', async (e) => {
  const file = e.target.files[0];
  document.getElementById('out').textContent = 'got ' + file.name + ' ' + file.size + ' ' + (await file.text());
});
</script></body>"#;

pub const TWO: &str = r#"<!doctype html><title>Two</title><body>
<input type="file" aria-label="A"> <input type="file" aria-label="B"></body>"#;

pub const LINK: &str =
    r#"<!doctype html><title>Report</title><body><a href="/report.csv">Report</a></body>"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_upload_into_the_one_file_input_and_downloads_are_taken_then_removed() {
    let Some(d) = daemon() else { return };
    let origin = pages().await;

    // Upload: the page's only file input takes the file and sees it.
    d.goto(&format!("{origin}/files")).await;
    let set = |name: &str| json!({"member": "set_file", "tab_id": null, "name": name, "content_base64": "aGVsbG8="});
    d.ok(set("cv.txt")).await;
    let end = Instant::now() + Duration::from_secs(5);
    loop {
        let t = d.text().await;
        if t.contains("got cv.txt 5 hello") {
            break;
        }
        assert!(Instant::now() < end, "the page did not see the file: {t}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Two inputs, none focused: refused, nothing set.
    d.goto(&format!("{origin}/files-two")).await;
    d.fails(set("cv.txt"), "not_actionable").await;
    // A path for a name: refused before anything.
    d.fails(set("../cv.txt"), "invalid_action").await;

    // Download: nothing yet, then the attachment once it finished.
    d.fails(json!({"member": "take_download"}), "not_actionable")
        .await;
    d.goto(&format!("{origin}/files-link")).await;
    let read = d.read("interactive").await;
    let link = by_label(&read, "Report")["ref"].clone();
    d.ok(json!({"member": "click", "tab_id": null, "target": link}))
        .await;
    let end = Instant::now() + Duration::from_secs(10);
    let taken = loop {
        let (status, body) = d
            .post("/v1/browser/call", json!({"member": "take_download"}))
            .await;
        if status == StatusCode::OK {
            break body;
        }
        assert_eq!(body["code"], "not_actionable", "{body}");
        assert!(Instant::now() < end, "no download arrived");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(taken["outcome"]["kind"], "file", "{taken}");
    assert_eq!(taken["outcome"]["name"], "report.csv");
    // "a,b\n1,2\n"
    assert_eq!(taken["outcome"]["content_base64"], "YSxiCjEsMgo=");
    d.ok(json!({"member": "remove_download", "name": "report.csv"}))
        .await;
    d.fails(json!({"member": "take_download"}), "not_actionable")
        .await;
    d.fails(
        json!({"member": "remove_download", "name": "report.csv"}),
        "not_actionable",
    )
    .await;
}
