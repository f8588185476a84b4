//! Why a daemon (JobManager, TaskManager, or the embedded cluster's cores)
//! could not start: shared by every layer that starts one.

use std::net::SocketAddr;
use std::path::PathBuf;

/// Why a daemon could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A socket could not be bound.
    #[error("cannot listen on {address}: {message}")]
    Bind {
        /// The address.
        address: SocketAddr,
        /// Why.
        message: String,
    },
    /// The data directory is unusable.
    #[error("data directory {}: {message}", path.display())]
    DataDir {
        /// The directory.
        path: PathBuf,
        /// Why.
        message: String,
    },
    /// The Wasm runtime could not start.
    #[error("wasm runtime: {0}")]
    Runtime(String),
    /// REST authentication is misconfigured (an empty token, no token off
    /// loopback) or its token file is unusable.
    #[error("{0}")]
    RestAuth(String),
    /// The daemon's certificate is not for its role.
    #[error("{0}")]
    Identity(String),
}
