//! Checkpoint storage: where checkpoint files live.
//!
//! Owns [`StoragePath`] (a validated relative path), the
//! [`CheckpointStorage`] trait (so an object store can be added later) and
//! [`DirStorage`], its implementation on a directory: local disk, or a
//! shared filesystem mounted on every daemon.
//!
//! # Invariants
//! * A [`StoragePath`] is relative, `/`-separated, and has no empty, `.` or
//!   `..` component, no backslash and no NUL: joined to a storage root it
//!   names a file *under* that root, never outside it. (A symbolic link
//!   placed inside the root by someone else could still point elsewhere;
//!   [`DirStorage`] never creates one, and [`CheckpointStorage::list`] does
//!   not follow them.)
//! * Writes are atomic: [`DirStorage`] writes a temporary file next to the
//!   target (named with the reserved prefix [`TEMP_PREFIX`], which no
//!   [`StoragePath`] may use and [`CheckpointStorage::list`] skips), syncs
//!   it and renames it over the target. A reader sees the old file, the new
//!   one or none; never part of one.
//!
//! Knows nothing of state backends, checkpoints or the coordinator.

use std::fmt;
use std::fs::{self, File};
use std::hash::{BuildHasher, Hasher, RandomState};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use super::CheckpointError;

/// Reserved prefix of the temporary files of atomic writes; no
/// [`StoragePath`] component may start with it.
pub const TEMP_PREFIX: &str = ".weir-tmp-";

/// A file's (or a directory's) path in checkpoint storage: relative,
/// `/`-separated, and unable to escape the storage root (see the module
/// docs for what [`StoragePath::new`] rejects).
#[derive(
    Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(try_from = "String", into = "String")]
pub struct StoragePath(String);

impl StoragePath {
    /// Validates `path`; see the module docs for the rules.
    pub fn new(path: impl Into<String>) -> Result<Self, CheckpointError> {
        let path = path.into();
        let reason = if path.is_empty() {
            Some("it is empty")
        } else if path.starts_with('/') {
            Some("it is absolute")
        } else if path.contains('\\') {
            Some("it contains a backslash")
        } else if path.contains('\0') {
            Some("it contains NUL")
        } else {
            path.split('/').find_map(|c| match c {
                "" => Some("it has an empty component"),
                "." | ".." => Some("it has a `.` or `..` component"),
                c if c.starts_with(TEMP_PREFIX) => {
                    Some("a component uses the reserved temp prefix")
                }
                _ => None,
            })
        };
        match reason {
            Some(reason) => Err(CheckpointError::InvalidPath { path, reason }),
            None => Ok(Self(path)),
        }
    }

    /// `self/rel`, where `rel` is itself a valid relative path.
    pub fn join(&self, rel: &str) -> Result<Self, CheckpointError> {
        Self::new(format!("{}/{rel}", self.0))
    }

    /// The path as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The last component.
    pub fn file_name(&self) -> &str {
        self.0.rsplit('/').next().unwrap_or(&self.0)
    }

    /// Whether `self` is `prefix` or lies under it (component-wise: `a/bc`
    /// is not under `a/b`).
    pub fn starts_with(&self, prefix: &StoragePath) -> bool {
        self.0 == prefix.0
            || (self.0.starts_with(&prefix.0) && self.0.as_bytes()[prefix.0.len()] == b'/')
    }
}

impl fmt::Display for StoragePath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<String> for StoragePath {
    type Error = CheckpointError;

    fn try_from(s: String) -> Result<Self, Self::Error> {
        Self::new(s)
    }
}

impl From<StoragePath> for String {
    fn from(p: StoragePath) -> String {
        p.0
    }
}

