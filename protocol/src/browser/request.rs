//! `POST /v1/browser/call`'s body as a whole: one [`BrowserCall`]
//! (`{member, ...arguments}`) and what the host requires of the page the
//! call acts on, which the daemon checks at execution, in the document it
//! acts on (docs/contract.md rules 28a, 28b and 30a):
//!
//! - `url_policy`: the host's URL policy, exact origins as browsers
//!   serialise them (`scheme://host[:port]`, the default port left out). A
//!   member that changes something acts only while the document it acts
//!   on — the tab's top document, and the frame's document that holds the
//!   target, the focus or the point — is of one of these origins; else
//!   `out_of_policy` and nothing is done there. A navigation whose
//!   document ends outside (a redirect, the page's own script) is
//!   `out_of_policy` too. Absent: no policy (the daemon opens http, https
//!   and about:blank whatever the host says).
//! - `expect` (docs/contract.md rule 28a): the role and label of the call's target
//!   as the operator was shown them; the daemon acts only if the target
//!   still has both, checked in the evaluation that resolves it (else
//!   `stale_target`, nothing done): a page that relabels a button while
//!   the operator reads the question gets nothing.
//! - `expect_page` (docs/contract.md rule 28b): the page the operator approved the
//!   call on, for calls a ref does not bind: the tab (a `tab_id: null`
//!   call acts only while that tab is still the active one), its document
//!   (the page agent's registry id, new on every load: points and keys
//!   act only on the same load) and the keyboard focus (`hold_keys`: the
//!   element that held it). Any of them changed: `stale_target`, nothing
//!   done.
//!
//! The call's own fields stay at the top level (the call is flattened),
//! so a body without the host's fields is exactly a [`BrowserCall`].

use serde::{Deserialize, Serialize};

use super::{BrowserCall, MAX_LABEL_BYTES, MAX_REF_BYTES, MAX_URL_BYTES, ReadRole};

/// The most origins a request's URL policy lists.
pub const MAX_POLICY_ORIGINS: usize = 64;

/// One browser call with the host's requirements (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrowserRequest {
    #[serde(flatten)]
    pub call: BrowserCall,
    /// The host's URL policy, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url_policy: Option<Vec<String>>,
    /// The target's role and label as approved, for a call with a target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expect: Option<ExpectedTarget>,
    /// The page (tab, document, focus) as approved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expect_page: Option<ExpectedPage>,
}

/// The page a call was approved on (a `describe_page` read), as far as
/// the call needs it: the tab always; the document and the focus when
/// given.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExpectedPage {
    pub tab_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub document: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub focus: Option<String>,
}

/// A target as the operator was shown it: what a read reported of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExpectedTarget {
    pub role: ReadRole,
    pub label: String,
}

impl BrowserRequest {
    /// A call without requirements.
    pub fn plain(call: BrowserCall) -> BrowserRequest {
        BrowserRequest {
            call,
            url_policy: None,
            expect: None,
            expect_page: None,
        }
    }

    /// The call's limits ([`BrowserCall::check`]) and the policy's: 1 to
    /// [`MAX_POLICY_ORIGINS`] origins, each `http://` or `https://` and a
    /// host (no path, query, fragment, user info, white space or control
    /// characters), at most [`MAX_URL_BYTES`] bytes.
    pub fn check(&self) -> Result<(), crate::Invalid> {
        self.call.check()?;
        if let Some(e) = &self.expect
            && (e.label.is_empty() || e.label.len() > MAX_LABEL_BYTES)
        {
            return Err(crate::invalid!(
                "`expect.label`: 1 to {MAX_LABEL_BYTES} bytes"
            ));
        }
        if let Some(p) = &self.expect_page {
            for (name, v) in [
                ("tab_id", Some(&p.tab_id)),
                ("document", p.document.as_ref()),
                ("focus", p.focus.as_ref()),
            ] {
                if let Some(v) = v
                    && (v.is_empty() || v.len() > MAX_REF_BYTES)
                {
                    return Err(crate::invalid!(
                        "`expect_page.{name}`: 1 to {MAX_REF_BYTES} bytes"
                    ));
                }
            }
        }
        if let Some(p) = &self.url_policy {
            if p.is_empty() || p.len() > MAX_POLICY_ORIGINS {
                return Err(crate::invalid!(
                    "`url_policy`: 1 to {MAX_POLICY_ORIGINS} origins, got {}",
                    p.len()
                ));
            }
            for o in p {
                check_origin(o).map_err(|e| format!("`url_policy`: {e}"))?;
            }
        }
        Ok(())
    }
}

