//! Confinement of file connectors: the directories in which a job's file
//! sources may read and its file sinks may write.
//!
//! # Key types
//!
//! - [`AllowedRoots`]: a list of canonical directories (a daemon's
//!   `--allow-path`, or what `weir run` allows). Every file a connector
//!   opens goes through it: [`AllowedRoots::open_read`] for sources,
//!   [`AllowedRoots::create_new`] (after [`AllowedRoots::prepare_write`])
//!   for sinks.
//! - [`ConfineError`]: why a path was refused, naming the path as the
//!   caller gave it (the job's own path), never the resolved one.
//!
//! # Invariants
//!
//! - A path is judged by where it really is: resolved against its deepest
//!   existing ancestor with `canonicalize` (symlinks and `..` followed), so a
//!   symlink or a `..` that leads out of every root is refused. A path whose
//!   real place is outside every root gets the same message whether or not
//!   it exists: a job cannot probe a host's files.
//! - Only regular files are read or written. FIFOs, devices, sockets and
//!   directories are refused before they are opened (a FIFO would block the
//!   reader, `/dev/zero` would never end); a source is opened with
//!   `O_NOFOLLOW | O_NONBLOCK` and its identity (device, inode) compared
//!   with the file that was checked, so a swap in between is refused too.
//! - A sink never writes through what it finds at its target: a symlink or
//!   another non-regular file there is refused; files are created new
//!   (`O_CREAT | O_EXCL | O_NOFOLLOW`) with mode [`FILE_MODE`], and missing
//!   parent directories are created only below a root (mode 0750).
//! - No roots, no files: [`AllowedRoots::none`] refuses every path, with a
//!   message that says how to allow one.
//!
//! This module knows nothing of jobs or vertices; callers add the vertex to
//! the message.

use super::addresses::AllowedAddresses;
use std::ffi::OsString;
use std::fmt;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Mode of the files sinks create: read and write for the owner, read for
/// the group, nothing for others (a job's output may be as sensitive as its
/// input). The process umask may remove more.
pub const FILE_MODE: u32 = 0o640;

/// Mode of the directories sinks create.
pub const DIR_MODE: u32 = 0o750;

/// The directories file connectors may use, and the network addresses
/// network connectors may reach ([`AllowedAddresses`]): what a job's
/// connectors may touch outside the sandbox.
///
/// Cheap to clone (the lists are shared).
#[derive(Debug, Clone, Default)]
pub struct AllowedRoots {
    roots: Arc<[PathBuf]>,
    /// Appended to refusals: how to allow a path here (e.g. "start the
    /// TaskManager with --allow-path DIR").
    hint: Option<Arc<str>>,
    addresses: AllowedAddresses,
}

/// Why a path was refused or could not be used.
#[derive(Debug)]
pub struct ConfineError {
    /// The path as the caller named it.
    pub path: PathBuf,
    /// What is wrong.
    pub reason: Reason,
    /// How to allow it, if the refusal is about the roots.
    pub hint: Option<String>,
}

/// What is wrong with a path.
#[derive(Debug, thiserror::Error)]
pub enum Reason {
    /// No directory is allowed at all.
    #[error("file sources and sinks are not allowed here: no directory is allowed")]
    NoRoots,
    /// The path, resolved, is not under any root.
    #[error("outside the directories allowed for file sources and sinks")]
    Outside,
    /// The file is not a regular file.
    #[error("not a regular file (it is {0}); only regular files can be read or written")]
    NotRegular(&'static str),
    /// A savepoint path that is a file.
    #[error("is not a directory (a savepoint is a directory)")]
    NotDirectory,
    /// A symlink where a sink would create its file.
    #[error("is a symbolic link; a sink does not write through links")]
    Symlink,
    /// The file changed between the check and the open.
    #[error("changed while it was being opened")]
    Changed,
    /// A root given to [`AllowedRoots::new`] is not a directory.
    #[error("cannot be allowed: not a directory")]
    RootNotDirectory,
    /// The file system said no.
    #[error("{0}")]
    Io(std::io::Error),
}

impl fmt::Display for ConfineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.reason)?;
        if let Some(hint) = &self.hint {
            write!(f, " ({hint})")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfineError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.reason {
            Reason::Io(e) => Some(e),
            _ => None,
        }
    }
}

