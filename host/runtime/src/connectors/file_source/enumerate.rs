//! Which files a file source reads: its `path` expanded (one file, a
//! folder, or a glob pattern) under the [`AllowedRoots`], and how each file
//! is cut into splits.
//!
//! # Invariants
//!
//! - Nothing outside the roots is listed: a folder or a glob's literal
//!   prefix is checked with [`AllowedRoots::check_dir`] before it is read,
//!   and so is every directory the walk enters (a symlinked directory that
//!   leads out of every root is refused, as a symlinked file is). A `..`
//!   after a wildcard is refused: it could only climb out of what was
//!   matched. Every file found passes [`AllowedRoots::check_read`] (a
//!   regular file under a root, symlinks resolved) or the expansion fails
//!   naming it.
//! - Names starting with `.` or `_` are skipped in a folder (Flink's and
//!   Hadoop's hidden files: write a file under such a name and rename it
//!   into place so a continuous source never sees it half written); a glob
//!   wildcard does not match a leading `.`.
//! - The result is sorted by path: every subtask expanding the same
//!   unchanged files gets the same list, and so the same splits.

use std::collections::HashSet;
use std::path::{Component, Path, PathBuf};

use super::super::{AllowedRoots, ConfineError, ConnectorError};

/// One file found: its path as the expansion names it, and its size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoundFile {
    /// The path (the pattern's prefix joined with the names found).
    pub path: PathBuf,
    /// Its size in bytes when it was found.
    pub size: u64,
}

/// What a source's `path` is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathKind {
    /// One file.
    File,
    /// A folder: every file below it.
    Folder,
    /// A glob pattern (`*`, `?`, `[…]`, `**`).
    Glob,
}

/// Deepest walk below a folder or through `**`: deeper trees are refused
/// rather than walked without end (a symlink cycle is caught earlier).
const MAX_DEPTH: usize = 64;

/// Whether `path` holds a glob wildcard.
pub fn is_glob(path: &Path) -> bool {
    path.to_string_lossy().contains(['*', '?', '['])
}

/// Whether the file's name says it is compressed (`.gz`, `.zst`).
pub fn is_compressed(path: &Path) -> bool {
    matches!(
        path.extension().and_then(|e| e.to_str()),
        Some("gz") | Some("zst")
    )
}

fn hidden(name: &std::ffi::OsStr) -> bool {
    let b = name.as_encoded_bytes();
    b.first().is_some_and(|&c| c == b'.' || c == b'_')
}

fn confined(e: ConfineError) -> ConnectorError {
    ConnectorError::Confined(e)
}

fn not_found(e: &ConfineError) -> bool {
    matches!(&e.reason, super::super::confine::Reason::Io(io)
        if io.kind() == std::io::ErrorKind::NotFound)
}

/// Expands `path` under `roots`: the files it names, sorted, with sizes.
/// A single file that does not exist is an error (as opening it would be);
/// a folder or pattern that matches nothing gives an empty list (the
/// caller decides whether that is an error). A folder or a glob base that
/// does not exist yet is empty.
pub fn expand(
    roots: &AllowedRoots,
    path: &Path,
) -> Result<(PathKind, Vec<FoundFile>), ConnectorError> {
    let mut out = Vec::new();
    let kind = if is_glob(path) {
        glob(roots, path, &mut out)?;
        PathKind::Glob
    } else {
        match roots.check_dir(path) {
            // An existing directory (check_dir passes a missing path too).
            Ok(real) if real.is_dir() => {
                let mut visited = HashSet::new();
                walk_folder(roots, path, 0, &mut visited, &mut out)?;
                PathKind::Folder
            }
            Err(e)
                if e.is_refusal()
                    && !matches!(e.reason, super::super::confine::Reason::NotDirectory) =>
            {
                return Err(confined(e));
            }
            _ => {
                let real = roots.check_read(path).map_err(confined)?;
                out.push(FoundFile {
                    path: path.to_path_buf(),
                    size: size_of(roots, path, &real)?,
                });
                PathKind::File
            }
        }
    };
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out.dedup_by(|a, b| a.path == b.path);
    Ok((kind, out))
}

