//! The model side of the loop: a trait and the OpenAI Responses client.
//!
//! [`OpenAiModel`] POSTs `CreateResponse` bodies to `{base}/responses`
//! (`OPENAI_BASE_URL`, default `https://api.openai.com/v1`, as the OpenAI
//! SDKs read it), with or without streaming. 429, 5xx, connection failures
//! and cut streams are retried with capped exponential backoff (honouring
//! `Retry-After`); other errors are returned with the API's message. A
//! retry repeats a *model request*, never a driver action: actions only run
//! after a complete response has been read. The key never appears in
//! errors or logs.

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

use futures_util::StreamExt as _;
use serde_json::Value;

use sandtop_hostkit::secret::Secret;
use sandtop_runfolder::items::{self as wire, ModelResponse};

pub mod anthropic;
pub mod openai;
pub mod scripted;

/// Why a model request failed.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// The API refused the request (4xx other than 429): not retried.
    #[error("the model API refused the request ({status}): {message}")]
    Refused {
        status: u16,
        message: String,
        /// The request parameter the API named (`error.param`).
        param: Option<String>,
    },
    /// Retries were exhausted.
    #[error("the model API failed after {attempts} attempts: {last}")]
    Exhausted { attempts: u32, last: String },
    #[error(transparent)]
    Malformed(#[from] wire::Malformed),
    /// The scripted model has nothing more to say, or refused an input.
    #[error("scripted model: {0}")]
    Script(String),
}

/// What one `create` call cost.
#[derive(Debug, Clone, Copy, Default)]
pub struct CallStats {
    pub attempts: u32,
    pub duration: Duration,
}

/// A future returned by [`Model::create`].
pub type Creating<'a> =
    Pin<Box<dyn Future<Output = Result<(ModelResponse, CallStats), ModelError>> + Send + 'a>>;

/// Something that answers `CreateResponse` bodies.
pub trait Model: Send {
    /// For the record.
    fn describe(&self) -> String;
    /// The offline scripted model's proof of what it is (which alone may
    /// have its safety checks approved by `--approve-scripted-checks`):
    /// only the scripted model can make one.
    fn scripted(&self) -> Option<scripted::proof::ScriptedOnly> {
        None
    }
    fn create<'a>(&'a mut self, body: &'a Value) -> Creating<'a>;
    /// Whether this model's computer calls speak Sandtop's own action
    /// types besides the Responses API's (docs/contract.md rules 66 and
    /// 69: `mouse_down`, `mouse_up`, `hold_key`, and the reads
    /// `cursor_position` and `zoom`), as the Anthropic computer toolset's
    /// members need. An OpenAI model's never do: they are refused as
    /// unknown types.
    fn own_actions(&self) -> bool {
        false
    }
}

/// Retry schedule for model requests.
#[derive(Debug, Clone, Copy)]
pub struct RetryPolicy {
    pub max_attempts: u32,
    pub base: Duration,
    pub cap: Duration,
}

impl Default for RetryPolicy {
    fn default() -> RetryPolicy {
        RetryPolicy {
            max_attempts: 5,
            base: Duration::from_millis(500),
            cap: Duration::from_secs(8),
        }
    }
}

impl RetryPolicy {
    /// The delay before attempt `n` (1-based retries): base * 2^(n-1),
    /// capped, with up to 20% jitter; a server's Retry-After wins when
    /// larger (still capped).
    pub fn delay(&self, n: u32, retry_after: Option<Duration>) -> Duration {
        let exp = self
            .base
            .saturating_mul(1u32 << n.saturating_sub(1).min(16));
        let mut jitter = [0u8; 1];
        let _ = getrandom::fill(&mut jitter);
        let exp = exp + exp.mul_f64(f64::from(jitter[0]) / 255.0 * 0.2);
        exp.max(retry_after.unwrap_or_default()).min(self.cap)
    }
}

/// The OpenAI Responses API over HTTP.
#[derive(Debug)]
pub struct OpenAiModel {
    client: reqwest::Client,
    url: String,
    key: Secret,
    stream: bool,
    retry: RetryPolicy,
}

