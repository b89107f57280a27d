//! The browser driver in a real guest: the guest's sandtopd starts its own
//! Firefox ESR (WebDriver BiDi on the guest's loopback) on the first
//! browser call; through host-cli's channel and the host-side toolset, the
//! demo form is filled and submitted through read_page refs, and the demo
//! app's own record is checked (never a screenshot). A navigation outside
//! the URL policy is refused by the toolset before anything is sent; a ref
//! read before a reload is refused as stale with nothing typed.

use host_cli::agent::browser::{NAVIGATION_REFUSED, Toolset, UrlPolicy, project_state};
use host_cli::agent::exercise::STORE_PATH;
use sandtop_protocol::browser::BrowserRead;
use sandtop_protocol::{BrowserOutcome, ErrorCode};

use super::*;

const FORM_URL: &str = "http://127.0.0.1:8080/";

async fn stored(g: &Guest) -> anyhow::Result<Vec<Value>> {
    let r = g.exec(&["cat", STORE_PATH]).await?;
    if r.exit_code != 0 {
        return Ok(Vec::new());
    }
    Ok(String::from_utf8_lossy(&r.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect())
}

/// Checks the model's call with the toolset, then sends it.
async fn call(
    ch: &mut Channel,
    tools: &Toolset,
    name: &str,
    args: Value,
) -> anyhow::Result<Result<sandtop_protocol::BrowserReply, sandtop_protocol::ErrorBody>> {
    let prepared = tools
        .prepare(name, &args.to_string())
        .map_err(|e| anyhow::anyhow!("{name} {args}: refused by the toolset: {e}"))?;
    let call = prepared.call.context("list_tabs is no call")?;
    match ch.browser_call(&call).await {
        Ok(r) => Ok(Ok(r)),
        Err(host_cli::channel::ChannelError::Daemon { body, .. }) => Ok(Err(body)),
        Err(e) => Err(e.into()),
    }
}

fn read_of(r: &sandtop_protocol::BrowserReply) -> anyhow::Result<&BrowserRead> {
    match &r.outcome {
        BrowserOutcome::Read(read) => Ok(read),
        other => bail!("expected a read, got {other:?}"),
    }
}

fn ref_of(read: &BrowserRead, label: &str) -> anyhow::Result<String> {
    read.elements
        .iter()
        .find(|e| e.label == label)
        .map(|e| e.reference.clone())
        .with_context(|| format!("no element labelled {label:?}"))
}

pub(crate) async fn browser_fills_the_demo_form_through_refs(ctx: Arc<Ctx>) -> anyhow::Result<()> {
    let g = Guest::start(&ctx, "browser").await?;
    let mut ch = g.channel(ChannelMode::Auto).await?;
    let tools = Toolset::new(
        None,
        None,
        Some(UrlPolicy::parse("http://127.0.0.1:8080").map_err(anyhow::Error::msg)?),
        &[],
    )
    .map_err(anyhow::Error::msg)?;

    // The first browser call starts Firefox in the guest.
    let started = Instant::now();
    let state = ch.browser_state().await?;
    eprintln!(
        "browser: first state after {:?}: {} tab(s)",
        started.elapsed(),
        state.tabs.len()
    );
    ensure!(
        state.tabs.iter().filter(|t| t.active).count() == 1,
        "{state:?}"
    );

    // Outside the policy: refused by the toolset, before any prompt or call.
    let refused = tools
        .prepare(
            "browser_navigate",
            &json!({"url": "http://127.0.0.1:8081/", "tab_id": null}).to_string(),
        )
        .err();
    ensure!(
        refused.as_deref() == Some(NAVIGATION_REFUSED),
        "{refused:?}"
    );

    let before = stored(&g).await?.len();
    let nav = call(
        &mut ch,
        &tools,
        "browser_navigate",
        json!({"url": FORM_URL, "tab_id": null}),
    )
    .await?
    .map_err(|e| anyhow::anyhow!("navigate: {e}"))?;
    let projected = project_state(&nav.state).map_err(anyhow::Error::msg)?;
    ensure!(
        projected["tabs"][0]["url"] == "http://127.0.0.1:8080",
        "{projected}"
    );

    // A stale ref after a reload: refused, nothing typed.
    let old = call(
        &mut ch,
        &tools,
        "browser_read_page",
        json!({"tab_id": null, "filter": "interactive"}),
    )
    .await?
    .map_err(|e| anyhow::anyhow!("read_page: {e}"))?;
    let old_name = ref_of(read_of(&old)?, "Name")?;
    call(
        &mut ch,
        &tools,
        "browser_navigate",
        json!({"url": FORM_URL, "tab_id": null}),
    )
    .await?
    .map_err(|e| anyhow::anyhow!("reload: {e}"))?;
    let stale = call(
        &mut ch,
        &tools,
        "browser_type",
        json!({"text": "stale", "target": old_name, "tab_id": null}),
    )
    .await?;
    match stale {
        Err(body) => ensure!(body.code == ErrorCode::StaleTarget, "{body}"),
        Ok(r) => bail!("a stale ref was typed into: {r:?}"),
    }

    // Fill and submit through fresh refs.
    let read = call(
        &mut ch,
        &tools,
        "browser_read_page",
        json!({"tab_id": null, "filter": "all"}),
    )
    .await?
    .map_err(|e| anyhow::anyhow!("read_page: {e}"))?;
    let read = read_of(&read)?.clone();
    ensure!(
        read.elements
            .iter()
            .all(|e| e.value.as_deref().unwrap_or("").is_empty()),
        "the fresh form is empty: {read:?}"
    );
    let texts = [
        ("Name", "Zoë Browser"),
        ("Email", "zoe@example.test"),
        ("Message", "via refs, 中文"),
    ];
    for (label, text) in texts {
        call(
            &mut ch,
            &tools,
            "browser_type",
            json!({"text": text, "target": ref_of(&read, label)?, "tab_id": null}),
        )
        .await?
        .map_err(|e| anyhow::anyhow!("type into {label}: {e}"))?;
    }
    call(
        &mut ch,
        &tools,
        "browser_click",
        json!({"target": ref_of(&read, "Submit")?, "tab_id": null}),
    )
    .await?
    .map_err(|e| anyhow::anyhow!("click Submit: {e}"))?;
    let records = wait_for("the submission", Duration::from_secs(10), || async {
        let s = stored(&g).await.ok()?;
        (s.len() > before).then_some(s)
    })
    .await?;
    ensure!(
        records.len() == before + 1,
        "one submission, got {}",
        records.len() - before
    );
    let last = records.last().context("no record")?;
    for (field, (_, text)) in ["name", "email", "message"].iter().zip(texts) {
        ensure!(
            last[field] == text,
            "{field}: stored {}, typed {text:?}",
            last[field]
        );
    }
    Ok(())
}