fn size_of(roots: &AllowedRoots, named: &Path, real: &Path) -> Result<u64, ConnectorError> {
    let _ = roots;
    std::fs::metadata(real)
        .map(|m| m.len())
        .map_err(|source| ConnectorError::Io {
            path: named.to_path_buf(),
            source,
        })
}

/// Lists `dir` (checked to be under a root first); `None` if it does not exist.
fn read_dir(
    roots: &AllowedRoots,
    dir: &Path,
    visited: &mut HashSet<PathBuf>,
) -> Result<Option<Vec<(std::ffi::OsString, PathBuf)>>, ConnectorError> {
    let real = match roots.check_dir(dir) {
        Ok(real) => real,
        Err(e) if not_found(&e) => return Ok(None),
        Err(e) => return Err(confined(e)),
    };
    if !visited.insert(real.clone()) {
        // A symlink back to a directory already walked: a cycle.
        return Ok(Some(Vec::new()));
    }
    let entries = match std::fs::read_dir(&real) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(ConnectorError::Io {
                path: dir.to_path_buf(),
                source,
            });
        }
    };
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| ConnectorError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
        let name = entry.file_name();
        names.push((name.clone(), dir.join(name)));
    }
    names.sort();
    Ok(Some(names))
}

fn too_deep(path: &Path) -> ConnectorError {
    ConnectorError::Io {
        path: path.to_path_buf(),
        source: std::io::Error::other(format!(
            "more than {MAX_DEPTH} directories deep; a file source does not walk deeper"
        )),
    }
}

fn walk_folder(
    roots: &AllowedRoots,
    dir: &Path,
    depth: usize,
    visited: &mut HashSet<PathBuf>,
    out: &mut Vec<FoundFile>,
) -> Result<(), ConnectorError> {
    if depth > MAX_DEPTH {
        return Err(too_deep(dir));
    }
    let Some(names) = read_dir(roots, dir, visited)? else {
        return Ok(());
    };
    for (name, path) in names {
        if hidden(&name) {
            continue;
        }
        add_or_descend(roots, &path, depth, visited, out, true)?;
    }
    Ok(())
}

/// A file found: added (after the same checks as a single file); a
/// directory: walked if `descend`.
fn add_or_descend(
    roots: &AllowedRoots,
    path: &Path,
    depth: usize,
    visited: &mut HashSet<PathBuf>,
    out: &mut Vec<FoundFile>,
    descend: bool,
) -> Result<(), ConnectorError> {
    // Judged where it really is (a symlink followed, refused if it leads out).
    let real = match roots.check_dir(path) {
        Ok(real) => real,
        Err(e) if matches!(e.reason, super::super::confine::Reason::NotDirectory) => {
            let real = roots.check_read(path).map_err(confined)?;
            out.push(FoundFile {
                path: path.to_path_buf(),
                size: size_of(roots, path, &real)?,
            });
            return Ok(());
        }
        // Gone between the listing and now.
        Err(e) if not_found(&e) => return Ok(()),
        Err(e) => return Err(confined(e)),
    };
    if real.is_dir() {
        if descend {
            walk_folder(roots, path, depth + 1, visited, out)?;
        }
        return Ok(());
    }
    Ok(())
}