/// Where checkpoints live. Paths are relative to the storage's root.
/// Implementations must make `put_*` atomic: a reader never sees a partly
/// written file under its final path.
pub trait CheckpointStorage: Send + Sync + fmt::Debug {
    /// Stores the local file `local` at `path` (replacing any file there);
    /// returns the bytes written.
    fn put_file(&self, path: &StoragePath, local: &Path) -> Result<u64, CheckpointError>;
    /// Stores everything `src` yields at `path` (replacing any file
    /// there), streaming it; returns the bytes written. What `src` yields
    /// is read once, so a reader that looks at the bytes on their way (a
    /// hash) sees exactly what was stored.
    fn put_reader(&self, path: &StoragePath, src: &mut dyn Read) -> Result<u64, CheckpointError>;
    /// Stores `bytes` at `path` (replacing any file there).
    fn put_bytes(&self, path: &StoragePath, bytes: &[u8]) -> Result<(), CheckpointError>;
    /// Copies the file at `path` to the local file `local` (created or
    /// truncated).
    fn get_to_file(&self, path: &StoragePath, local: &Path) -> Result<(), CheckpointError>;
    /// The contents of the file at `path`.
    fn get_bytes(&self, path: &StoragePath) -> Result<Vec<u8>, CheckpointError>;
    /// [`CheckpointStorage::get_bytes`] of a file that must not be over
    /// `max` bytes (what a restore parses whole, such as `_metadata`): a
    /// larger one is [`CheckpointError::Corrupt`], and no more than
    /// `max + 1` bytes of it are read into memory by [`DirStorage`].
    fn get_bytes_at_most(&self, path: &StoragePath, max: u64) -> Result<Vec<u8>, CheckpointError> {
        let bytes = self.get_bytes(path)?;
        check_at_most(path, bytes.len() as u64, max)?;
        Ok(bytes)
    }
    /// Deletes the file at `path`; a missing file is not an error.
    fn delete(&self, path: &StoragePath) -> Result<(), CheckpointError>;
    /// Deletes everything at or under `prefix` (a whole checkpoint
    /// directory); nothing there is not an error.
    fn delete_prefix(&self, prefix: &StoragePath) -> Result<(), CheckpointError>;
    /// Every file at or under `prefix`, recursively, sorted; directories
    /// and unfinished writes are not listed; nothing there is an empty list.
    fn list(&self, prefix: &StoragePath) -> Result<Vec<StoragePath>, CheckpointError>;
}

/// [`CheckpointStorage`] in a directory: local disk, or a shared
/// filesystem mounted at the same place on every daemon.
#[derive(Debug)]
pub struct DirStorage {
    root: PathBuf,
    /// Seeds the random part of temporary file names.
    random: RandomState,
}