/// `OPENAI_BASE_URL` as the SDKs read it.
pub fn base_url() -> String {
    std::env::var("OPENAI_BASE_URL")
        .ok()
        .filter(|s| !s.trim().is_empty())
        .unwrap_or_else(|| "https://api.openai.com/v1".to_string())
        .trim_end_matches('/')
        .to_string()
}

/// One request's outcome: an answer (or a refusal) for the caller, or a
/// failure worth another attempt. Both model APIs share it.
enum Attempt {
    Done(Result<ModelResponse, ModelError>),
    Retry {
        why: String,
        after: Option<Duration>,
    },
}

/// The HTTP client both model APIs are called with.
fn http_client() -> Result<reqwest::Client, reqwest::Error> {
    reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .timeout(Duration::from_secs(600))
        .user_agent(concat!("sandtop-host-cli/", env!("CARGO_PKG_VERSION")))
        .build()
}

/// Sends a request to a model API (authorised with `key`, which no error
/// text repeats): the response when its status is a success; otherwise
/// the attempt's outcome: retried on no answer, 429 or a server error
/// (the Messages API's 529 "overloaded" among them; `Retry-After`
/// honoured), refused on any other status.
async fn send(req: reqwest::RequestBuilder, key: &Secret) -> Result<reqwest::Response, Attempt> {
    let resp = req
        .bearer_auth(key.expose())
        .send()
        .await
        .map_err(|e| Attempt::Retry {
            why: key.redact(&format!("request failed: {e}")),
            after: None,
        })?;
    let status = resp.status();
    if status.as_u16() == 429 || status.is_server_error() {
        let after = resp
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        let text = resp.text().await.unwrap_or_default();
        return Err(Attempt::Retry {
            why: key.redact(&format!("status {status}: {}", api_message(&text))),
            after,
        });
    }
    if !status.is_success() {
        let text = resp.text().await.unwrap_or_default();
        return Err(Attempt::Done(Err(ModelError::Refused {
            status: status.as_u16(),
            message: key.redact(&api_message(&text)),
            param: api_param(&text),
        })));
    }
    Ok(resp)
}

/// A whole JSON reply, read by `parse`; one that does not arrive whole or
/// is not JSON is retried.
async fn json_reply(
    resp: reqwest::Response,
    parse: impl FnOnce(&Value) -> Result<ModelResponse, wire::Malformed>,
) -> Attempt {
    match resp.bytes().await {
        Ok(bytes) => match serde_json::from_slice::<Value>(&bytes) {
            Ok(v) => Attempt::Done(parse(&v).map_err(ModelError::from)),
            Err(e) => Attempt::Retry {
                why: format!("the reply is not JSON: {e}"),
                after: None,
            },
        },
        Err(e) => Attempt::Retry {
            why: format!("reading the reply: {e}"),
            after: None,
        },
    }
}

/// Makes `attempt` up to the policy's number of times, waiting its delay
/// between two (each failure logged, model text made safe for a terminal).
async fn with_retries<F, Fut>(
    retry: RetryPolicy,
    mut attempt: F,
) -> Result<(ModelResponse, CallStats), ModelError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Attempt>,
{
    let start = Instant::now();
    let mut last = String::new();
    for n in 1..=retry.max_attempts {
        match attempt().await {
            Attempt::Done(r) => {
                return r.map(|resp| {
                    (
                        resp,
                        CallStats {
                            attempts: n,
                            duration: start.elapsed(),
                        },
                    )
                });
            }
            Attempt::Retry { why, after } => {
                tracing::warn!(attempt = n, reason = %sandtop_hostkit::term::safe_line(&why), "model request failed; retrying");
                last = why;
                if n < retry.max_attempts {
                    tokio::time::sleep(retry.delay(n, after)).await;
                }
            }
        }
    }
    Err(ModelError::Exhausted {
        attempts: retry.max_attempts,
        last,
    })
}

impl OpenAiModel {
    /// A client for `OPENAI_BASE_URL` (or the default).
    pub fn new(
        key: Secret,
        stream: bool,
        retry: RetryPolicy,
    ) -> Result<OpenAiModel, reqwest::Error> {
        OpenAiModel::with_base_url(key, &base_url(), stream, retry)
    }

