//! Module fetch: makes every operator module of a deployment's graph a
//! local file ([`fetch_modules`]). A module already in this TaskManager's
//! [`ModuleStore`](weir_runtime::modules::ModuleStore) is used as is; any
//! other is fetched from the JobManager on a QUIC stream of its own
//! (`fetch`), at most [`MAX_FETCH`] bytes, and stored under its hash (the
//! store verifies it).
//!
//! An in-process TaskManager shares the JobManager's store: a module
//! missing from it is an error, never a fetch.
//!
//! This module must not load or compile modules: `LocalCluster` does.

use std::sync::Arc;

use tokio::io::AsyncReadExt;

use weir_runtime::job::{JobGraph, ModuleRef, VertexId};
use weir_runtime::modules::StoreError;
use weir_runtime::rpc::{FetchModule, FrameError, ModuleHeader, read_frame, write_frame};

use crate::node::Inner;
use crate::session::Upstream;

/// Largest module a TaskManager accepts from its JobManager.
const MAX_FETCH: u64 = 1 << 30;

/// Why an operator's module is not a local file: the subtasks of the
/// deployment fail with this message.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ModuleError {
    /// The graph names a module by path: the JobManager sends hashes only.
    #[error("operator `{operator}`: module {module} is not a content hash (a JobManager bug)")]
    NotAHash {
        /// The operator's vertex id.
        operator: VertexId,
        /// The module reference as the graph has it.
        module: ModuleRef,
    },
    /// An in-process TaskManager's (shared) store lacks the module.
    #[error("operator `{operator}`: module {hash} is missing from the embedded module store")]
    Missing {
        /// The operator's vertex id.
        operator: VertexId,
        /// The module's content hash.
        hash: String,
    },
    /// Fetching it from the JobManager failed.
    #[error("operator `{operator}`: cannot fetch module {hash}: {source}")]
    Fetch {
        /// The operator's vertex id.
        operator: VertexId,
        /// The module's content hash.
        hash: String,
        /// Why.
        source: FetchError,
    },
    /// Storing it failed (its bytes do not hash to `hash`, or I/O).
    #[error("operator `{operator}`: module {hash}: {source}")]
    Store {
        /// The operator's vertex id.
        operator: VertexId,
        /// The module's content hash.
        hash: String,
        /// Why.
        source: StoreError,
    },
    /// The blocking task storing it panicked.
    #[error("{0}")]
    Panicked(tokio::task::JoinError),
}

/// Why one module fetch from the JobManager failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum FetchError {
    /// The fetch stream could not be opened.
    #[error("{0}")]
    Open(quinn::ConnectionError),
    /// The request could not be sent, or the header read.
    #[error("{0}")]
    Frame(FrameError),
    /// The JobManager closed the stream before the header.
    #[error("the JobManager closed the stream")]
    Closed,
    /// The module is larger than [`MAX_FETCH`].
    #[error("module of {0} bytes is over {MAX_FETCH}")]
    TooLarge(u64),
    /// The JobManager refused (its reason, or `refused`).
    #[error("{0}")]
    Refused(String),
    /// Reading the module's bytes failed.
    #[error("{0}")]
    Read(std::io::Error),
    /// The stream ended before the size the header announced.
    #[error("got {got} of {size} bytes")]
    Short {
        /// Bytes received.
        got: usize,
        /// Bytes announced.
        size: u64,
    },
}

/// Makes every operator module of `graph` a local file: fetches the ones not
/// cached yet (verifying their hash) and rewrites `sha256:` references to paths.
pub(crate) async fn fetch_modules(
    inner: &Arc<Inner>,
    upstream: &Upstream,
    graph: &mut JobGraph,
) -> Result<(), ModuleError> {
    for vertex in &mut graph.vertices {
        let Some(op) = vertex.kind.module_spec_mut() else {
            continue;
        };
        let ModuleRef::Hash(hash) = &op.module else {
            return Err(ModuleError::NotAHash {
                operator: vertex.id.clone(),
                module: op.module.clone(),
            });
        };
        let path = inner.store.blob_path(hash);
        if !path.exists() {
            let Upstream::Quic(conn) = upstream else {
                return Err(ModuleError::Missing {
                    operator: vertex.id.clone(),
                    hash: hash.clone(),
                });
            };
            let bytes = fetch(conn, hash)
                .await
                .map_err(|source| ModuleError::Fetch {
                    operator: vertex.id.clone(),
                    hash: hash.clone(),
                    source,
                })?;
            let store_hash = hash.clone();
            let inner2 = inner.clone();
            tokio::task::spawn_blocking(move || inner2.store.put_blob(&store_hash, &bytes))
                .await
                .map_err(ModuleError::Panicked)?
                .map_err(|source| ModuleError::Store {
                    operator: vertex.id.clone(),
                    hash: hash.clone(),
                    source,
                })?;
        }
        op.module = ModuleRef::Path(path);
    }
    Ok(())
}

/// The module `hash`, fetched from the JobManager over `conn`.
async fn fetch(conn: &quinn::Connection, hash: &str) -> Result<Vec<u8>, FetchError> {
    let (mut send, mut recv) = conn.open_bi().await.map_err(FetchError::Open)?;
    write_frame(
        &mut send,
        &FetchModule {
            hash: hash.to_owned(),
        },
    )
    .await
    .map_err(FetchError::Frame)?;
    let _ = send.finish();
    let header: ModuleHeader = read_frame(&mut recv)
        .await
        .map_err(FetchError::Frame)?
        .ok_or(FetchError::Closed)?;
    let size = match (header.size, header.error) {
        (Some(size), _) if size <= MAX_FETCH => size,
        (Some(size), _) => return Err(FetchError::TooLarge(size)),
        (None, error) => {
            return Err(FetchError::Refused(
                error.unwrap_or_else(|| "refused".to_owned()),
            ));
        }
    };
    let mut bytes = Vec::with_capacity(size as usize);
    (&mut recv)
        .take(size)
        .read_to_end(&mut bytes)
        .await
        .map_err(FetchError::Read)?;
    if bytes.len() as u64 != size {
        return Err(FetchError::Short {
            got: bytes.len(),
            size,
        });
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A deployment's subtasks fail with these messages: the operator, the
    /// module and why, as before they were typed.
    #[test]
    fn module_errors_name_the_operator_and_the_module() {
        let operator = VertexId("count".into());
        let missing = ModuleError::Missing {
            operator: operator.clone(),
            hash: "sha256:ab".into(),
        };
        assert_eq!(
            missing.to_string(),
            "operator `count`: module sha256:ab is missing from the embedded module store"
        );
        let too_large = ModuleError::Fetch {
            operator,
            hash: "sha256:ab".into(),
            source: FetchError::TooLarge(MAX_FETCH + 1),
        };
        assert_eq!(
            too_large.to_string(),
            format!(
                "operator `count`: cannot fetch module sha256:ab: module of {} bytes is over {MAX_FETCH}",
                MAX_FETCH + 1
            )
        );
    }
}
