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

use weir_runtime::job::{JobGraph, ModuleRef, VertexKind};
use weir_runtime::rpc::{FetchModule, ModuleHeader, read_frame, write_frame};

use crate::node::Inner;
use crate::session::Upstream;

/// Largest module a TaskManager accepts from its JobManager.
const MAX_FETCH: u64 = 1 << 30;

/// Makes every operator module of `graph` a local file: fetches the ones not
/// cached yet (verifying their hash) and rewrites `sha256:` references to paths.
pub(crate) async fn fetch_modules(
    inner: &Arc<Inner>,
    upstream: &Upstream,
    graph: &mut JobGraph,
) -> Result<(), String> {
    for vertex in &mut graph.vertices {
        let VertexKind::Operator(op) = &mut vertex.kind else {
            continue;
        };
        let ModuleRef::Hash(hash) = &op.module else {
            return Err(format!(
                "operator `{}`: module {} is not a content hash (a JobManager bug)",
                vertex.id, op.module
            ));
        };
        let path = inner.store.blob_path(hash);
        if !path.exists() {
            let Upstream::Quic(conn) = upstream else {
                return Err(format!(
                    "operator `{}`: module {hash} is missing from the embedded module store",
                    vertex.id
                ));
            };
            let bytes = fetch(conn, hash).await.map_err(|e| {
                format!("operator `{}`: cannot fetch module {hash}: {e}", vertex.id)
            })?;
            let store_hash = hash.clone();
            let inner2 = inner.clone();
            tokio::task::spawn_blocking(move || inner2.store.put_blob(&store_hash, &bytes))
                .await
                .map_err(|e| e.to_string())?
                .map_err(|e| format!("operator `{}`: module {hash}: {e}", vertex.id))?;
        }
        op.module = ModuleRef::Path(path);
    }
    Ok(())
}

/// The module `hash`, fetched from the JobManager over `conn`.
async fn fetch(conn: &quinn::Connection, hash: &str) -> Result<Vec<u8>, String> {
    let (mut send, mut recv) = conn.open_bi().await.map_err(|e| e.to_string())?;
    write_frame(
        &mut send,
        &FetchModule {
            hash: hash.to_owned(),
        },
    )
    .await
    .map_err(|e| e.to_string())?;
    let _ = send.finish();
    let header: ModuleHeader = read_frame(&mut recv)
        .await
        .map_err(|e| e.to_string())?
        .ok_or("the JobManager closed the stream")?;
    let size = match (header.size, header.error) {
        (Some(size), _) if size <= MAX_FETCH => size,
        (Some(size), _) => return Err(format!("module of {size} bytes is over {MAX_FETCH}")),
        (None, error) => return Err(error.unwrap_or_else(|| "refused".to_owned())),
    };
    let mut bytes = Vec::with_capacity(size as usize);
    (&mut recv)
        .take(size)
        .read_to_end(&mut bytes)
        .await
        .map_err(|e| e.to_string())?;
    if bytes.len() as u64 != size {
        return Err(format!("got {} of {size} bytes", bytes.len()));
    }
    Ok(bytes)
}