    /// A client for an explicit base URL (`{base}/responses` is called).
    pub fn with_base_url(
        key: Secret,
        base: &str,
        stream: bool,
        retry: RetryPolicy,
    ) -> Result<OpenAiModel, reqwest::Error> {
        Ok(OpenAiModel {
            client: http_client()?,
            url: format!("{}/responses", base.trim_end_matches('/')),
            key,
            stream,
            retry,
        })
    }

    async fn attempt(&self, body: &Value) -> Attempt {
        let resp = match send(self.client.post(&self.url).json(body), &self.key).await {
            Ok(r) => r,
            Err(a) => return a,
        };
        if self.stream {
            self.read_stream(resp).await
        } else {
            json_reply(resp, wire::parse_response).await
        }
    }

    /// Reads an SSE stream to its `response.completed` (or `.incomplete`,
    /// `.failed`) event, whose `response` is the whole response.
    async fn read_stream(&self, resp: reqwest::Response) -> Attempt {
        use eventsource_stream::Eventsource as _;
        let mut events = resp.bytes_stream().eventsource();
        while let Some(ev) = events.next().await {
            let ev = match ev {
                Ok(ev) => ev,
                Err(e) => {
                    return Attempt::Retry {
                        why: format!("the stream broke: {e}"),
                        after: None,
                    };
                }
            };
            let Ok(data) = serde_json::from_str::<Value>(&ev.data) else {
                continue;
            };
            match data
                .get("type")
                .and_then(Value::as_str)
                .unwrap_or(&ev.event)
            {
                "response.completed" | "response.incomplete" | "response.failed" => {
                    let Some(r) = data.get("response") else {
                        return Attempt::Done(Err(wire::Malformed(
                            "a terminal stream event without `response`".into(),
                        )
                        .into()));
                    };
                    return Attempt::Done(wire::parse_response(r).map_err(ModelError::from));
                }
                "error" => {
                    return Attempt::Retry {
                        why: self.key.redact(&format!(
                            "stream error: {}",
                            data.get("message").and_then(Value::as_str).unwrap_or("?")
                        )),
                        after: None,
                    };
                }
                _ => {}
            }
        }
        Attempt::Retry {
            why: "the stream ended before the response was complete".into(),
            after: None,
        }
    }
}

fn api_message(body: &str) -> String {
    serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|v| {
            v.get("error")
                .and_then(|e| e.get("message"))
                .and_then(Value::as_str)
                .map(str::to_string)
        })
        .unwrap_or_else(|| body.chars().take(300).collect())
}

/// The `error.param` of an API error body, when it names one.
fn api_param(body: &str) -> Option<String> {
    serde_json::from_str::<Value>(body)
        .ok()?
        .get("error")?
        .get("param")?
        .as_str()
        .map(|p| p.chars().take(64).collect())
}

impl ModelError {
    /// The API refused `context_management` (the model does not support
    /// compaction): a 400 naming it.
    pub fn refuses_compaction(&self) -> bool {
        matches!(self, ModelError::Refused { status: 400, param: Some(p), .. }
            if p.starts_with("context_management"))
    }
}

impl Model for OpenAiModel {
    fn describe(&self) -> String {
        format!("openai responses at {}", self.url)
    }

    fn create<'a>(&'a mut self, body: &'a Value) -> Creating<'a> {
        let this = &*self;
        Box::pin(with_retries(this.retry, move || this.attempt(body)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_is_capped() {
        let p = RetryPolicy::default();
        let d1 = p.delay(1, None);
        let d3 = p.delay(3, None);
        assert!(
            d1 >= Duration::from_millis(500) && d1 <= Duration::from_millis(600),
            "{d1:?}"
        );
        assert!(d3 >= Duration::from_secs(2), "{d3:?}");
        assert_eq!(p.delay(30, None), p.cap);
        assert_eq!(p.delay(1, Some(Duration::from_secs(60))), p.cap);
        assert!(p.delay(1, Some(Duration::from_secs(3))) >= Duration::from_secs(3));
    }
}
