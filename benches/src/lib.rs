//! `weir-benches`: what Weir's benchmarks and workload harness share.
//!
//! The numbers and the commands that produce them are in `benches/README.md`;
//! the batch-encoding decision is in `wit/README.md`.
//!
//! # Layout
//!
//! - [`fixtures`]: the input every benchmark uses: batches of fixed-size
//!   records and the keyed-count key order.
//! - [`native`]: the baselines, the same work done in plain Rust: the copy
//!   that `identity` amounts to, and a word count with `tokenize`'s rules.
//! - [`embedded`]: a job spec run to its end on an embedded cluster.
//! - [`measure`]: peak memory from `/proc/self/status` and latency
//!   percentiles.
//!
//! Every baseline here must do the same work as the Weir path it is
//! compared with, no more and no less; where it cannot, its doc says what
//! differs.

pub mod embedded;
pub mod fixtures;
pub mod measure;
pub mod native;
