//! The `open` and `ask` modes.

use super::*;

// ---------------------------------------------------------------------------
// `open`.

pub(crate) async fn open_mode_reaches_the_fake_internet_directly(
    ctx: Arc<Ctx>,
) -> anyhow::Result<()> {
    let ip = ctx
        .net
        .fake_bridge_ip
        .context("the fake internet is not on Docker's default bridge")?;
    let (g, stderr) =
        Guest::start(&ctx.base, "open", &["--network".into(), "open".into()], &[]).await?;
    ensure!(stderr.contains("unfiltered"), "no warning: {stderr}");
    ensure!(g.rec.egress_pid.is_none() && !g.paths().guest_socket.exists());
    let h = g.inspect().await?.host_config.context("HostConfig")?;
    ensure!(
        h.network_mode.as_deref() == Some("bridge"),
        "{:?}",
        h.network_mode
    );
    let r = g
        .py(&json!([{"op": "direct", "ip": ip.to_string(), "port": 80,
                     "host": "allowed.test", "path": "/open-direct"}]))
        .await?;
    landed_on(&r[0], "allowed.test", 80, false).context("open mode")?;
    ensure!(ctx.landed("/open-direct").await?.len() == 1);
    g.stop().await
}

// ---------------------------------------------------------------------------
// `ask` with a scripted operator.

/// Approves allowed.test (http and https), cancels stop.test, denies the
/// rest; holds its first answer until the test releases it.
struct Operator {
    asked: Arc<Mutex<Vec<String>>>,
    journal: Arc<Mutex<Vec<Value>>>,
    gate: Option<std::sync::mpsc::Receiver<()>>,
}

impl Attached for Operator {
    fn answer(&mut self, origin: &str) -> Answer {
        self.asked.lock().unwrap().push(origin.to_string());
        if let Some(g) = self.gate.take() {
            let _ = g.recv_timeout(Duration::from_secs(60));
        }
        match origin {
            "http://allowed.test" | "https://allowed.test" => Answer::Approve,
            "http://stop.test" => Answer::Cancel,
            _ => Answer::Deny,
        }
    }

    fn journal(&mut self, entry: &Value) {
        self.journal.lock().unwrap().push(entry.clone());
    }
}