impl ConfineError {
    /// The same error, naming `path` instead (e.g. the path as the job spec
    /// wrote it).
    pub fn naming(mut self, path: impl Into<PathBuf>) -> Self {
        self.path = path.into();
        self
    }

    /// Whether the path was refused (as opposed to failing to open).
    pub fn is_refusal(&self) -> bool {
        !matches!(self.reason, Reason::Io(_))
    }
}

impl AllowedRoots {
    /// No directory: every file connector is refused.
    pub fn none() -> AllowedRoots {
        AllowedRoots::default()
    }

    /// The given directories, canonicalized. Each must exist and be a
    /// directory.
    pub fn new<I, P>(dirs: I) -> Result<AllowedRoots, ConfineError>
    where
        I: IntoIterator<Item = P>,
        P: AsRef<Path>,
    {
        let mut roots: Vec<PathBuf> = Vec::new();
        for dir in dirs {
            let dir = dir.as_ref();
            let error = |reason| ConfineError {
                path: dir.to_path_buf(),
                reason,
                hint: None,
            };
            let real = dir.canonicalize().map_err(|e| error(Reason::Io(e)))?;
            if !real.is_dir() {
                return Err(error(Reason::RootNotDirectory));
            }
            if !roots.contains(&real) {
                roots.push(real);
            }
        }
        Ok(AllowedRoots {
            roots: roots.into(),
            hint: None,
            addresses: AllowedAddresses::none(),
        })
    }

    /// The same roots, and `addresses` for network connectors (none
    /// unless given).
    pub fn with_addresses(mut self, addresses: AllowedAddresses) -> AllowedRoots {
        self.addresses = addresses;
        self
    }

    /// The addresses network connectors may reach.
    pub fn addresses(&self) -> &AllowedAddresses {
        &self.addresses
    }

    /// The same roots; refusals end with `hint` (how to allow a path).
    pub fn with_hint(mut self, hint: impl Into<String>) -> AllowedRoots {
        self.hint = Some(hint.into().into());
        self
    }

    /// The canonical roots.
    pub fn roots(&self) -> &[PathBuf] {
        &self.roots
    }

    /// Whether no directory is allowed.
    pub fn is_empty(&self) -> bool {
        self.roots.is_empty()
    }

    fn error(&self, path: &Path, reason: Reason) -> ConfineError {
        let about_roots = matches!(reason, Reason::NoRoots | Reason::Outside);
        ConfineError {
            path: path.to_path_buf(),
            reason,
            hint: if about_roots {
                self.hint.as_deref().map(str::to_owned)
            } else {
                None
            },
        }
    }

    fn io(&self, path: &Path, e: std::io::Error) -> ConfineError {
        self.error(path, Reason::Io(e))
    }

    fn is_under_root(&self, real: &Path) -> bool {
        self.roots.iter().any(|root| real.starts_with(root))
    }

    /// Where `path` really is: its deepest existing ancestor canonicalized,
    /// plus the components below it that do not exist (yet). Refused when
    /// that place is outside every root. The second value tells whether
    /// the whole path exists.
    fn resolve(&self, path: &Path) -> Result<(PathBuf, bool), ConfineError> {
        if self.roots.is_empty() {
            return Err(self.error(path, Reason::NoRoots));
        }
        let absolute = std::path::absolute(path).map_err(|e| self.io(path, e))?;
        let mut missing: Vec<OsString> = Vec::new();
        let mut existing = absolute.as_path();
        let real = loop {
            if let Ok(real) = existing.canonicalize() {
                break real;
            }
            // Not there (or not reachable): judge by the parent. A `..`
            // below a missing directory cannot be resolved: refused.
            match (existing.parent(), existing.file_name()) {
                (Some(parent), Some(name)) => {
                    missing.push(name.to_owned());
                    existing = parent;
                }
                _ => return Err(self.error(path, Reason::Outside)),
            }
        };
        let exists = missing.is_empty();
        let real = missing.into_iter().rev().fold(real, |p, name| p.join(name));
        if !self.is_under_root(&real) {
            return Err(self.error(path, Reason::Outside));
        }
        Ok((real, exists))
    }

