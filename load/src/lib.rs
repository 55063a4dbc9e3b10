//! flashgate-load: a flash sale against a URL, with figures and a verdict
//! checked from outside. The plan, the measures and the verdict are pure
//! (`plan`, `measure`, `verdict`, and `audit`, the waiting room checked from
//! outside) and tested natively; `run` does the I/O.

pub mod audit;
pub mod client;
pub mod measure;
pub mod plan;
pub mod report;
pub mod run;
pub mod verdict;
