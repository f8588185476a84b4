//! The module store: uploaded operator components, content-addressed on disk.
//!
//! The JobManager keeps every uploaded component here under a `name@version`
//! (what job specs name); a TaskManager uses the same type as its cache of
//! blobs fetched by hash ([`ModuleStore::put_blob`], no names).
//!
//! # Layout on disk
//!
//! ```text
//! <dir>/index.json              {"format":1,"modules":[ModuleInfo, …]} in upload order
//! <dir>/blobs/<64 hex>.wasm     the bytes; the file name is their SHA-256
//! ```
//!
//! # Invariants
//!
//! - A blob's name is the SHA-256 of its content; [`ModuleStore::read`]
//!   verifies that on every read, so a damaged disk is an error
//!   ([`StoreError::Corrupt`]), never a wrong operator.
//! - Every index entry's blob was written (and synced) before the entry, and
//!   `index.json` is replaced atomically (temp file + rename): a crash leaves
//!   at worst an orphan blob, never an entry without bytes.
//! - A blob is deleted only when no entry refers to it any more.
//! - `name@version` is immutable: the same bytes again are accepted
//!   (idempotent), other bytes are a [`StoreError::Conflict`].
//! - Names, versions and hashes are checked before they touch a path, so no
//!   reference can escape `<dir>`.
//!
//! One mutex guards the index and the blob directory; a `put` holds it while
//! it writes the blob (hashing happens before, outside the lock).
//!
//! The store does not look inside the bytes: checking that they are a Wasm
//! component implementing the operator contract is the caller's job (the REST
//! server does it before [`ModuleStore::put`]).

use std::cmp::Ordering;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The prefix of a content reference: `sha256:<64 lowercase hex>`.
pub const HASH_PREFIX: &str = "sha256:";

/// Longest module name or version, in bytes: long enough for any sensible
/// name, short enough to print in a table and to use in a file name.
pub const MAX_NAME_LEN: usize = 64;

/// Version of the `index.json` format.
const INDEX_FORMAT: u32 = 1;

/// One stored module: a `name@version` and the content it names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModuleInfo {
    /// The module's name (see [`check_name`]).
    pub name: String,
    /// Its version: an integer given by the store, or any name-like string.
    pub version: String,
    /// `sha256:<64 hex>` of the bytes.
    pub hash: String,
    /// Size of the bytes.
    pub size: u64,
    /// When this `name@version` was first stored (Unix ms).
    pub uploaded_at_ms: u64,
}

impl ModuleInfo {
    /// `name@version`.
    pub fn reference(&self) -> String {
        format!("{}@{}", self.name, self.version)
    }
}

/// What can go wrong in the module store. Each message names the module,
/// reference or file concerned.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// No entry matches the reference.
    #[error("module `{0}` not found")]
    NotFound(String),
    /// `name@version` already holds other bytes.
    #[error(
        "module {name}@{version} already exists with other content ({existing}, not {new}); \
         upload it under another version"
    )]
    Conflict {
        /// The module name.
        name: String,
        /// The version that is taken.
        version: String,
        /// Hash of the bytes stored under it.
        existing: String,
        /// Hash of the bytes offered.
        new: String,
    },
    /// A module name, version or reference that does not follow the rules;
    /// the message names it and the rule it breaks.
    #[error("{0}")]
    BadName(String),
    /// Bytes offered under a hash do not have that hash.
    #[error("content does not match its hash: expected {expected}, got {actual}")]
    HashMismatch {
        /// The hash the bytes were offered under.
        expected: String,
        /// The hash they have.
        actual: String,
    },
    /// A filesystem operation failed.
    #[error("module store: {}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A stored file does not hold what it should.
    #[error("module store: {} is corrupt: {why}", path.display())]
    Corrupt {
        /// The damaged file.
        path: PathBuf,
        /// What is wrong with it.
        why: String,
    },
}

