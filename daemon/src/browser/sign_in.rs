//! Sign-in out of band: the host's two calls that put an operator's
//! credentials into a page ([`BrowserCall::SignInCheck`],
//! [`BrowserCall::SignInFill`]); the model has no member that reaches them.
//!
//! Both calls bind at execution, like every member: the tab's URL must be
//! on the credential origin now, the tab's document and the target's must
//! have been *loaded* from it (the page agent compares the window's origin
//! and the document's URI: an error page left by a failed load keeps the
//! tab's URL but not its origin), and each target must resolve in the
//! tab's current document (refs carry the document's load id) to an
//! enabled, visible `<input>` whose type fits the field's kind (a password
//! only into `type=password`). A fill checks all of that again — every
//! field before the first value is typed — then, per field, marks the
//! input private (later reads omit its value, as they do for passwords; a
//! non-password input is also masked on screen), focuses it, and types the
//! value with BiDi key input into that tab's document, checking before
//! each part that the input still holds the focus on that origin. Nothing
//! here sends X11 input: a value never reaches whatever window has the
//! desktop's keyboard focus (docs/security.md L14). No message here quotes
//! a value; nothing here logs.

use sandtop_protocol::sign_in::{CredentialKind, SignInValue};
use sandtop_protocol::{BrowserCall, BrowserOutcome, ErrorBody, ErrorCode};
use serde_json::json;

use super::act::{locate, perform};
use super::bidi::Bidi;
use super::context::{activate, agent, contexts, target_tab};
use super::keys::typed_keys;
use super::policy::element_error;

/// Carries out a `SignInCheck` or a `SignInFill`.
pub(super) async fn run(bidi: &Bidi, call: &BrowserCall) -> Result<BrowserOutcome, ErrorBody> {
    match call {
        BrowserCall::SignInCheck {
            tab_id,
            origin,
            fields,
        } => {
            checked(
                bidi,
                tab_id.as_deref(),
                origin,
                fields.iter().map(|f| (f.target.as_str(), f.kind)),
            )
            .await?;
            Ok(BrowserOutcome::Done)
        }
        BrowserCall::SignInFill {
            tab_id,
            origin,
            fields,
        } => {
            // Every field is checked before anything is typed.
            let ctx = checked(
                bidi,
                tab_id.as_deref(),
                origin,
                fields.iter().map(|f| (f.target.as_str(), f.kind)),
            )
            .await?;
            activate(bidi, &ctx).await?;
            for f in fields {
                fill(bidi, &ctx, origin, f).await?;
            }
            Ok(BrowserOutcome::Done)
        }
        _ => Err(ErrorBody::new(
            ErrorCode::InvalidAction,
            "not a sign-in call",
        )),
    }
}

/// The tab on `origin` whose inputs `fields` (target, kind) all passed
/// [`check_field`]: both calls start here.
async fn checked<'a>(
    bidi: &Bidi,
    tab_id: Option<&str>,
    origin: &str,
    fields: impl Iterator<Item = (&'a str, CredentialKind)>,
) -> Result<String, ErrorBody> {
    let ctx = on_origin(bidi, tab_id, origin).await?;
    for (target, kind) in fields {
        check_field(bidi, &ctx, origin, target, kind, Check::Bound).await?;
    }
    Ok(ctx)
}

/// The tab the call acts on, which must show a document of `origin`.
async fn on_origin(bidi: &Bidi, tab_id: Option<&str>, origin: &str) -> Result<String, ErrorBody> {
    let ctx = target_tab(bidi, tab_id).await?;
    let url = contexts(bidi)
        .await?
        .into_iter()
        .find(|(c, _)| *c == ctx)
        .map(|(_, u)| u)
        .ok_or_else(|| ErrorBody::new(ErrorCode::NoSuchTab, "the tab closed"))?;
    if url_origin(&url).as_deref() != Some(origin) {
        return Err(ErrorBody::new(
            ErrorCode::InvalidAction,
            "the tab is not on the credential origin",
        ));
    }
    Ok(ctx)
}

/// `scheme://host[:port]` of a URL as the browser serialises it (lower
/// case, default port left out), or `None` for a URL without a web origin.
fn url_origin(url: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    if scheme != "http" && scheme != "https" {
        return None;
    }
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let host = rest[..end].rsplit('@').next()?;
    (!host.is_empty()).then(|| format!("{scheme}://{host}"))
}

/// What [`check_field`] asks beyond "an input of this kind in a document
/// loaded from the origin".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Check {
    /// Nothing more.
    Bound,
    /// Make it private (reads omit its value from then on).
    Mark,
    /// It holds the focus (the keys that follow go into it).
    Focused,
}

/// Asks the page agent whether `target` is an input for `kind` in a
/// document loaded from `origin` (and what `check` adds).
async fn check_field(
    bidi: &Bidi,
    ctx: &str,
    origin: &str,
    target: &str,
    kind: CredentialKind,
    check: Check,
) -> Result<(), ErrorBody> {
    let v = agent(
        bidi,
        ctx,
        json!({"op": "credential", "ref": target, "types": kind.input_types(),
               "origin": origin, "mark": check == Check::Mark, "focused": check == Check::Focused}),
    )
    .await?;
    element_error(&v)
}

/// Key steps typed between two checks that the input still has the focus.
const KEYS_PER_CHECK: usize = 200;

/// Types one value into its (checked) target.
async fn fill(bidi: &Bidi, ctx: &str, origin: &str, f: &SignInValue) -> Result<(), ErrorBody> {
    check_field(bidi, ctx, origin, &f.target, f.kind, Check::Mark).await?;
    // Focus the field and select what it holds: the value replaces it.
    locate(bidi, ctx, &f.target, "editable").await?;
    let steps = typed_keys(f.value.expose());
    for chunk in steps.chunks(KEYS_PER_CHECK) {
        check_field(bidi, ctx, origin, &f.target, f.kind, Check::Focused).await?;
        perform(
            bidi,
            ctx,
            json!([{"type": "key", "id": "sandtop-keyboard", "actions": chunk}]),
        )
        .await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::url_origin;

    #[test]
    fn the_origin_of_a_tab_url() {
        assert_eq!(
            url_origin("http://127.0.0.1:8080/login?x=1").as_deref(),
            Some("http://127.0.0.1:8080")
        );
        assert_eq!(
            url_origin("https://user:pw@example.test/a#b").as_deref(),
            Some("https://example.test")
        );
        assert_eq!(
            url_origin("https://[::1]:8443").as_deref(),
            Some("https://[::1]:8443")
        );
        for none in [
            "about:blank",
            "data:text/html,x",
            "file:///etc",
            "http:///x",
        ] {
            assert_eq!(url_origin(none), None, "{none}");
        }
    }
}
