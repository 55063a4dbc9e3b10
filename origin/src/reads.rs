//! Where the read routes do their work: a thread of their own, at the
//! lowest CPU priority the OS offers, so that ingest is never starved by
//! reads.
//!
//! Shedding (the router's concurrency limit) bounds how many reads wait,
//! and the read pool keeps reads off the writer's connection; but both
//! still let a flood of reads take the CPU that ingest needs. Here a read's
//! query, row decoding and JSON encoding all run on one thread whose nice
//! value is 19, and the read pool opens its connections from that thread,
//! so SQLite's per-connection worker threads inherit the same priority.
//! When ingest has work, the scheduler runs it first; when it has none,
//! reads get every idle cycle. Linux keeps a nice value per thread; on
//! other systems the thread runs at normal priority.

use std::future::Future;

use anyhow::Context;
use tokio::runtime::Handle;
use tokio::sync::oneshot;

/// The nice value of the read thread: the lowest priority.
pub const READ_THREAD_NICE: i32 = 19;

/// A current-thread runtime on its own low-priority thread. Dropping it
/// stops the thread; reads still running are cancelled.
pub struct ReadRuntime {
    handle: Handle,
    stop: Option<oneshot::Sender<()>>,
}

impl ReadRuntime {
    pub fn start() -> anyhow::Result<ReadRuntime> {
        let (started, handle) = std::sync::mpsc::channel();
        let (stop, stopped) = oneshot::channel::<()>();
        std::thread::Builder::new()
            .name("origin-reads".into())
            .spawn(move || {
                lower_priority();
                match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => {
                        let _ = started.send(Ok(rt.handle().clone()));
                        rt.block_on(async {
                            let _ = stopped.await;
                        });
                    }
                    Err(e) => {
                        let _ = started.send(Err(e));
                    }
                }
            })
            .context("starting the read thread")?;
        let handle = handle
            .recv()
            .context("the read thread stopped before it started")?
            .context("building the read runtime")?;
        Ok(ReadRuntime {
            handle,
            stop: Some(stop),
        })
    }

    /// Runs `work` on the read thread and waits for it.
    pub async fn run<F, T>(&self, work: F) -> anyhow::Result<T>
    where
        F: Future<Output = anyhow::Result<T>> + Send + 'static,
        T: Send + 'static,
    {
        self.handle
            .spawn(work)
            .await
            .context("the read thread dropped a read")?
    }
}

impl Drop for ReadRuntime {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// The calling thread's nice value. On Linux it is kept per thread, and a
/// thread id names the thread alone.
#[cfg(target_os = "linux")]
pub fn thread_nice() -> std::io::Result<i32> {
    Ok(rustix::process::getpriority_process(Some(
        rustix::thread::gettid(),
    ))?)
}

#[cfg(target_os = "linux")]
fn lower_priority() {
    let tid = rustix::thread::gettid();
    if let Err(e) = rustix::process::setpriority_process(Some(tid), READ_THREAD_NICE) {
        tracing::warn!(
            error = %e,
            "could not lower the read thread's priority; reads run at normal priority"
        );
    }
}

#[cfg(not(target_os = "linux"))]
fn lower_priority() {}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[tokio::test]
    async fn work_runs_on_the_read_thread_at_low_priority() {
        let reads = ReadRuntime::start().unwrap();
        let (name, nice) = reads
            .run(async {
                let name = std::thread::current().name().map(str::to_string);
                Ok((name, thread_nice()?))
            })
            .await
            .unwrap();
        assert_eq!(name.as_deref(), Some("origin-reads"));
        assert_eq!(nice, READ_THREAD_NICE);
        assert_ne!(
            thread_nice().unwrap(),
            READ_THREAD_NICE,
            "the caller's own priority is untouched"
        );
        // A thread started from the read thread inherits its priority, as
        // SQLite's connection threads do.
        let inherited = reads
            .run(async {
                std::thread::spawn(thread_nice)
                    .join()
                    .map_err(|_| anyhow::anyhow!("the child panicked"))?
                    .map_err(anyhow::Error::from)
            })
            .await
            .unwrap();
        assert_eq!(inherited, READ_THREAD_NICE);
    }
}