impl DirStorage {
    /// Storage rooted at `root` (created on the first write).
    pub fn new(root: PathBuf) -> Self {
        Self {
            root,
            random: RandomState::new(),
        }
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The local path of `path`. Safe by [`StoragePath`]'s invariant.
    fn resolve(&self, path: &StoragePath) -> PathBuf {
        self.root.join(path.as_str())
    }

    /// Writes `path` atomically: `write` fills a temporary file in the
    /// target's directory, which is then synced and renamed over the
    /// target. On error the temporary file is removed and the target is
    /// untouched.
    fn write_atomic(
        &self,
        path: &StoragePath,
        write: impl FnOnce(&mut File) -> io::Result<u64>,
    ) -> Result<u64, CheckpointError> {
        let target = self.resolve(path);
        let dir = target.parent().expect("a resolved path has a parent");
        fs::create_dir_all(dir).map_err(|e| io_err("create directory", dir, e))?;
        let mut h = self.random.build_hasher();
        h.write(path.as_str().as_bytes());
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos()),
        );
        let temp = dir.join(format!(
            "{TEMP_PREFIX}{:016x}-{}",
            h.finish(),
            path.file_name()
        ));
        let result = File::create(&temp)
            .and_then(|mut file| {
                let n = write(&mut file)?;
                file.sync_all()?;
                Ok(n)
            })
            .and_then(|n| fs::rename(&temp, &target).map(|()| n));
        match result {
            Ok(n) => {
                // Make the rename durable; some filesystems cannot sync a
                // directory, which does not make the write less atomic.
                if let Ok(d) = File::open(dir) {
                    let _ = d.sync_all();
                }
                Ok(n)
            }
            Err(e) => {
                let _ = fs::remove_file(&temp);
                Err(io_err("write", &target, e))
            }
        }
    }

    /// Appends every file under the local directory `dir` (which is
    /// `prefix` in storage) to `out`.
    fn walk(
        &self,
        dir: &Path,
        prefix: &str,
        out: &mut Vec<StoragePath>,
    ) -> Result<(), CheckpointError> {
        let entries = match fs::read_dir(dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(io_err("list", dir, e)),
        };
        for entry in entries {
            let entry = entry.map_err(|e| io_err("list", dir, e))?;
            let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
                continue; // not ours: every StoragePath is UTF-8
            };
            if name.starts_with(TEMP_PREFIX) {
                continue;
            }
            let ty = entry
                .file_type()
                .map_err(|e| io_err("list", &entry.path(), e))?;
            let child = format!("{prefix}/{name}");
            if ty.is_dir() {
                self.walk(&entry.path(), &child, out)?;
            } else if ty.is_file()
                && let Ok(p) = StoragePath::new(child)
            {
                out.push(p);
            }
        }
        Ok(())
    }
}

fn io_err(op: &'static str, path: &Path, source: io::Error) -> CheckpointError {
    CheckpointError::Io {
        op,
        path: path.display().to_string(),
        source,
    }
}

/// Maps "not found" to [`CheckpointError::NotFound`].
/// Whether `len` bytes of `path` are within `max`.
fn check_at_most(path: &StoragePath, len: u64, max: u64) -> Result<(), CheckpointError> {
    if len > max {
        return Err(CheckpointError::Corrupt(format!(
            "`{path}` is over {max} bytes, the most a restore reads of it"
        )));
    }
    Ok(())
}

fn read_err(op: &'static str, path: &StoragePath, local: &Path, e: io::Error) -> CheckpointError {
    if e.kind() == io::ErrorKind::NotFound {
        CheckpointError::NotFound(path.clone())
    } else {
        io_err(op, local, e)
    }
}

impl CheckpointStorage for DirStorage {
    fn put_file(&self, path: &StoragePath, local: &Path) -> Result<u64, CheckpointError> {
        let mut src = File::open(local).map_err(|e| io_err("open", local, e))?;
        self.write_atomic(path, |dst| io::copy(&mut src, dst))
    }

    fn put_reader(&self, path: &StoragePath, src: &mut dyn Read) -> Result<u64, CheckpointError> {
        self.write_atomic(path, |dst| io::copy(src, dst))
    }

    fn put_bytes(&self, path: &StoragePath, bytes: &[u8]) -> Result<(), CheckpointError> {
        self.write_atomic(path, |dst| {
            dst.write_all(bytes).map(|()| bytes.len() as u64)
        })
        .map(drop)
    }

    fn get_to_file(&self, path: &StoragePath, local: &Path) -> Result<(), CheckpointError> {
        let src = self.resolve(path);
        let mut from = File::open(&src).map_err(|e| read_err("open", path, &src, e))?;
        let mut to = File::create(local).map_err(|e| io_err("create", local, e))?;
        io::copy(&mut from, &mut to).map_err(|e| io_err("copy to", local, e))?;
        Ok(())
    }

    fn get_bytes(&self, path: &StoragePath) -> Result<Vec<u8>, CheckpointError> {
        let src = self.resolve(path);
        let mut bytes = Vec::new();
        File::open(&src)
            .and_then(|mut f| f.read_to_end(&mut bytes))
            .map_err(|e| read_err("read", path, &src, e))?;
        Ok(bytes)
    }

