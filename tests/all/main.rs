//! Weir's integration and end-to-end tests, one binary (wasmtime's
//! `tests/all` pattern): one link, one run.
//!
//! Tests that exercise the `weir` command run it as a separate process
//! (`CARGO_BIN_EXE_weir`); tests of the runtime's guarantees (sandbox,
//! backpressure) drive `weir-host`'s embedded cluster directly so they can
//! watch its metrics. Every expected output is computed here, independently
//! of Weir's code. The example operators come from `weir_tests::artifacts`
//! (built from `udfs/` by `tests/build.rs`).

mod backpressure;
mod bad_input;
mod cache;
mod cluster;
mod confine;
mod contract;
mod ctrl_c;
mod embedded;
mod event_time;
mod exactly_once;
mod file_sources;
mod fraud;
mod joins;
mod kafka;
mod nats;
mod nexmark;
mod nexmark_kills;
mod polyglot;
mod processing_time;
mod rest;
mod rest_auth;
mod rest_tls;
mod sandbox;
mod savepoint;
mod side_output;
mod upgrade;
mod upload_memory;
mod util;
mod window_functions;
mod windows;
mod word_count;