    /// Checks that `path` is under a root, symlinks followed, and is a
    /// directory if it exists (a savepoint directory to write or read);
    /// returns its real path.
    pub fn check_dir(&self, path: &Path) -> Result<PathBuf, ConfineError> {
        let (real, exists) = self.resolve(path)?;
        if exists && !real.is_dir() {
            return Err(self.error(path, Reason::NotDirectory));
        }
        Ok(real)
    }

    /// Checks that `path` is a regular file under a root, symlinks
    /// followed; returns its real path.
    pub fn check_read(&self, path: &Path) -> Result<PathBuf, ConfineError> {
        let (real, exists) = self.resolve(path)?;
        if !exists {
            return Err(self.io(path, std::io::ErrorKind::NotFound.into()));
        }
        let meta = std::fs::metadata(&real).map_err(|e| self.io(path, e))?;
        if let Some(kind) = not_regular(&meta) {
            return Err(self.error(path, Reason::NotRegular(kind)));
        }
        Ok(real)
    }

    /// Opens `path` for reading: [`check_read`](Self::check_read), then an
    /// open that follows no symlink and does not block (a FIFO swapped in),
    /// and a check that the opened file is the one checked.
    pub fn open_read(&self, path: &Path) -> Result<File, ConfineError> {
        let real = self.check_read(path)?;
        let checked = std::fs::metadata(&real).map_err(|e| self.io(path, e))?;
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(&real)
            .map_err(|e| self.io(path, e))?;
        let opened = file.metadata().map_err(|e| self.io(path, e))?;
        if let Some(kind) = not_regular(&opened) {
            return Err(self.error(path, Reason::NotRegular(kind)));
        }
        if (opened.dev(), opened.ino()) != (checked.dev(), checked.ino()) {
            return Err(self.error(path, Reason::Changed));
        }
        Ok(file)
    }

    /// Checks that a sink may write `path`: its parent resolves under a
    /// root, and what is at the target, if anything, is a regular file (not
    /// a symlink). Returns the real path of the target (the parent
    /// resolved, the file name as given). Creates nothing.
    pub fn check_write(&self, path: &Path) -> Result<PathBuf, ConfineError> {
        let absolute = std::path::absolute(path).map_err(|e| self.io(path, e))?;
        let (Some(parent), Some(name)) = (absolute.parent(), absolute.file_name()) else {
            return Err(self.error(path, Reason::NotRegular("a directory")));
        };
        let (real_parent, _) = self.resolve(parent).map_err(|e| e.naming(path))?;
        let target = real_parent.join(name);
        if !self.is_under_root(&target) {
            // The parent is a root's ancestor (the target names a root).
            return Err(self.error(path, Reason::Outside));
        }
        match std::fs::symlink_metadata(&target) {
            Ok(meta) if meta.file_type().is_symlink() => Err(self.error(path, Reason::Symlink)),
            Ok(meta) => match not_regular(&meta) {
                Some(kind) => Err(self.error(path, Reason::NotRegular(kind))),
                None => Ok(target),
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(target),
            Err(e) => Err(self.io(path, e)),
        }
    }

    /// [`check_write`](Self::check_write), then creates the missing parent
    /// directories (all below a root, since the nearest existing ancestor
    /// is) and checks the parent again once it exists. Returns the real
    /// path of the target.
    pub fn prepare_write(&self, path: &Path) -> Result<PathBuf, ConfineError> {
        let target = self.check_write(path)?;
        if let Some(parent) = target.parent() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(DIR_MODE)
                .create(parent)
                .map_err(|e| self.io(path, e))?;
            let real_parent = parent.canonicalize().map_err(|e| self.io(path, e))?;
            if !self.is_under_root(&real_parent) {
                return Err(self.error(path, Reason::Outside));
            }
        }
        Ok(target)
    }

