//! The compiled-component cache: components are compiled once per content
//! hash and engine configuration, and later loads deserialize the native code
//! from disk instead of compiling again.
//!
//! Deserializing compiled code is native code execution, so the cache is
//! treated as part of the trusted computing base:
//!
//! - the cache folder is created `0700` and refused (with an error naming the
//!   folder) when it is owned by another user or writable by group or others;
//! - an entry is refused, and recompiled, when its file is not owned by this
//!   user, is writable by others, or its bytes do not match the SHA-256 that
//!   was recorded in its header when it was written.
//!
//! An entry is `<dir>/<sha256 of the component>-<engine hash>.cwasm`:
//! [`MAGIC`], a SHA-256 over the entry's file name and the payload, then the
//! payload (what `Component::serialize` produced). Hashing the name binds
//! the compiled code to the component it was compiled from: another
//! component's entry copied over this one fails the check. It is written to a fresh private
//! temporary file (random name), synced, then renamed into place, so a
//! reader never sees a partial entry and two writers never share a file.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

use super::{FailureKind, OperatorError};

/// First bytes of every cache entry (format version 1).
pub const MAGIC: &[u8; 8] = b"WEIRCW01";

/// Header length: magic + SHA-256 of the payload.
const HEADER: usize = MAGIC.len() + 32;

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

/// Creates the cache folder if needed (`0700`) and checks that nobody but
/// this user can change what is in it.
pub fn prepare_dir(dir: &Path) -> Result<(), String> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| format!("cannot create the component cache {}: {e}", dir.display()))?;
    let meta = std::fs::metadata(dir)
        .map_err(|e| format!("cannot read the component cache {}: {e}", dir.display()))?;
    check_private(&meta).map_err(|why| {
        format!(
            "refusing the component cache {}: {why}; compiled code loaded from it runs \
             as native code, so it must be this user's own (`chmod 700` it, or choose \
             another with --cache-dir / WEIR_CACHE_DIR)",
            dir.display()
        )
    })
}

/// Owned by this user and not writable by group or others.
fn check_private(meta: &std::fs::Metadata) -> Result<(), String> {
    let me = rustix::process::geteuid().as_raw();
    if meta.uid() != me {
        return Err(format!(
            "it is owned by uid {}, not by this user (uid {me})",
            meta.uid()
        ));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(format!(
            "it is writable by group or others (mode {:o})",
            meta.mode() & 0o7777
        ));
    }
    Ok(())
}

fn entry_path(engine: &Engine, dir: &Path, hash: &str) -> PathBuf {
    let mut h = DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut h);
    dir.join(format!("{hash}-{:016x}.cwasm", h.finish()))
}

/// Compiles `bytes`, or loads the compiled form from `dir` (which
/// [`prepare_dir`] accepted).
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
    match load(engine, &path) {
        Ok(Some(component)) => return Ok((component, CacheOutcome::Hit, hash)),
        Ok(None) => {}
        Err(e) => tracing::warn!(path = %path.display(), "discarding cache entry: {e:#}"),
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

/// The entry at `path`: `None` when there is none, an error when it exists
/// but must not be used.
fn load(engine: &Engine, path: &Path) -> Result<Option<Component>, String> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.to_string()),
    };
    if !meta.file_type().is_file() {
        return Err("not a regular file".into());
    }
    check_private(&meta)?;
    let bytes = std::fs::read(path).map_err(|e| e.to_string())?;
    let payload = verified_payload(&entry_name(path), &bytes)?;
    deserialize(engine, payload)
        .map(Some)
        .map_err(|e| format!("{e:#}"))
}

fn entry_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// What the header records: SHA-256 over the entry's name and its payload.
fn entry_digest(name: &str, payload: &[u8]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update((name.len() as u64).to_le_bytes());
    h.update(name.as_bytes());
    h.update(payload);
    h.finalize().into()
}