/// An origin as a browser serialises it: `http://` or `https://`, then a
/// non-empty host with an optional port, nothing else.
fn check_origin(o: &str) -> Result<(), crate::Invalid> {
    if o.len() > MAX_URL_BYTES {
        return Err(crate::invalid!(
            "an origin is at most {MAX_URL_BYTES} bytes"
        ));
    }
    let rest = o
        .strip_prefix("https://")
        .or_else(|| o.strip_prefix("http://"))
        .ok_or("an origin starts with http:// or https://")?;
    if rest.is_empty()
        || rest
            .chars()
            .any(|c| c.is_control() || c.is_whitespace() || "/?#@\\".contains(c))
    {
        return Err("an origin is a scheme and a host, with an optional port".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_call_stays_at_the_top_level_beside_the_policy() {
        let plain = br#"{"member":"click","tab_id":null,"target":"ab.1"}"#;
        let r: BrowserRequest = crate::from_json_objects(plain).unwrap();
        assert_eq!(r.url_policy, None);
        assert_eq!(r.call.member(), "click");
        assert_eq!(serde_json::to_vec(&r).unwrap(), plain.to_vec());
        let with = br#"{"member":"type","tab_id":"t1","text":"hi","target":"ab.2","url_policy":["http://127.0.0.1:8080"]}"#;
        let r: BrowserRequest = crate::from_json_objects(with).unwrap();
        assert_eq!(
            r.url_policy.as_deref(),
            Some(&["http://127.0.0.1:8080".to_string()][..])
        );
        assert!(r.check().is_ok());
        assert_eq!(serde_json::to_vec(&r).unwrap(), with.to_vec());
        // Numbers of every width still parse through the flattening.
        let r: BrowserRequest = crate::from_json_objects(
            br#"{"member":"read_page_scoped","tab_id":null,"root":null,"depth":3,"filter":"all","url_policy":["https://a.test"]}"#,
        )
        .unwrap();
        assert!(matches!(
            r.call,
            BrowserCall::ReadPageScoped { depth: 3, .. }
        ));
        let r: BrowserRequest = crate::from_json_objects(br#"{"member":"take_download"}"#).unwrap();
        assert_eq!(r.call, BrowserCall::TakeDownload {});
    }

    #[test]
    fn unknown_fields_and_bad_policies_are_refused() {
        for bad in [
            &br#"{"member":"click","tab_id":null,"target":"a","extra":1}"#[..],
            br#"{"member":"click","tab_id":null,"target":"a","url_policy":"http://a"}"#,
            br#"{"member":"click","tab_id":null,"target":"a","url_policy":[["http://a"]]}"#,
            br#"{"member":"click","tab_id":null,"target":"a","url_policy":[1]}"#,
            br#"{"url_policy":["http://a"]}"#,
        ] {
            assert!(
                crate::from_json_objects::<BrowserRequest>(bad).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        let call = BrowserCall::Click {
            tab_id: None,
            target: "a.1".into(),
        };
        let with = |p: Vec<&str>| BrowserRequest {
            call: call.clone(),
            url_policy: Some(p.into_iter().map(str::to_string).collect()),
            expect: None,
            expect_page: None,
        };
        assert!(
            with(vec!["https://a.test", "http://[::1]:8080"])
                .check()
                .is_ok()
        );
        for bad in [
            vec![],
            vec!["ftp://a.test"],
            vec!["https://"],
            vec!["https://a.test/"],
            vec!["https://u@a.test"],
            vec!["https://a.test?x"],
            vec!["https://a test"],
            vec!["https://a.test\n"],
        ] {
            let e = with(bad.clone()).check().unwrap_err();
            assert!(e.to_string().contains("url_policy"), "{bad:?}: {e}");
        }
        let many = vec!["https://a.test"; MAX_POLICY_ORIGINS + 1];
        assert!(with(many).check().is_err());
    }

    #[test]
    fn the_expected_target_travels_with_the_call() {
        let body = br#"{"member":"click","tab_id":null,"target":"ab.1","expect":{"role":"button","label":"Save draft"}}"#;
        let r: BrowserRequest = crate::from_json_objects(body).unwrap();
        assert_eq!(
            r.expect,
            Some(ExpectedTarget {
                role: ReadRole::Button,
                label: "Save draft".into()
            })
        );
        assert!(r.check().is_ok());
        assert_eq!(serde_json::to_vec(&r).unwrap(), body.to_vec());
        for bad in [
            &br#"{"member":"click","tab_id":null,"target":"a","expect":{"role":"button"}}"#[..],
            br#"{"member":"click","tab_id":null,"target":"a","expect":{"role":"link","label":"x"}}"#,
            br#"{"member":"click","tab_id":null,"target":"a","expect":{"role":"button","label":"x","y":1}}"#,
        ] {
            assert!(crate::from_json_objects::<BrowserRequest>(bad).is_err());
        }
        let mut r = r;
        r.expect.as_mut().unwrap().label = String::new();
        assert!(r.check().unwrap_err().to_string().contains("expect"));
    }

    #[test]
    fn the_approved_page_travels_with_the_call() {
        let body = br#"{"member":"click_at","tab_id":null,"x":1,"y":2,"button":"left","click_count":1,"keys":[],"expect_page":{"tab_id":"t1","document":"ab12","focus":"ab12.3"}}"#;
        let r: BrowserRequest = crate::from_json_objects(body).unwrap();
        assert_eq!(
            r.expect_page,
            Some(ExpectedPage {
                tab_id: "t1".into(),
                document: Some("ab12".into()),
                focus: Some("ab12.3".into()),
            })
        );
        assert!(r.check().is_ok());
        assert_eq!(serde_json::to_vec(&r).unwrap(), body.to_vec());
        // The tab alone.
        let tab = br#"{"member":"scroll","tab_id":null,"direction":"down","amount":5,"expect_page":{"tab_id":"t1"}}"#;
        let r: BrowserRequest = crate::from_json_objects(tab).unwrap();
        assert_eq!(serde_json::to_vec(&r).unwrap(), tab.to_vec());
        for bad in [
            &br#"{"member":"scroll","tab_id":null,"direction":"down","amount":5,"expect_page":{}}"#[..],
            br#"{"member":"scroll","tab_id":null,"direction":"down","amount":5,"expect_page":{"tab_id":"t","x":1}}"#,
        ] {
            assert!(crate::from_json_objects::<BrowserRequest>(bad).is_err());
        }
        let mut r = r;
        r.expect_page.as_mut().unwrap().document = Some(String::new());
        assert!(
            r.check()
                .unwrap_err()
                .to_string()
                .contains("expect_page.document")
        );
    }
}
