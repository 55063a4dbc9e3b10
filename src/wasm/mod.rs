//! The shell: everything that touches the Workers runtime. It moves bytes,
//! time, SQL and fetches in and out of the pure modules, and decides
//! nothing itself.

mod config;
mod edge;
mod http;
mod object;
