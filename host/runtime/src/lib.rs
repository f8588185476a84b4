//! `weir-runtime`: everything below the daemons, from a Wasm operator call
//! to a checkpoint's files. The JobManager (`weir-jobmanager`), the
//! TaskManager daemon (`weir-taskmanager`) and the embedded cluster
//! (`weir-host`) are built on it; it knows none of them.
//!
//! # Modules, lowest first
//!
//! - [`job`] (the `weir-job` crate): the job spec, its validation, the
//!   logical graph, chaining, and every config type.
//! - [`state`] (the `weir-state` crate): key groups and the keyed state
//!   backends (RocksDB, heap), TTL.
//! - [`contract`]: the bindings generated from `wit/operator.wit`.
//! - [`record`]: the packed [`record::Batch`] that flows between operators
//!   and across the Wasm boundary.
//! - [`json_fields`]: a few top-level fields of a JSON record, read
//!   without building the whole document (JSON-lines sources, `json:`
//!   keys and window fields).
//! - [`wasm`]: the wasmtime engine, the compiled-component cache,
//!   sandboxed operator instances and the host functions they import.
//! - [`channel`]: what moves between subtasks ([`channel::Message`]), the
//!   job's abort signal, and the [`channel::Exchange`] a deployment uses.
//! - [`connectors`]: sources (file, generator) and sinks (file, stdout,
//!   blackhole), confined to the allowed roots.
//! - [`net`]: QUIC with mutual TLS between daemons, and the data plane
//!   that moves records between TaskManagers with credit-based flow
//!   control.
//! - [`checkpoint`]: state snapshots (incremental for RocksDB), checkpoint
//!   storage, the registry of shared files, the coordinator and the
//!   TaskManager's ack ledger.
//! - [`rpc`]: the control protocol between TaskManagers and the
//!   JobManager, and the in-process link of the embedded cluster.
//! - [`taskmanager`]: one subtask: the operator-chain driver, its input
//!   gate, partitioners and bounded channels.
//! - [`local`]: the deployment of a job's subtasks (every spec → runtime
//!   translation) that every TaskManager uses.
//! - [`modules`]: the content-addressed module store.
//! - [`telemetry`]: what operators log and measure, kept per subtask in
//!   bounded rings, and the Prometheus exposition of `/metrics`.
//! - [`start`]: why a daemon could not start.
//!
//! `job` and `state` are separate crates below this one, re-exported here
//! under their module names so that `crate::job` and `crate::state` read
//! as before the split.

pub use weir_job as job;
pub use weir_state as state;

pub mod channel;
pub mod checkpoint;
pub mod connectors;
pub mod contract;
mod host_operator;
pub mod join;
pub mod json_fields;
pub mod local;
pub mod modules;
pub mod net;
pub mod record;
pub mod rpc;
pub mod start;
pub mod taskmanager;
pub mod telemetry;
pub mod wasm;
pub mod window;