fn glob(
    roots: &AllowedRoots,
    pattern: &Path,
    out: &mut Vec<FoundFile>,
) -> Result<(), ConnectorError> {
    let bad = |message: String| ConnectorError::Io {
        path: pattern.to_path_buf(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidInput, message),
    };
    let mut base = PathBuf::new();
    let mut rest: Vec<String> = Vec::new();
    for c in pattern.components() {
        let text = c.as_os_str().to_string_lossy();
        if rest.is_empty() && !text.contains(['*', '?', '[']) {
            base.push(c.as_os_str());
            continue;
        }
        if matches!(c, Component::ParentDir) {
            return Err(bad(
                "a `..` after a wildcard is not allowed in a file source pattern".into(),
            ));
        }
        rest.push(text.into_owned());
    }
    let mut parts = Vec::new();
    for r in &rest {
        if r == "**" {
            parts.push(None);
        } else {
            let p =
                glob::Pattern::new(r).map_err(|e| bad(format!("not a valid glob pattern: {e}")))?;
            parts.push(Some(p));
        }
    }
    glob_walk(roots, &base, &parts, 0, out)
}

const GLOB_OPTIONS: glob::MatchOptions = glob::MatchOptions {
    case_sensitive: true,
    require_literal_separator: true,
    require_literal_leading_dot: true,
};

fn glob_walk(
    roots: &AllowedRoots,
    dir: &Path,
    parts: &[Option<glob::Pattern>],
    depth: usize,
    out: &mut Vec<FoundFile>,
) -> Result<(), ConnectorError> {
    if depth > MAX_DEPTH {
        return Err(too_deep(dir));
    }
    let Some((part, rest)) = parts.split_first() else {
        return Ok(());
    };
    // No cycle check across levels here (the same directory may be reached
    // by `**` at different pattern positions): MAX_DEPTH ends a cycle.
    let mut seen = HashSet::new();
    let Some(names) = read_dir(roots, dir, &mut seen)? else {
        return Ok(());
    };
    match part {
        Some(pattern) => {
            for (name, path) in names {
                if !pattern.matches_with(&name.to_string_lossy(), GLOB_OPTIONS) {
                    continue;
                }
                if rest.is_empty() {
                    add_or_descend(roots, &path, depth, &mut seen, out, false)?;
                } else if is_dir_under_roots(roots, &path)? {
                    glob_walk(roots, &path, rest, depth + 1, out)?;
                }
            }
        }
        None => {
            // `**`: zero directories here, or one more and `**` again.
            if rest.is_empty() {
                // A trailing `**`: every file below, as a folder.
                walk_folder(roots, dir, depth, &mut HashSet::new(), out)?;
                return Ok(());
            }
            glob_walk(roots, dir, rest, depth + 1, out)?;
            for (name, path) in names {
                if hidden(&name) {
                    continue;
                }
                if is_dir_under_roots(roots, &path)? {
                    glob_walk(roots, &path, parts, depth + 1, out)?;
                }
            }
        }
    }
    Ok(())
}

/// Whether `path` is a directory; a directory (or symlink to one) outside
/// every root is an error.
fn is_dir_under_roots(roots: &AllowedRoots, path: &Path) -> Result<bool, ConnectorError> {
    match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => {
            roots.check_dir(path).map_err(confined)?;
            Ok(true)
        }
        _ => Ok(false),
    }
}

/// A split: the lines of `path` that start in `[start, end)` (`end` `None`:
/// up to the end of the file, however long it is then).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Split {
    /// The file.
    pub path: PathBuf,
    /// The split's index in its file (0-based).
    pub index: u64,
    /// The first byte.
    pub start: u64,
    /// One past the last byte, if bounded.
    pub end: Option<u64>,
}

/// The splits of a file of `size` bytes: one if it is not `splittable`
/// (compressed, CSV) or followed, else byte ranges of `split_bytes`, the last
/// one open-ended. An empty file has none (a followed one has one).
pub fn splits_of(path: &Path, size: u64, split_bytes: u64, splittable: bool) -> Vec<Split> {
    let whole = || Split {
        path: path.to_path_buf(),
        index: 0,
        start: 0,
        end: None,
    };
    if !splittable {
        return vec![whole()];
    }
    if size == 0 {
        return Vec::new();
    }
    let n = size.div_ceil(split_bytes.max(1));
    (0..n)
        .map(|k| Split {
            path: path.to_path_buf(),
            index: k,
            start: k * split_bytes,
            end: (k + 1 < n).then(|| (k + 1) * split_bytes),
        })
        .collect()
}