/// The payload of an entry named `name` whose header and hash check out.
fn verified_payload<'a>(name: &str, bytes: &'a [u8]) -> Result<&'a [u8], String> {
    if bytes.len() < HEADER || &bytes[..MAGIC.len()] != MAGIC {
        return Err("not a Weir cache entry (bad header)".into());
    }
    let (recorded, payload) = bytes[MAGIC.len()..].split_at(32);
    if entry_digest(name, payload) != recorded {
        return Err(
            "its bytes do not match the hash recorded when it was written for this component"
                .into(),
        );
    }
    Ok(payload)
}

#[allow(unsafe_code)]
fn deserialize(engine: &Engine, payload: &[u8]) -> wasmtime::Result<Component> {
    // SAFETY: `payload` was produced by `Component::serialize` in this
    // cache: the folder and the file are this user's own and not writable
    // by anybody else (`prepare_dir`, `check_private`), and the bytes match
    // the SHA-256 recorded when the entry was written. wasmtime checks that
    // it was compiled by a compatible engine configuration; the entry name
    // also carries the engine's hash.
    unsafe { Component::deserialize(engine, payload) }
}

fn store(component: &Component, dir: &Path, path: &Path) -> std::io::Result<()> {
    let payload = component
        .serialize()
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    // A fresh file with a random name, mode 0600.
    let mut tmp = tempfile::Builder::new()
        .prefix(".entry-")
        .suffix(".tmp")
        .tempfile_in(dir)?;
    tmp.write_all(MAGIC)?;
    tmp.write_all(&entry_digest(&entry_name(path), &payload))?;
    tmp.write_all(&payload)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn content_hash_is_sha256_hex() {
        assert_eq!(
            content_hash(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn a_new_cache_folder_is_private() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("a/b/cache");
        prepare_dir(&dir).unwrap();
        let mode = std::fs::metadata(&dir).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o700);
    }

    #[test]
    fn a_folder_others_can_write_is_refused() {
        let root = tempfile::tempdir().unwrap();
        for mode in [0o777, 0o775, 0o757] {
            std::fs::set_permissions(root.path(), std::fs::Permissions::from_mode(mode)).unwrap();
            let err = prepare_dir(root.path()).unwrap_err();
            assert!(
                err.contains("writable by group or others"),
                "{mode:o}: {err}"
            );
            assert!(err.contains(&root.path().display().to_string()), "{err}");
        }
        std::fs::set_permissions(root.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        prepare_dir(root.path()).unwrap();
    }

    #[test]
    fn a_folder_of_another_user_is_refused() {
        let me = rustix::process::geteuid().as_raw();
        if me == 0 {
            // As root (CI): give a folder to `nobody`.
            let root = tempfile::tempdir().unwrap();
            let nobody = rustix::process::Uid::from_raw(65534);
            rustix::fs::chown(root.path(), Some(nobody), None).unwrap();
            let err = prepare_dir(root.path()).unwrap_err();
            assert!(err.contains("owned by uid 65534"), "{err}");
        } else {
            // As anybody else: `/` belongs to root.
            let err = check_private(&std::fs::metadata("/").unwrap()).unwrap_err();
            assert!(err.contains("owned by uid 0"), "{err}");
        }
    }

    #[test]
    fn a_changed_or_moved_payload_fails_the_hash_check() {
        let payload = b"compiled code".to_vec();
        let mut entry = MAGIC.to_vec();
        entry.extend_from_slice(&entry_digest("a.cwasm", &payload));
        entry.extend_from_slice(&payload);
        assert_eq!(verified_payload("a.cwasm", &entry).unwrap(), &payload[..]);
        // The same bytes under another component's name.
        let err = verified_payload("b.cwasm", &entry).unwrap_err();
        assert!(err.contains("do not match"), "{err}");
        let last = entry.len() - 1;
        entry[last] ^= 1;
        assert!(
            verified_payload("a.cwasm", &entry)
                .unwrap_err()
                .contains("do not match")
        );
        assert!(
            verified_payload("a.cwasm", b"WEIRCW01")
                .unwrap_err()
                .contains("bad header")
        );
        assert!(
            verified_payload("a.cwasm", &payload)
                .unwrap_err()
                .contains("bad header")
        );
    }
}