    /// Creates a new file at `path` (which must not exist), for writing,
    /// with mode [`FILE_MODE`]; never follows a symlink. The parent must
    /// exist ([`prepare_write`](Self::prepare_write)).
    pub fn create_new(&self, path: &Path) -> Result<File, ConfineError> {
        let target = self.check_write(path)?;
        OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(FILE_MODE)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&target)
            .map_err(|e| self.io(path, e))
    }
}

/// What a file is, when it is not a regular file.
fn not_regular(meta: &std::fs::Metadata) -> Option<&'static str> {
    let t = meta.file_type();
    if t.is_file() {
        None
    } else if t.is_dir() {
        Some("a directory")
    } else if t.is_fifo() {
        Some("a FIFO")
    } else if t.is_socket() {
        Some("a socket")
    } else if t.is_char_device() || t.is_block_device() {
        Some("a device")
    } else if t.is_symlink() {
        Some("a symbolic link")
    } else {
        Some("not a file")
    }
}

impl fmt::Display for AllowedRoots {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.roots.is_empty() {
            return f.write_str("(none)");
        }
        for (i, root) in self.roots.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{}", root.display())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    struct Fixture {
        _root: tempfile::TempDir,
        _outside: tempfile::TempDir,
        root: PathBuf,
        outside: PathBuf,
        roots: AllowedRoots,
    }

    fn fixture() -> Fixture {
        let root_dir = tempfile::tempdir().unwrap();
        let outside_dir = tempfile::tempdir().unwrap();
        let root = root_dir.path().canonicalize().unwrap();
        let outside = outside_dir.path().canonicalize().unwrap();
        std::fs::write(root.join("in.txt"), "inside\n").unwrap();
        std::fs::write(outside.join("secret.txt"), "secret\n").unwrap();
        let roots = AllowedRoots::new([&root])
            .unwrap()
            .with_hint("use --allow-path");
        Fixture {
            _root: root_dir,
            _outside: outside_dir,
            root,
            outside,
            roots,
        }
    }

    fn reason(e: ConfineError) -> Reason {
        e.reason
    }

    #[test]
    fn a_file_under_a_root_is_read() {
        let f = fixture();
        let mut text = String::new();
        f.roots
            .open_read(&f.root.join("in.txt"))
            .unwrap()
            .read_to_string(&mut text)
            .unwrap();
        assert_eq!(text, "inside\n");
    }

    #[test]
    fn no_roots_refuse_everything_and_say_how_to_allow() {
        let f = fixture();
        let none = AllowedRoots::none().with_hint("start it with --allow-path DIR");
        let e = none.open_read(&f.root.join("in.txt")).unwrap_err();
        assert!(matches!(e.reason, Reason::NoRoots), "{e}");
        assert!(e.to_string().contains("--allow-path"), "{e}");
        assert!(none.check_write(&f.root.join("out.txt")).is_err());
    }

    #[test]
    fn a_file_outside_is_refused_whether_or_not_it_exists() {
        let f = fixture();
        let there = f
            .roots
            .open_read(&f.outside.join("secret.txt"))
            .unwrap_err();
        let missing = f
            .roots
            .open_read(&f.outside.join("nothing.txt"))
            .unwrap_err();
        assert!(matches!(there.reason, Reason::Outside), "{there}");
        assert!(matches!(missing.reason, Reason::Outside), "{missing}");
        // Same message but for the name: existence is not revealed.
        assert_eq!(
            there.to_string().replace("secret.txt", "X"),
            missing.to_string().replace("nothing.txt", "X")
        );
        assert!(there.to_string().contains("use --allow-path"), "{there}");
    }

    #[test]
    fn dot_dot_escapes_are_refused() {
        let f = fixture();
        let name = f.outside.file_name().unwrap();
        let sneaky = f.root.join("..").join(name).join("secret.txt");
        assert!(matches!(
            reason(f.roots.open_read(&sneaky).unwrap_err()),
            Reason::Outside
        ));
        let write = f.root.join("..").join(name).join("new.txt");
        assert!(matches!(
            reason(f.roots.check_write(&write).unwrap_err()),
            Reason::Outside
        ));
        // Through a directory that does not exist: cannot be resolved.
        let through_missing = f.root.join("nope/../..").join(name).join("x.txt");
        assert!(f.roots.prepare_write(&through_missing).is_err());
        assert!(!f.outside.join("x.txt").exists());
        // A `..` that stays inside is fine.
        std::fs::create_dir(f.root.join("sub")).unwrap();
        let inside = f.root.join("sub/../in.txt");
        assert!(f.roots.open_read(&inside).is_ok());
    }

    #[test]
    fn a_symlink_out_of_the_root_is_refused() {
        let f = fixture();
        let link = f.root.join("link.txt");
        std::os::unix::fs::symlink(f.outside.join("secret.txt"), &link).unwrap();
        assert!(matches!(
            reason(f.roots.open_read(&link).unwrap_err()),
            Reason::Outside
        ));
        // A directory link out of the root: neither read nor write through it.
        let dir_link = f.root.join("out-dir");
        std::os::unix::fs::symlink(&f.outside, &dir_link).unwrap();
        assert!(f.roots.open_read(&dir_link.join("secret.txt")).is_err());
        assert!(matches!(
            reason(
                f.roots
                    .prepare_write(&dir_link.join("new.txt"))
                    .unwrap_err()
            ),
            Reason::Outside
        ));
        assert!(!f.outside.join("new.txt").exists());
    }

    #[test]
    fn a_symlink_inside_the_root_is_read_but_never_written_through() {
        let f = fixture();
        let link = f.root.join("alias.txt");
        std::os::unix::fs::symlink(f.root.join("in.txt"), &link).unwrap();
        assert!(f.roots.open_read(&link).is_ok());
        assert!(matches!(
            reason(f.roots.check_write(&link).unwrap_err()),
            Reason::Symlink
        ));
        assert!(f.roots.create_new(&link).is_err());
        assert_eq!(
            std::fs::read_to_string(f.root.join("in.txt")).unwrap(),
            "inside\n"
        );
    }

    #[test]
    fn fifos_and_directories_are_refused_without_blocking() {
        let f = fixture();
        let fifo = f.root.join("pipe");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        // Opening a FIFO for reading would block until a writer came.
        let e = f.roots.open_read(&fifo).unwrap_err();
        assert!(matches!(e.reason, Reason::NotRegular("a FIFO")), "{e}");
        assert!(matches!(
            reason(f.roots.check_write(&fifo).unwrap_err()),
            Reason::NotRegular("a FIFO")
        ));
        assert!(matches!(
            reason(f.roots.open_read(&f.root).unwrap_err()),
            Reason::NotRegular("a directory")
        ));
        let dev = AllowedRoots::new(["/dev"]).unwrap();
        assert!(matches!(
            reason(dev.open_read(Path::new("/dev/zero")).unwrap_err()),
            Reason::NotRegular("a device")
        ));
    }

    #[test]
    fn sinks_create_private_files_and_directories_below_a_root_only() {
        let f = fixture();
        let target = f.root.join("a/b/out.txt");
        let real = f.roots.prepare_write(&target).unwrap();
        assert_eq!(real, target);
        let mut file = f.roots.create_new(&target).unwrap();
        file.write_all(b"x").unwrap();
        let mode = std::fs::metadata(&target).unwrap().mode() & 0o777;
        assert_eq!(mode & 0o007, 0, "not readable by others: {mode:o}");
        // create_new never truncates what is there.
        assert!(f.roots.create_new(&target).is_err());
        assert_eq!(std::fs::read(&target).unwrap(), b"x");
        // A root itself is not a file to write.
        assert!(f.roots.check_write(&f.root).is_err());
    }

    #[test]
    fn a_root_must_be_a_directory() {
        let f = fixture();
        let e = AllowedRoots::new([f.root.join("in.txt")]).unwrap_err();
        assert!(matches!(e.reason, Reason::RootNotDirectory), "{e}");
        assert!(AllowedRoots::new([f.root.join("missing")]).is_err());
    }
}
