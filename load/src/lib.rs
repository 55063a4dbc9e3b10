//! flashgate-load: a flash sale against a URL, with figures and a verdict
//! checked from outside. The plan, the measures and the verdict are pure
//! (`plan`, `measure`, `verdict`, `sold_out`, each `sold_out` answer judged
//! from outside, `server_timing`, the gate's report of a reserve's wait,
//! and `audit`, the waiting room checked from outside) and tested natively;
//! `run` does the I/O.

pub mod audit;
pub mod client;
pub mod history_check;
pub mod measure;
pub mod plan;
pub mod report;
pub mod run;
pub mod server_timing;
pub mod sold_out;
pub mod verdict;