impl StoreError {
    /// The HTTP status this error deserves at the REST API: 404 unknown,
    /// 409 conflict, 400 bad input, 500 the store itself failed.
    pub fn http_status(&self) -> u16 {
        match self {
            StoreError::NotFound(_) => 404,
            StoreError::Conflict { .. } => 409,
            StoreError::BadName(_) | StoreError::HashMismatch { .. } => 400,
            StoreError::Io { .. } | StoreError::Corrupt { .. } => 500,
        }
    }
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
    move |source| StoreError::Io {
        path: path.to_owned(),
        source,
    }
}

/// `sha256:<hex>` of `bytes`.
pub fn sha256_ref(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    let mut s = String::with_capacity(HASH_PREFIX.len() + 64);
    s.push_str(HASH_PREFIX);
    for b in digest {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

/// Checks a module name (`what` = "name") or version (`what` = "version"):
/// 1 to [`MAX_NAME_LEN`] characters of `[A-Za-z0-9._-]`, not starting with
/// `.`.
pub fn check_name(what: &'static str, value: &str) -> Result<(), StoreError> {
    let bad = |why| {
        Err(StoreError::BadName(format!(
            "bad module {what} `{value}`: {why}"
        )))
    };
    if value.is_empty() {
        return bad("it is empty");
    }
    if value.len() > MAX_NAME_LEN {
        return bad("it is longer than 64 characters");
    }
    if value.starts_with('.') {
        return bad("it starts with `.`");
    }
    if !value
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    {
        return bad("only letters, digits, `.`, `_` and `-` are allowed");
    }
    Ok(())
}

/// The 64 hex digits of a `sha256:<hex>` reference (a bare 64-hex string is
/// accepted too), or an error if it is not exactly that.
fn hash_hex(reference: &str) -> Result<&str, StoreError> {
    let hex = reference.strip_prefix(HASH_PREFIX).unwrap_or(reference);
    if hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        Ok(hex)
    } else {
        Err(bad_ref(
            reference,
            "a hash is `sha256:` and 64 lowercase hex digits",
        ))
    }
}

/// Orders versions: all-digit versions numerically (`2` < `10`), and in
/// general "naturally": versions are compared as runs of digits and runs of
/// other characters, digit runs by value and the rest byte-wise, so
/// `1.9` < `1.10` and `v9` < `v10`. A digit run sorts after a non-digit
/// run at the same position, so the store's integer versions rank above
/// named ones (`beta` < `1`); equal-valued versions (`01`, `1`) fall back
/// to byte order. This is the order of [`ModuleStore::list`] and the meaning of
/// "highest version" in [`ModuleStore::resolve`].
pub fn compare_versions(a: &str, b: &str) -> Ordering {
    let (mut x, mut y) = (a.as_bytes(), b.as_bytes());
    loop {
        match (x.is_empty(), y.is_empty()) {
            (true, true) => return a.cmp(b),
            (true, false) => return Ordering::Less,
            (false, true) => return Ordering::Greater,
            _ => {}
        }
        let (dx, dy) = (x[0].is_ascii_digit(), y[0].is_ascii_digit());
        let run =
            |s: &[u8], digit: bool| s.iter().take_while(|c| c.is_ascii_digit() == digit).count();
        let (nx, ny) = (run(x, dx), run(y, dy));
        let (rx, ry) = (&x[..nx], &y[..ny]);
        let ord = match (dx, dy) {
            (true, true) => {
                let strip = |r: &[u8]| -> usize { r.iter().take_while(|&&c| c == b'0').count() };
                let (vx, vy) = (&rx[strip(rx)..], &ry[strip(ry)..]);
                vx.len().cmp(&vy.len()).then_with(|| vx.cmp(vy))
            }
            (true, false) => Ordering::Greater,
            (false, true) => Ordering::Less,
            (false, false) => rx.cmp(ry),
        };
        if ord != Ordering::Equal {
            return ord;
        }
        x = &x[nx..];
        y = &y[ny..];
    }
}

fn by_name_then_version(a: &ModuleInfo, b: &ModuleInfo) -> Ordering {
    a.name
        .cmp(&b.name)
        .then_with(|| compare_versions(&a.version, &b.version))
}

/// What a reference names, after checking its syntax.
enum Ref<'a> {
    Exact { name: &'a str, version: &'a str },
    Latest { name: &'a str },
    Hash { hex: &'a str },
}

fn bad_ref(reference: &str, why: &str) -> StoreError {
    StoreError::BadName(format!(
        "bad module reference `{reference}`: {why} (expected `name`, `name@version` or `sha256:<hex>`)"
    ))
}

fn parse_ref(reference: &str) -> Result<Ref<'_>, StoreError> {
    if reference.starts_with(HASH_PREFIX) {
        return Ok(Ref::Hash {
            hex: hash_hex(reference)?,
        });
    }
    let as_ref_error = |e: StoreError| match e {
        StoreError::BadName(why) => bad_ref(reference, &why),
        other => other,
    };
    match reference.split_once('@') {
        Some((name, version)) => {
            check_name("name", name).map_err(as_ref_error)?;
            check_name("version", version).map_err(as_ref_error)?;
            Ok(Ref::Exact { name, version })
        }
        None => {
            check_name("name", reference).map_err(as_ref_error)?;
            Ok(Ref::Latest { name: reference })
        }
    }
}

/// `index.json`.
#[derive(Debug, Serialize, Deserialize)]
struct IndexFile {
    format: u32,
    modules: Vec<ModuleInfo>,
}

/// Uploaded modules on disk; see the module docs. `Send + Sync`: share it
/// behind an `Arc`.
#[derive(Debug)]
pub struct ModuleStore {
    dir: PathBuf,
    /// Entries in upload order (the order `sha256:` references pick from).
    entries: Mutex<Vec<ModuleInfo>>,
}

impl ModuleStore {
    /// Opens the store at `dir`, creating it if needed, and loads its index.
    /// Leftover temporary files of an interrupted write are removed.
    pub fn open(dir: &Path) -> Result<ModuleStore, StoreError> {
        let blobs = dir.join("blobs");
        fs::create_dir_all(&blobs).map_err(io_err(&blobs))?;
        for d in [dir, blobs.as_path()] {
            let listing = fs::read_dir(d).map_err(io_err(d))?;
            for entry in listing.flatten() {
                let name = entry.file_name();
                let name = name.to_string_lossy();
                if name.starts_with('.') && name.ends_with(".tmp") {
                    let _ = fs::remove_file(entry.path());
                }
            }
        }
        let index = dir.join("index.json");
        let entries = match fs::read(&index) {
            Ok(bytes) => {
                let file: IndexFile =
                    serde_json::from_slice(&bytes).map_err(|e| StoreError::Corrupt {
                        path: index.clone(),
                        why: e.to_string(),
                    })?;
                if file.format != INDEX_FORMAT {
                    return Err(StoreError::Corrupt {
                        path: index,
                        why: format!(
                            "index format {} (this build reads format {INDEX_FORMAT})",
                            file.format
                        ),
                    });
                }
                file.modules
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(io_err(&index)(e)),
        };
        let store = ModuleStore {
            dir: dir.to_owned(),
            entries: Mutex::new(entries),
        };
        for m in store.lock().iter() {
            if !store.blob_path(&m.hash).is_file() {
                tracing::warn!(
                    module = %m.reference(),
                    hash = %m.hash,
                    "module store: the blob of this entry is missing"
                );
            }
        }
        Ok(store)
    }

    /// The store's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<ModuleInfo>> {
        // A panic while holding the lock cannot leave the Vec half-changed
        // (every change is one push/retain after the disk writes), so a
        // poisoned lock is still consistent.
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Stores `bytes` as `name@version`.
    ///
    /// `version` None means: the version under which these bytes are already
    /// stored for `name` (its highest, if several), else the next integer
    /// version of `name` (one more than its highest all-digit version; `1`
    /// for a new name).
    ///
    /// Returns the entry and whether it was created: `false` when
    /// `name@version` already held these bytes (nothing changes, the first
    /// upload time is kept). [`StoreError::Conflict`] when it holds other
    /// bytes. The bytes are not checked to be Wasm.
    pub fn put(
        &self,
        bytes: &[u8],
        name: &str,
        version: Option<&str>,
    ) -> Result<(ModuleInfo, bool), StoreError> {
        check_name("name", name)?;
        if let Some(v) = version {
            check_name("version", v)?;
        }
        let hash = sha256_ref(bytes);
        let mut entries = self.lock();
        let version = match version {
            Some(v) => {
                if let Some(old) = entries.iter().find(|m| m.name == name && m.version == v) {
                    if old.hash == hash {
                        return Ok((old.clone(), false));
                    }
                    return Err(StoreError::Conflict {
                        name: name.to_owned(),
                        version: v.to_owned(),
                        existing: old.hash.clone(),
                        new: hash,
                    });
                }
                v.to_owned()
            }
            None => {
                let same = entries
                    .iter()
                    .filter(|m| m.name == name && m.hash == hash)
                    .max_by(|a, b| compare_versions(&a.version, &b.version));
                if let Some(old) = same {
                    return Ok((old.clone(), false));
                }
                let highest = entries
                    .iter()
                    .filter(|m| m.name == name)
                    .filter_map(|m| m.version.parse::<u64>().ok())
                    .max()
                    .unwrap_or(0);
                highest.saturating_add(1).to_string()
            }
        };
        let info = ModuleInfo {
            name: name.to_owned(),
            version,
            hash,
            size: bytes.len() as u64,
            uploaded_at_ms: now_ms(),
        };
        let blob = self.blob_path(&info.hash);
        let had_blob = blob.is_file();
        if !had_blob {
            write_atomically(&blob, bytes)?;
        }
        entries.push(info.clone());
        if let Err(e) = self.save_index(&entries) {
            entries.pop();
            if !had_blob && !entries.iter().any(|m| m.hash == info.hash) {
                let _ = fs::remove_file(&blob);
            }
            return Err(e);
        }
        Ok((info, true))
    }

    /// Finds the entry a reference names:
    ///
    /// - `name@version`: that entry;
    /// - `name`: the highest version of `name` (see [`compare_versions`]);
    /// - `sha256:<hex>`: the first-uploaded entry with that content.
    pub fn resolve(&self, reference: &str) -> Result<ModuleInfo, StoreError> {
        let r = parse_ref(reference)?;
        let entries = self.lock();
        let found = match r {
            Ref::Exact { name, version } => entries
                .iter()
                .find(|m| m.name == name && m.version == version),
            Ref::Latest { name } => entries
                .iter()
                .filter(|m| m.name == name)
                .max_by(|a, b| compare_versions(&a.version, &b.version)),
            Ref::Hash { hex } => entries.iter().find(|m| m.hash[HASH_PREFIX.len()..] == *hex),
        };
        found
            .cloned()
            .ok_or_else(|| StoreError::NotFound(reference.to_owned()))
    }

    /// Every entry, sorted by name, then version ([`compare_versions`]).
    pub fn list(&self) -> Vec<ModuleInfo> {
        let mut all = self.lock().clone();
        all.sort_by(by_name_then_version);
        all
    }

    /// Where the blob with this hash (`sha256:<hex>` or bare hex) is, or
    /// would be, stored. A malformed hash gives a path inside the blob
    /// directory at which nothing is ever stored.
    pub fn blob_path(&self, hash: &str) -> PathBuf {
        let blobs = self.dir.join("blobs");
        match hash_hex(hash) {
            Ok(hex) => blobs.join(format!("{hex}.wasm")),
            Err(_) => blobs.join("not-a-hash"),
        }
    }

    /// Reads the blob with this hash and checks that its content has it
    /// ([`StoreError::Corrupt`] if not; [`StoreError::NotFound`] if there is
    /// no such blob).
    pub fn read(&self, hash: &str) -> Result<Vec<u8>, StoreError> {
        let hex = hash_hex(hash)?;
        let path = self.blob_path(hex);
        let bytes = match fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(StoreError::NotFound(format!("{HASH_PREFIX}{hex}")));
            }
            Err(e) => return Err(io_err(&path)(e)),
        };
        let actual = sha256_ref(&bytes);
        if actual[HASH_PREFIX.len()..] != *hex {
            return Err(StoreError::Corrupt {
                path,
                why: format!("its content hashes to {actual}"),
            });
        }
        Ok(bytes)
    }

    /// Removes what `reference` names (as in [`resolve`](Self::resolve),
    /// except that `sha256:<hex>` removes every entry with that content) and
    /// returns the removed entries. A blob is deleted with the last entry
    /// that refers to it.
    pub fn delete(&self, reference: &str) -> Result<Vec<ModuleInfo>, StoreError> {
        let r = parse_ref(reference)?;
        let mut entries = self.lock();
        let doomed: Vec<ModuleInfo> = match r {
            Ref::Hash { hex } => entries
                .iter()
                .filter(|m| m.hash[HASH_PREFIX.len()..] == *hex)
                .cloned()
                .collect(),
            Ref::Exact { name, version } => entries
                .iter()
                .filter(|m| m.name == name && m.version == version)
                .cloned()
                .collect(),
            Ref::Latest { name } => entries
                .iter()
                .filter(|m| m.name == name)
                .max_by(|a, b| compare_versions(&a.version, &b.version))
                .cloned()
                .into_iter()
                .collect(),
        };
        if doomed.is_empty() {
            return Err(StoreError::NotFound(reference.to_owned()));
        }
        let remaining: Vec<ModuleInfo> = entries
            .iter()
            .filter(|m| !doomed.contains(m))
            .cloned()
            .collect();
        self.save_index(&remaining)?;
        *entries = remaining;
        for m in &doomed {
            if !entries.iter().any(|e| e.hash == m.hash) {
                let path = self.blob_path(&m.hash);
                match fs::remove_file(&path) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    // The entries are gone; an orphan blob is only wasted
                    // space, so report it but do not fail the delete.
                    Err(e) => tracing::warn!(path = %path.display(), "cannot remove blob: {e}"),
                }
            }
        }
        Ok(doomed)
    }

    /// Stores `bytes` by hash alone (a TaskManager's cache of modules it
    /// fetched), after checking that they hash to `hash`
    /// ([`StoreError::HashMismatch`] if not). Idempotent: a blob already
    /// present with the right content is left alone; a damaged one is
    /// replaced. Returns the blob's path.
    pub fn put_blob(&self, hash: &str, bytes: &[u8]) -> Result<PathBuf, StoreError> {
        let hex = hash_hex(hash)?;
        let actual = sha256_ref(bytes);
        if actual[HASH_PREFIX.len()..] != *hex {
            return Err(StoreError::HashMismatch {
                expected: format!("{HASH_PREFIX}{hex}"),
                actual,
            });
        }
        let _guard = self.lock();
        let path = self.blob_path(hex);
        let intact = fs::read(&path)
            .map(|old| sha256_ref(&old) == actual)
            .unwrap_or(false);
        if !intact {
            write_atomically(&path, bytes)?;
        }
        Ok(path)
    }

    fn save_index(&self, entries: &[ModuleInfo]) -> Result<(), StoreError> {
        let file = IndexFile {
            format: INDEX_FORMAT,
            modules: entries.to_vec(),
        };
        let json = serde_json::to_vec_pretty(&file).expect("ModuleInfo serializes");
        write_atomically(&self.dir.join("index.json"), &json)
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Writes `bytes` to `path` so that readers see the old file or the whole new
/// one: a synced temporary file in the same directory (named `.<name>.<pid>.tmp`,
/// removed by [`ModuleStore::open`] if left over), renamed over `path`.
fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), StoreError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{file_name}.{}.tmp", std::process::id()));
    let result = (|| {
        let mut f = fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        drop(f);
        fs::rename(&tmp, path)?;
        // Make the rename itself durable; not every platform can open a
        // directory, so this is best effort.
        if let Ok(d) = fs::File::open(dir) {
            let _ = d.sync_all();
        }
        Ok(())
    })();
    result.map_err(|source| {
        let _ = fs::remove_file(&tmp);
        StoreError::Io {
            path: path.to_owned(),
            source,
        }
    })
}

#[cfg(test)]
mod tests;
