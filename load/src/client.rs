//! One HTTP exchange, measured: the answer's status, problem code and body,
//! or the network error, with its latency. Nothing here decides what a
//! buyer does next; `run` does.

use std::time::{Duration, Instant};

use reqwest::{Client, RequestBuilder};
use serde_json::Value;

use crate::server_timing::{self, EscrowWait};

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
    /// The wait for a shard's call home its `Server-Timing` reports.
    pub escrow_wait: Option<EscrowWait>,
    pub ms: f64,
    /// When this attempt was sent and its answer read, in µs on the run's
    /// clock (0 for one never sent); `run` stamps them.
    pub sent_us: u64,
    pub received_us: u64,
    /// When the first attempt of a retried request was sent: the request
    /// may have taken effect at any attempt.
    pub first_sent_us: u64,
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

    /// The answer to a request the run's stop cut short: never sent, or
    /// dropped in flight, so whether it took effect is unknown. It is
    /// counted as `stopped`, not as a network error.
    pub fn stopped() -> Answer {
        Answer {
            status: None,
            code: Some(STOPPED.into()),
            body: Value::Null,
            retry_after_s: None,
            escrow_wait: None,
            ms: 0.0,
            sent_us: 0,
            received_us: 0,
            first_sent_us: 0,
        }
    }
}

/// The label of a request or a buyer the run's stop cut short.
pub const STOPPED: &str = "stopped";

/// How long to wait before attempt `attempt + 1` of a request that is safe
/// to repeat, or `None` if its answer is final. A network error backs off
/// exponentially from `backoff_ms`; a 429 or a 503 waits what its
/// `Retry-After` says (1 s without one), at most `retry_after_ms_max`.
pub fn retry_wait_ms(
    status: Option<u16>,
    retry_after_s: Option<u64>,
    attempt: u32,
    backoff_ms: u64,
    retry_after_ms_max: u64,
) -> Option<u64> {
    match status {
        None => Some(backoff_ms << (attempt.clamp(1, 16) - 1)),
        Some(429) | Some(503) => Some(
            retry_after_s
                .map_or(1_000, |s| s.saturating_mul(1_000))
                .min(retry_after_ms_max),
        ),
        Some(_) => None,
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
        let escrow_wait = server_timing::escrow_wait(
            response
                .headers()
                .get_all("server-timing")
                .iter()
                .filter_map(|v| v.to_str().ok()),
        );
        let bytes = response.bytes().await?;
        Ok::<_, reqwest::Error>((status, retry_after_s, escrow_wait, bytes))
    }
    .await;
    let ms = started.elapsed().as_secs_f64() * 1000.0;
    match result {
        Ok((status, retry_after_s, escrow_wait, bytes)) => {
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
                escrow_wait,
                ms,
                sent_us: 0,
                received_us: 0,
                first_sent_us: 0,
            }
        }
        Err(_) => Answer {
            status: None,
            code: None,
            body: Value::Null,
            retry_after_s: None,
            escrow_wait: None,
            ms,
            sent_us: 0,
            received_us: 0,
            first_sent_us: 0,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_retry_waits_as_the_server_says_within_a_cap() {
        // A 429 with Retry-After: 10 waits 10 s when the cap allows it, and
        // the cap when it does not.
        assert_eq!(
            retry_wait_ms(Some(429), Some(10), 1, 100, 60_000),
            Some(10_000)
        );
        assert_eq!(
            retry_wait_ms(Some(429), Some(10), 1, 100, 5_000),
            Some(5_000)
        );
        assert_eq!(retry_wait_ms(Some(503), None, 3, 100, 60_000), Some(1_000));
        // A huge Retry-After does not overflow.
        assert_eq!(
            retry_wait_ms(Some(429), Some(u64::MAX), 1, 100, 60_000),
            Some(60_000)
        );
        // Network errors back off: 100, 200, 400 ms.
        let waits: Vec<_> = (1..=3)
            .map(|a| retry_wait_ms(None, None, a, 100, 60_000))
            .collect();
        assert_eq!(waits, [Some(100), Some(200), Some(400)]);
        // Every other answer is final.
        for status in [200, 201, 400, 401, 404, 409, 500] {
            assert_eq!(
                retry_wait_ms(Some(status), Some(1), 1, 100, 60_000),
                None,
                "{status}"
            );
        }
        assert_eq!(Answer::stopped().label(), STOPPED);
    }
}
