//! One HTTP exchange, measured: the answer's status, problem code and body,
//! or the network error, with its latency. Nothing here decides what a
//! buyer does next; `run` does.

use std::time::{Duration, Instant};

use reqwest::{Client, RequestBuilder};
use serde_json::Value;

/// Each attempt's own deadline: a reset connection can otherwise leave a
/// request waiting without end.
pub const ATTEMPT_TIMEOUT_MS: u64 = 30_000;

#[derive(Clone, Debug)]
pub struct Answer {
    /// `None` for a network error or a timeout.
    pub status: Option<u16>,
    /// The problem document's `code`, if the answer was one.
    pub code: Option<String>,
    pub body: Value,
    /// `Retry-After`, in seconds.
    pub retry_after_s: Option<u64>,
    pub ms: f64,
}

impl Answer {
    pub fn ok(&self) -> bool {
        matches!(self.status, Some(200..=299))
    }

    /// What the answer is counted as: the problem code, else the status,
    /// else `network_error`.
    pub fn label(&self) -> String {
        match (&self.code, self.status) {
            (Some(code), _) => code.clone(),
            (None, Some(status)) => status.to_string(),
            (None, None) => "network_error".into(),
        }
    }

    /// A string member of the body.
    pub fn str(&self, name: &str) -> Option<&str> {
        self.body.get(name).and_then(Value::as_str)
    }
}

pub fn client(connections: usize) -> reqwest::Result<Client> {
    Client::builder()
        .pool_max_idle_per_host(connections)
        .timeout(Duration::from_millis(ATTEMPT_TIMEOUT_MS))
        .tcp_nodelay(true)
        .build()
}

/// Sends one request and reads its whole answer.
pub async fn send(request: RequestBuilder) -> Answer {
    let started = Instant::now();
    let result = async {
        let response = request.send().await?;
        let status = response.status().as_u16();
        let retry_after_s = response
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse().ok());
        let bytes = response.bytes().await?;
        Ok::<_, reqwest::Error>((status, retry_after_s, bytes))
    }
    .await;
    let ms = started.elapsed().as_secs_f64() * 1000.0;
    match result {
        Ok((status, retry_after_s, bytes)) => {
            let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            let code = if status >= 400 {
                body.get("code").and_then(Value::as_str).map(str::to_owned)
            } else {
                None
            };
            Answer {
                status: Some(status),
                code,
                body,
                retry_after_s,
                ms,
            }
        }
        Err(_) => Answer {
            status: None,
            code: None,
            body: Value::Null,
            retry_after_s: None,
            ms,
        },
    }
}
