//! Serving the router with the limits a hostile network needs: a cap on
//! open connections, a bound and a deadline for the request head
//! (slowloris), a deadline for the whole body (the router's, `body`), and a
//! graceful shutdown that gives open requests a deadline instead of
//! waiting forever.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::limits::{
    CONNECTIONS_MAX, HEADER_BYTES_MAX, HEADER_FIELDS_MAX, HEADER_READ_TIMEOUT, SHUTDOWN_DEADLINE,
};

/// What `serve` bounds that a flag can change.
#[derive(Clone, Copy, Debug)]
pub struct ServeLimits {
    /// Connections open at once; past it a new one is closed at once.
    pub connections_max: usize,
}

impl Default for ServeLimits {
    fn default() -> ServeLimits {
        ServeLimits {
            connections_max: CONNECTIONS_MAX,
        }
    }
}

pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ServeLimits,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let graceful = GracefulShutdown::new();
    let connections = Arc::new(Semaphore::new(limits.connections_max));
    let mut shutdown = pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let stream = match accepted {
                    Ok((stream, _)) => stream,
                    Err(e) => {
                        // Out of file descriptors, say: wait a little rather
                        // than spin.
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                // Past the cap the connection is closed as it is accepted,
                // rather than left in the listen queue: a client learns at
                // once, and what the open connections hold stays bounded.
                // Not accepting would leave the kernel to queue them, where
                // they wait unseen until they time out.
                let Ok(permit) = connections.clone().try_acquire_owned() else {
                    tracing::debug!(
                        connections_max = limits.connections_max,
                        "connection refused: at the cap"
                    );
                    drop(stream);
                    continue;
                };
                let _ = stream.set_nodelay(true);
                let conn = http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(HEADER_READ_TIMEOUT)
                    // The read buffer bounds the head: a bigger one is
                    // answered 431.
                    .max_buf_size(HEADER_BYTES_MAX)
                    .max_headers(HEADER_FIELDS_MAX)
                    .serve_connection(TokioIo::new(stream), TowerToHyperService::new(app.clone()));
                let conn = graceful.watch(conn);
                tokio::spawn(async move {
                    if let Err(e) = conn.await {
                        tracing::debug!(error = %e, "connection ended with an error");
                    }
                    drop(permit);
                });
            }
            () = &mut shutdown => break,
        }
    }
    drop(listener);
    tokio::select! {
        () = graceful.shutdown() => tracing::info!("every connection finished"),
        () = tokio::time::sleep(SHUTDOWN_DEADLINE) => {
            tracing::warn!("connections still open after the shutdown deadline; closing them");
        }
    }
    Ok(())
}