pub(crate) async fn ask_mode_with_a_scripted_operator(ctx: Arc<Ctx>) -> anyhow::Result<()> {
    let fake = ctx.net.fake_ip;
    let mut args = vec![
        "--network".to_string(),
        "ask".to_string(),
        "--allow-private".to_string(),
        ctx.net.subnet.clone(),
    ];
    for n in [
        "allowed.test",
        "blocked.test",
        "stop.test",
        "later.test",
        "fresh.test",
    ] {
        args.push("--egress-resolve".into());
        args.push(format!("{n}={fake}"));
    }
    let (g, _) = Guest::start(&ctx.base, "ask", &args, &[]).await?;
    let h = g.inspect().await?.host_config.context("HostConfig")?;
    ensure!(
        h.network_mode.as_deref() == Some("none"),
        "{:?}",
        h.network_mode
    );

    // 1. Nobody attached: an undecided origin is denied, at once.
    let r = g.py(&json!([get("later.test", "/ask-later")])).await?;
    refused(&r[0], "the operator answered Deny for http://later.test")?;
    ensure!(
        r[0]["ms"].as_u64().unwrap_or(u64::MAX) < 5000,
        "not at once: {}",
        r[0]
    );

    // 2. A scripted operator attaches to the control socket.
    let asked = Arc::new(Mutex::new(Vec::<String>::new()));
    let seen = Arc::new(Mutex::new(Vec::<Value>::new()));
    let cancels = Arc::new(AtomicUsize::new(0));
    let (release, gate) = std::sync::mpsc::channel();
    let c2 = Arc::clone(&cancels);
    let attached = service::attach(
        &g.paths().control,
        Box::new(Operator {
            asked: Arc::clone(&asked),
            journal: Arc::clone(&seen),
            gate: Some(gate),
        }),
        Box::new(move || {
            c2.fetch_add(1, Ordering::SeqCst);
        }),
    )
    .await
    .context("attaching to the control socket")?;
    attached_when_journal_arrives(&g, &seen, fake).await?;
    ensure!(asked.lock().unwrap().is_empty());

    // 3. Two concurrent requests to an undecided origin wait for the one
    // question; the operator holds the answer for a while.
    let backend = g.base.backend.clone();
    let id = g.id().to_string();
    let started = Instant::now();
    let pending = tokio::spawn(async move {
        py_in(
            &backend,
            &id,
            &json!([{"op": "par", "ops": [
                get("allowed.test", "/ask-a"),
                get("allowed.test", "/ask-b"),
            ]}]),
        )
        .await
    });
    wait_for("the question", Duration::from_secs(20), || async {
        (!asked.lock().unwrap().is_empty()).then_some(())
    })
    .await?;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    ensure!(
        !pending.is_finished(),
        "the requests did not wait for the answer"
    );
    ensure!(
        ctx.landed("/ask-a").await?.is_empty(),
        "landed before the answer"
    );
    release.send(()).ok();
    let r = pending.await??;
    ensure!(started.elapsed() >= Duration::from_millis(1500));
    for x in r[0]["results"].as_array().context("par")? {
        landed_on(x, "allowed.test", 80, false).context("approved")?;
        ensure!(x["ms"].as_u64().unwrap_or(0) >= 1500, "did not wait: {x}");
    }
    ensure!(
        *asked.lock().unwrap() == vec!["http://allowed.test".to_string()],
        "asked {:?}",
        asked.lock().unwrap()
    );

    // 4. Decided origins are not asked again; others are, once each.
    let r = g
        .py(&json!([
            get("allowed.test", "/ask-c"),
            urllib("https://allowed.test/ask-d"),
            get("blocked.test", "/ask-e"),
            get("blocked.test", "/ask-f"),
            get("stop.test", "/ask-g"),
            get("allowed.test", "/ask-h"),
        ]))
        .await?;
    landed_on(&r[0], "allowed.test", 80, false)?;
    landed_on(&r[1], "allowed.test", 443, true)?;
    refused(&r[2], "the operator answered Deny for http://blocked.test")?;
    refused(&r[3], "denied by the operator earlier in this session")?;
    refused(&r[4], "the operator answered Cancel for http://stop.test")?;
    landed_on(&r[5], "allowed.test", 80, false)?;
    ensure!(
        *asked.lock().unwrap()
            == vec![
                "http://allowed.test".to_string(),
                "https://allowed.test".into(),
                "http://blocked.test".into(),
                "http://stop.test".into(),
            ],
        "asked {:?}",
        asked.lock().unwrap()
    );
    // Cancel refuses that request only; the run goes on (seed 004;
    // docs/security.md N9): `on_cancel` is no longer called.
    ensure!(
        cancels.load(Ordering::SeqCst) == 0,
        "on_cancel ran {} times",
        cancels.load(Ordering::SeqCst)
    );
    let landed: BTreeSet<String> = ctx
        .landed("/ask-")
        .await?
        .iter()
        .filter_map(|v| v["path"].as_str().map(String::from))
        .collect();
    let want: BTreeSet<String> = ["/ask-a", "/ask-b", "/ask-c", "/ask-d", "/ask-h"]
        .into_iter()
        .map(String::from)
        .collect();
    ensure!(landed == want, "landed {landed:?}");
    // The attached run received the decisions (for its trajectory).
    let got = seen.lock().unwrap().clone();
    for (origin, decision) in [
        ("http://allowed.test", "allowed"),
        ("https://allowed.test", "allowed"),
        ("http://blocked.test", "denied"),
        ("http://stop.test", "denied"),
    ] {
        ensure!(
            got.iter().any(|e| e["kind"] == "egress"
                && e["origin"] == origin
                && e["decision"] == decision),
            "the operator got no {decision} entry for {origin}: {got:#?}"
        );
    }

    // 5. Detached again: an undecided origin is denied without a question.
    attached.abort();
    let _ = attached.await;
    let r = g.py(&json!([get("fresh.test", "/ask-fresh")])).await?;
    refused(&r[0], "the operator answered Deny for http://fresh.test")?;
    ensure!(
        asked.lock().unwrap().len() == 4,
        "asked {:?}",
        asked.lock().unwrap()
    );

    // The session's journal has every answer.
    let answers: Vec<(String, String)> = g
        .journal(0)?
        .into_iter()
        .filter(|e| e["kind"] == "egress_answer")
        .map(|e| {
            (
                e["origin"].as_str().unwrap_or("").to_string(),
                e["answer"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    let want: Vec<(String, String)> = [
        ("http://later.test", "deny"),
        ("http://allowed.test", "approve"),
        ("https://allowed.test", "approve"),
        ("http://blocked.test", "deny"),
        ("http://stop.test", "cancel"),
        ("http://fresh.test", "deny"),
    ]
    .into_iter()
    .map(|(a, b)| (a.to_string(), b.to_string()))
    .collect();
    ensure!(answers == want, "answers {answers:?}");
    g.stop().await
}

/// Waits until the attached operator receives journal entries: an IP
/// literal is refused without a question, and its entry is sent to the
/// attached client once the proxy has accepted it.
async fn attached_when_journal_arrives(
    g: &Guest,
    seen: &Arc<Mutex<Vec<Value>>>,
    fake: IpAddr,
) -> anyhow::Result<()> {
    let mut n = 0;
    wait_for(
        "the operator to be attached",
        Duration::from_secs(10),
        || {
            n += 1;
            let path = format!("/ask-ready-{n}");
            async move {
                g.py(&json!([get(&fake.to_string(), &path)])).await.ok()?;
                (!seen.lock().unwrap().is_empty()).then_some(())
            }
        },
    )
    .await
}

/// Approves every question.
struct ApproveAll {
    asked: Arc<Mutex<Vec<String>>>,
    journal: Arc<Mutex<Vec<Value>>>,
}

impl Attached for ApproveAll {
    fn answer(&mut self, origin: &str) -> Answer {
        self.asked.lock().unwrap().push(origin.to_string());
        Answer::Approve
    }

    fn journal(&mut self, entry: &Value) {
        self.journal.lock().unwrap().push(entry.clone());
    }
}

/// An IP literal is refused unless listed, also in ask mode, also when it
/// is spelled the way inet_aton reads it (hex): it must never become a
/// question that looks like a name.
pub(crate) async fn ask_mode_refuses_ip_literals_in_disguise(ctx: Arc<Ctx>) -> anyhow::Result<()> {
    let IpAddr::V4(v4) = ctx.net.fake_ip else {
        bail!("the fake internet has no IPv4 address");
    };
    let args = vec![
        "--network".to_string(),
        "ask".to_string(),
        "--allow-private".to_string(),
        ctx.net.subnet.clone(),
    ];
    let (g, _) = Guest::start(&ctx.base, "ask-hex", &args, &[]).await?;
    let asked = Arc::new(Mutex::new(Vec::<String>::new()));
    let seen = Arc::new(Mutex::new(Vec::<Value>::new()));
    let attached = service::attach(
        &g.paths().control,
        Box::new(ApproveAll {
            asked: Arc::clone(&asked),
            journal: Arc::clone(&seen),
        }),
        Box::new(|| {}),
    )
    .await
    .context("attaching to the control socket")?;
    attached_when_journal_arrives(&g, &seen, ctx.net.fake_ip).await?;
    let o = v4.octets();
    let packed = format!("0x{:08x}", u32::from(v4));
    let dotted = format!("0x{:x}.0x{:x}.0x{:x}.0x{:x}", o[0], o[1], o[2], o[3]);
    let r = g
        .py(&json!([
            get(&packed, "/hex-packed"),
            get(&dotted, "/hex-dotted"),
            {"op": "tls", "authority": format!("{packed}:443"), "sni": packed, "path": "/hex-tls"},
        ]))
        .await?;
    attached.abort();
    let landed = ctx.landed("/hex-").await?;
    let asked = asked.lock().unwrap().clone();
    g.stop().await?;
    for x in &r {
        let status = if x["req"]["op"] == "tls" {
            &x["connect_status"]
        } else {
            &x["status"]
        };
        ensure!(
            status.as_u64().is_some_and(|s| (400..500).contains(&s)),
            "an IP literal in hex was not refused: {x}"
        );
    }
    ensure!(
        asked.is_empty(),
        "the operator was asked about IP literals: {asked:?}"
    );
    ensure!(landed.is_empty(), "IP literals in hex landed: {landed:?}");
    Ok(())
}
