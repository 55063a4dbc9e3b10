//! Request bodies: read whole, at most `BODY_BYTES_MAX`, within a deadline
//! for the whole body, and only by a handler whose access extractors
//! (`auth`) have already let the caller in.
//!
//! The deadline is fixed when the request reaches the router (its head is
//! read by then) and counts to the body's last byte. tower-http's
//! `RequestBodyTimeoutLayer` was here before: it restarts its timer on
//! every frame, so a body sent a byte a second was never cut by it, only by
//! the request's 30 s deadline.

use std::error::Error as _;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::rejection::BytesRejection;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use axum::BoxError;
use http_body::{Frame, SizeHint};
use tokio::time::Sleep;

use crate::limits::BODY_BYTES_MAX;
use crate::problem::{AppError, OriginCode};

/// The error a body gives once its deadline has passed.
#[derive(Debug)]
pub struct BodyDeadlineElapsed {
    pub within_ms: u128,
}

impl fmt::Display for BodyDeadlineElapsed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the whole request body must arrive within {} ms of its head",
            self.within_ms
        )
    }
}

impl std::error::Error for BodyDeadlineElapsed {}

/// A request body that fails once a deadline fixed at its start passes,
/// however its bytes are spread over time.
pub struct DeadlineBody {
    inner: Body,
    deadline: Pin<Box<Sleep>>,
    within: Duration,
}

impl DeadlineBody {
    pub fn new(inner: Body, within: Duration) -> DeadlineBody {
        DeadlineBody {
            inner,
            deadline: Box::pin(tokio::time::sleep(within)),
            within,
        }
    }
}

impl HttpBody for DeadlineBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        // Both fields are `Unpin` (a boxed body, a boxed timer).
        let this = self.get_mut();
        if this.deadline.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Some(Err(Box::new(BodyDeadlineElapsed {
                within_ms: this.within.as_millis(),
            }))));
        }
        Pin::new(&mut this.inner)
            .poll_frame(cx)
            .map_err(BoxError::from)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Gives a request's body its deadline; the router maps every request
/// through this.
pub fn with_deadline(request: Request, within: Duration) -> Request {
    request.map(|body| Body::new(DeadlineBody::new(body, within)))
}

/// The body, whole. Take it as a handler's last argument, after the
/// extractors that check the caller: extractors run in order, so a caller
/// without a credential is answered before a byte of the body is read.
pub struct RawBody(pub Bytes);

impl<S: Send + Sync> FromRequest<S> for RawBody {
    type Rejection = AppError;

    async fn from_request(request: Request, state: &S) -> Result<RawBody, AppError> {
        body_of(Bytes::from_request(request, state).await).map(RawBody)
    }
}

/// The body, or the problem document for why it could not be read.
pub fn body_of(body: Result<Bytes, BytesRejection>) -> Result<Bytes, AppError> {
    body.map_err(|r| {
        let mut cause = r.source();
        while let Some(e) = cause {
            if let Some(elapsed) = e.downcast_ref::<BodyDeadlineElapsed>() {
                return AppError::new(OriginCode::BodyTimeout, elapsed.to_string());
            }
            cause = e.source();
        }
        if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
            AppError::new(
                OriginCode::BodyTooLarge,
                format!("the body must be at most {BODY_BYTES_MAX} bytes"),
            )
        } else {
            AppError::new(OriginCode::BadBody, r.body_text())
        }
    })
}

pub fn parse_json<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, AppError> {
    serde_json::from_slice(body).map_err(|e| {
        if e.is_syntax() || e.is_eof() {
            AppError::new(OriginCode::MalformedJson, e.to_string())
        } else {
            AppError::new(OriginCode::InvalidBody, e.to_string())
        }
    })
}