    fn get_bytes_at_most(&self, path: &StoragePath, max: u64) -> Result<Vec<u8>, CheckpointError> {
        let src = self.resolve(path);
        let mut bytes = Vec::new();
        File::open(&src)
            .and_then(|f| f.take(max.saturating_add(1)).read_to_end(&mut bytes))
            .map_err(|e| read_err("read", path, &src, e))?;
        check_at_most(path, bytes.len() as u64, max)?;
        Ok(bytes)
    }

    fn delete(&self, path: &StoragePath) -> Result<(), CheckpointError> {
        let target = self.resolve(path);
        match fs::remove_file(&target) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(io_err("delete", &target, e)),
            _ => Ok(()),
        }
    }

    fn delete_prefix(&self, prefix: &StoragePath) -> Result<(), CheckpointError> {
        let target = self.resolve(prefix);
        let removed = match fs::symlink_metadata(&target) {
            Ok(m) if m.is_dir() => fs::remove_dir_all(&target),
            Ok(_) => fs::remove_file(&target),
            Err(e) => Err(e),
        };
        match removed {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(io_err("delete", &target, e)),
            _ => Ok(()),
        }
    }

    fn list(&self, prefix: &StoragePath) -> Result<Vec<StoragePath>, CheckpointError> {
        let target = self.resolve(prefix);
        let mut out = Vec::new();
        match fs::symlink_metadata(&target) {
            Ok(m) if m.is_dir() => self.walk(&target, prefix.as_str(), &mut out)?,
            Ok(m) if m.is_file() => out.push(prefix.clone()),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err("list", &target, e)),
        }
        out.sort();
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> StoragePath {
        StoragePath::new(s).unwrap()
    }

    #[test]
    fn storage_path_rejects_escapes() {
        for bad in [
            "",
            "/etc/passwd",
            "..",
            "../x",
            "a/../../x",
            "a/./b",
            ".",
            "a//b",
            "a/",
            "a\\..\\b",
            "a\0b",
            ".weir-tmp-1-x",
            "a/.weir-tmp-x",
        ] {
            assert!(StoragePath::new(bad).is_err(), "{bad:?} must be rejected");
            assert!(
                serde_json::from_str::<StoragePath>(&serde_json::to_string(bad).unwrap()).is_err(),
                "{bad:?} must be rejected when deserialized"
            );
        }
        let ok = p("chk-1/op/0/000012.sst");
        assert_eq!(ok.file_name(), "000012.sst");
        assert!(
            p("a/..b/c..").as_str().contains(".."),
            "dots inside names are fine"
        );
        assert!(p("a").join("../b").is_err());
        assert_eq!(p("a").join("b/c").unwrap(), p("a/b/c"));
        assert!(p("a/b/c").starts_with(&p("a/b")));
        assert!(p("a/b").starts_with(&p("a/b")));
        assert!(!p("a/bc").starts_with(&p("a/b")));
        let json = serde_json::to_string(&ok).unwrap();
        assert_eq!(json, "\"chk-1/op/0/000012.sst\"");
        assert_eq!(serde_json::from_str::<StoragePath>(&json).unwrap(), ok);
    }

    #[test]
    fn put_get_list_delete() {
        let tmp = tempfile::tempdir().unwrap();
        let s = DirStorage::new(tmp.path().join("root"));
        assert!(s.list(&p("chk-1")).unwrap().is_empty());
        assert!(matches!(
            s.get_bytes(&p("chk-1/x")),
            Err(CheckpointError::NotFound(_))
        ));

        s.put_bytes(&p("chk-1/meta"), b"hello").unwrap();
        let local = tmp.path().join("local.sst");
        fs::write(&local, vec![7u8; 10_000]).unwrap();
        assert_eq!(s.put_file(&p("chk-1/op/0/a.sst"), &local).unwrap(), 10_000);
        let mut src: &[u8] = b"streamed";
        assert_eq!(s.put_reader(&p("chk-1/op/0/b"), &mut src).unwrap(), 8);
        assert_eq!(s.get_bytes(&p("chk-1/op/0/b")).unwrap(), b"streamed");
        s.delete(&p("chk-1/op/0/b")).unwrap();
        s.put_bytes(&p("chk-10/meta"), b"other").unwrap();
        s.put_bytes(&p("chk-1/meta"), b"replaced").unwrap();

        assert_eq!(s.get_bytes(&p("chk-1/meta")).unwrap(), b"replaced");
        // A file that must be small is read only up to its bound.
        assert_eq!(
            s.get_bytes_at_most(&p("chk-1/meta"), 8).unwrap(),
            b"replaced"
        );
        let err = s.get_bytes_at_most(&p("chk-1/meta"), 7).unwrap_err();
        assert!(
            err.to_string().contains("`chk-1/meta` is over 7 bytes"),
            "{err}"
        );
        let back = tmp.path().join("back.sst");
        s.get_to_file(&p("chk-1/op/0/a.sst"), &back).unwrap();
        assert_eq!(fs::read(&back).unwrap(), vec![7u8; 10_000]);
        assert_eq!(
            s.list(&p("chk-1")).unwrap(),
            [p("chk-1/meta"), p("chk-1/op/0/a.sst")],
            "recursive, files only, and `chk-10` is not under `chk-1`"
        );
        assert_eq!(s.list(&p("chk-1/meta")).unwrap(), [p("chk-1/meta")]);

        s.delete(&p("chk-1/meta")).unwrap();
        s.delete(&p("chk-1/meta")).unwrap(); // missing is fine
        assert_eq!(s.list(&p("chk-1")).unwrap(), [p("chk-1/op/0/a.sst")]);
        s.delete_prefix(&p("chk-1")).unwrap();
        s.delete_prefix(&p("chk-1")).unwrap(); // missing is fine
        assert!(s.list(&p("chk-1")).unwrap().is_empty());
        assert_eq!(s.list(&p("chk-10")).unwrap(), [p("chk-10/meta")]);
        assert!(!tmp.path().join("root/chk-1").exists());
    }

    #[test]
    fn writes_are_atomic_and_failed_writes_leave_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let s = DirStorage::new(tmp.path().to_path_buf());
        let path = p("chk-1/state");
        let target = tmp.path().join("chk-1/state");

        // While a write is under way, the final name does not exist ...
        s.write_atomic(&path, |f| {
            f.write_all(b"first half")?;
            assert!(
                !target.exists(),
                "partial file visible under its final name"
            );
            assert!(s.list(&p("chk-1")).unwrap().is_empty(), "temp file listed");
            f.write_all(b", second half")?;
            Ok(0)
        })
        .unwrap();
        assert_eq!(fs::read(&target).unwrap(), b"first half, second half");

        // ... a replacement leaves the old contents in place until it is done ...
        s.write_atomic(&path, |f| {
            f.write_all(b"new")?;
            assert_eq!(fs::read(&target)?, b"first half, second half");
            Ok(0)
        })
        .unwrap();
        assert_eq!(fs::read(&target).unwrap(), b"new");

        // ... and a write that fails midway changes nothing and leaves no temp file.
        let failed = s.write_atomic(&path, |f| {
            f.write_all(b"garbage")?;
            Err(io::Error::other("disk on fire"))
        });
        assert!(matches!(failed, Err(CheckpointError::Io { .. })));
        assert_eq!(fs::read(&target).unwrap(), b"new");
        let names: Vec<_> = fs::read_dir(tmp.path().join("chk-1"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["state"]);

        // A missing source file fails before anything is written.
        assert!(s.put_file(&p("chk-2/x"), &tmp.path().join("nope")).is_err());
        assert!(s.list(&p("chk-2")).unwrap().is_empty());
    }
}
