//! `weir-host`: everything Weir's daemons run, as one crate.
//!
//! Operators are WebAssembly components written against the contract in
//! `wit/operator.wit`; the crates under `host/` compile and sandbox them,
//! give them keyed state, wire them into a job graph and move records
//! between them. This crate re-exports them under one set of paths (what
//! the CLI, the tests and the benches use) and adds the embedded cluster
//! of `weir run`. `host/README.md` draws the crate graph.
//!
//! # Layout (each a crate, lowest first)
//!
//! - [`job`] (`weir-job`): the job spec (TOML), its validation, the
//!   logical [`job::JobGraph`], chaining, every config type.
//! - [`state`] (`weir-state`): key groups and the keyed state backends.
//! - `weir-runtime`: [`contract`], [`record`], [`wasm`], [`channel`],
//!   [`connectors`], [`net`], [`checkpoint`], [`rpc`], the subtask driver
//!   in [`taskmanager`], the deployment in [`local`], [`modules`],
//!   [`start`].
//! - [`jobmanager`] (`weir-jobmanager`): registry, heartbeats, slots,
//!   scheduling, job lifecycle, module store, REST API.
//! - [`taskmanager::daemon`] (`weir-taskmanager`): the TaskManager daemon.
//! - [`embedded`] (this crate): `weir run`'s cluster: a JobManager core and
//!   a TaskManager core in one process, joined by in-memory channels.
//!
//! `weir-host` knows nothing of the CLI; the guest never sees its types.

pub use weir_job as job;
pub use weir_jobmanager as jobmanager;
pub use weir_runtime::{
    channel, checkpoint, connectors, contract, local, modules, net, record, rpc, start, telemetry,
    wasm,
};
pub use weir_state as state;

pub mod embedded;

/// One subtask (the driver, from `weir-runtime`) and the TaskManager
/// daemon that runs many ([`daemon`], the `weir-taskmanager` crate).
pub mod taskmanager {
    pub use weir_runtime::taskmanager::*;
    pub use weir_taskmanager as daemon;
}
