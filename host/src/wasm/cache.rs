//! The compiled-component cache: components are compiled once per content
//! hash and engine configuration, and later loads deserialize the native code
//! from disk instead of compiling again.
//!
//! A cache entry is `<dir>/<sha256 of the component>-<engine hash>.cwasm`,
//! written to a temporary file and renamed into place, so a reader never sees
//! a partial entry. An entry that fails to deserialize is treated as a miss
//! and overwritten.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

use super::{FailureKind, OperatorError};

/// How a load was served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheOutcome {
    /// Deserialized from the cache: no compilation.
    Hit,
    /// Compiled, then stored in the cache.
    Miss,
    /// Compiled; the cache is disabled.
    Disabled,
}

/// Hex SHA-256 of `bytes`.
pub fn content_hash(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    let mut s = String::with_capacity(64);
    for b in digest {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

fn entry_path(engine: &Engine, dir: &Path, hash: &str) -> PathBuf {
    let mut h = DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut h);
    dir.join(format!("{hash}-{:016x}.cwasm", h.finish()))
}

/// Compiles `bytes`, or loads the compiled form from `dir`.
pub(super) fn compile_cached(
    engine: &Engine,
    dir: Option<&Path>,
    name: &str,
    bytes: &[u8],
) -> Result<(Component, CacheOutcome, String), OperatorError> {
    let hash = content_hash(bytes);
    let Some(dir) = dir else {
        return Ok((compile(engine, name, bytes)?, CacheOutcome::Disabled, hash));
    };
    let path = entry_path(engine, dir, &hash);
    if path.exists() {
        match deserialize(engine, &path) {
            Ok(component) => return Ok((component, CacheOutcome::Hit, hash)),
            Err(e) => {
                tracing::warn!(path = %path.display(), "discarding unusable cache entry: {e:#}")
            }
        }
    }
    let component = compile(engine, name, bytes)?;
    if let Err(e) = store(&component, dir, &path) {
        // A cache that cannot be written costs time, not correctness.
        tracing::warn!(dir = %dir.display(), "cannot write the component cache: {e}");
    }
    Ok((component, CacheOutcome::Miss, hash))
}

fn compile(engine: &Engine, name: &str, bytes: &[u8]) -> Result<Component, OperatorError> {
    Component::new(engine, bytes).map_err(|e| {
        OperatorError::new(
            name,
            FailureKind::NotAComponent,
            format!("not a valid component: {e:#}"),
        )
    })
}

#[allow(unsafe_code)]
fn deserialize(engine: &Engine, path: &Path) -> wasmtime::Result<Component> {
    // SAFETY: the file is in Weir's own cache directory, was produced by
    // `Component::serialize` and written atomically (temp file + rename).
    // wasmtime checks that it was compiled by a compatible engine
    // configuration; the entry name also carries the engine's hash. The
    // cache directory must not be writable by untrusted users (it lives in
    // the user's own cache directory by default).
    unsafe { Component::deserialize_file(engine, path) }
}

fn store(component: &Component, dir: &Path, path: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let bytes = component
        .serialize()
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    let tmp = dir.join(format!(
        ".{}.{}.tmp",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("entry"),
        std::process::id()
    ));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_hash_is_sha256_hex() {
        assert_eq!(
            content_hash(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