/// FNV-1a of a path's bytes: stable across processes and versions (the
/// owner of a file's splits in continuous mode must not depend on a
/// hasher's random seed).
pub fn path_hash(path: &Path) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in path.as_os_str().as_encoded_bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    fn touch(path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    fn names(dir: &Path, found: &[FoundFile]) -> Vec<String> {
        found
            .iter()
            .map(|f| {
                f.path
                    .strip_prefix(dir)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect()
    }

    #[test]
    fn a_folder_lists_every_file_below_it_sorted_without_hidden_ones() {
        let d = tempfile::tempdir().unwrap();
        for f in [
            "b.txt",
            "a.txt",
            "sub/c.txt",
            ".hidden",
            "_SUCCESS",
            "sub/.x/d.txt",
        ] {
            touch(&d.path().join(f), "x\n");
        }
        let roots = AllowedRoots::new([d.path()]).unwrap();
        let (kind, found) = expand(&roots, d.path()).unwrap();
        assert_eq!(kind, PathKind::Folder);
        assert_eq!(names(d.path(), &found), ["a.txt", "b.txt", "sub/c.txt"]);
        assert_eq!(found[0].size, 2);
    }

    #[test]
    fn a_glob_matches_names_and_double_star_matches_any_depth() {
        let d = tempfile::tempdir().unwrap();
        for f in ["a.csv", "b.txt", "x/c.csv", "x/y/d.csv", ".e.csv"] {
            touch(&d.path().join(f), "x\n");
        }
        let roots = AllowedRoots::new([d.path()]).unwrap();
        let (kind, found) = expand(&roots, &d.path().join("*.csv")).unwrap();
        assert_eq!(kind, PathKind::Glob);
        assert_eq!(names(d.path(), &found), ["a.csv"]);
        let (_, found) = expand(&roots, &d.path().join("**/*.csv")).unwrap();
        assert_eq!(names(d.path(), &found), ["a.csv", "x/c.csv", "x/y/d.csv"]);
        let (_, found) = expand(&roots, &d.path().join("nothing-*.csv")).unwrap();
        assert!(found.is_empty());
    }

    #[test]
    fn a_glob_or_folder_outside_the_roots_is_refused_before_it_is_listed() {
        let allowed = tempfile::tempdir().unwrap();
        let other = tempfile::tempdir().unwrap();
        touch(&other.path().join("secret.txt"), "x\n");
        let roots = AllowedRoots::new([allowed.path()]).unwrap();
        for path in [other.path().join("*.txt"), other.path().to_path_buf()] {
            let err = expand(&roots, &path).unwrap_err().to_string();
            assert!(err.contains("outside"), "{err}");
        }
        // A `..` after a wildcard could climb out: refused.
        let err = expand(&roots, &allowed.path().join("*/../x"))
            .unwrap_err()
            .to_string();
        assert!(err.contains(".."), "{err}");
        // A symlinked directory (or file) leading out: refused, as today.
        std::os::unix::fs::symlink(other.path(), allowed.path().join("link")).unwrap();
        let err = expand(&roots, allowed.path()).unwrap_err().to_string();
        assert!(err.contains("outside"), "{err}");
        let err = expand(&roots, &allowed.path().join("*/*.txt"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("outside"), "{err}");
    }

    #[test]
    fn splits_cover_a_file_once_and_the_last_is_open_ended() {
        let s = splits_of(Path::new("f"), 10, 4, true);
        let ranges: Vec<_> = s.iter().map(|s| (s.start, s.end)).collect();
        assert_eq!(ranges, [(0, Some(4)), (4, Some(8)), (8, None)]);
        assert!(splits_of(Path::new("f"), 0, 4, true).is_empty());
        assert_eq!(splits_of(Path::new("f.gz"), 100, 4, false).len(), 1);
    }
}
