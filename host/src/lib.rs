//! `weir-host`: everything Weir's daemons run.
//!
//! Operators are WebAssembly components written against the contract in
//! `wit/operator.wit`; this crate compiles and sandboxes them, gives them
//! keyed state, wires them into a job graph and moves records between them.
//!
//! # Layout
//!
//! - [`job`]: the job spec (TOML), its validation, the logical [`job::JobGraph`]
//!   and chaining of operators into tasks.
//! - [`channel`]: what moves between subtasks ([`channel::Message`]), the
//!   job's abort signal, and the [`channel::Exchange`] a deployment uses.
//! - [`contract`]: the bindings generated from `wit/operator.wit`.
//! - [`record`]: the packed [`record::Batch`] that flows between operators and
//!   across the Wasm boundary.
//! - [`wasm`]: the wasmtime engine, the compiled-component cache, sandboxed
//!   operator instances and the host functions they import.
//! - [`state`]: key groups and the keyed state backends (RocksDB, heap).
//! - [`checkpoint`]: state snapshots (incremental for RocksDB), checkpoint
//!   storage and the registry of shared checkpoint files.
//! - [`connectors`]: sources (file, generator) and sinks (file, stdout, blackhole).
//! - [`taskmanager`]: runs one subtask of a task: the operator-chain driver,
//!   partitioners and bounded channels; and the TaskManager daemon.
//! - [`local`]: the deployment of a job's subtasks (every spec → runtime
//!   translation) that TaskManagers use.
//! - [`net`]: QUIC with mutual TLS between daemons, and the data plane that
//!   moves records between TaskManagers with credit-based flow control.
//! - [`rpc`]: the control protocol between TaskManagers and the JobManager.
//! - [`modules`]: the content-addressed module store (JobManager uploads,
//!   TaskManager caches).
//! - [`start`]: why a daemon could not start.
//! - [`jobmanager`]: the JobManager daemon: registry, heartbeats, slots,
//!   scheduling, job lifecycle, module store, REST API.
//! - [`embedded`]: `weir run`'s cluster: a JobManager core and a
//!   TaskManager core in one process, joined by in-memory channels.
//!
//! In tests only, `fuzz` holds what the property-based fuzz tests of every
//! decoder of untrusted bytes share (SECURITY.md, "Fuzzing").
//!
//! `weir-host` knows nothing of the CLI; the guest never sees its types.

pub mod channel;
pub mod checkpoint;
pub mod connectors;
pub mod contract;
pub mod embedded;
pub mod job;
pub mod jobmanager;
pub mod local;
pub mod modules;
pub mod net;
pub mod record;
pub mod rpc;
pub mod start;
pub mod state;
pub mod taskmanager;
pub mod wasm;

#[cfg(test)]
mod fuzz;
