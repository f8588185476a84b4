//! Sinks: file, stdout and blackhole.
//!
//! Every sink writes one record per line in an [`OutputFormat`].
//!
//! File sinks write only where their [`AllowedRoots`] allow, into files
//! they create themselves (mode [`FILE_MODE`](super::confine::FILE_MODE),
//! never through a symlink): [`FileSink`] replaces an earlier output by
//! renaming a new file over it, never by truncating it, and
//! [`TransactionalFileSink`] writes fresh part files.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::{AllowedRoots, ConnectorError, Sink};
use crate::record::{Batch, RecordRef};

/// How a record becomes a line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OutputFormat {
    /// The value bytes.
    #[default]
    Value,
    /// The key, a tab, the value (empty key if none).
    KeyValue,
    /// `{"key":…,"value":…,"timestamp":…}`, key `null` if none; bytes that
    /// are not UTF-8 are replaced.
    Json,
}

fn write_record(
    out: &mut impl Write,
    format: OutputFormat,
    r: RecordRef<'_>,
) -> std::io::Result<()> {
    match format {
        OutputFormat::Value => {
            out.write_all(r.value)?;
        }
        OutputFormat::KeyValue => {
            out.write_all(r.key.unwrap_or_default())?;
            out.write_all(b"\t")?;
            out.write_all(r.value)?;
        }
        OutputFormat::Json => {
            let v = serde_json::json!({
                "key": r.key.map(|k| String::from_utf8_lossy(k).into_owned()),
                "value": String::from_utf8_lossy(r.value),
                "timestamp": r.timestamp,
            });
            serde_json::to_writer(&mut *out, &v)?;
        }
    }
    out.write_all(b"\n")
}

/// Writes lines to a new file at its path.
#[derive(Debug)]
pub struct FileSink {
    path: PathBuf,
    out: BufWriter<File>,
    format: OutputFormat,
}

impl FileSink {
    /// Creates the file (and its missing parent directories), where `roots`
    /// allow. A regular file already at `path` (an earlier run's output) is
    /// replaced: a new file is created beside it and renamed over it, so
    /// the old file's contents, and any other link to it, are left alone.
    /// A symlink or any other non-regular file at `path` is refused.
    pub fn create(
        roots: &AllowedRoots,
        path: &Path,
        format: OutputFormat,
    ) -> Result<FileSink, ConnectorError> {
        let target = roots.prepare_write(path)?;
        let (file, temp) = create_beside(roots, path, &target)?;
        // Checked again just before: what is at the target is a regular
        // file or nothing. A rename replaces a directory entry; it never
        // writes through one.
        let renamed = roots
            .check_write(path)
            .map_err(ConnectorError::from)
            .and_then(|_| {
                std::fs::rename(&temp, &target).map_err(|source| ConnectorError::Io {
                    path: path.to_path_buf(),
                    source,
                })
            });
        if let Err(e) = renamed {
            let _ = std::fs::remove_file(&temp);
            return Err(e);
        }
        Ok(FileSink {
            path: path.to_path_buf(),
            out: BufWriter::with_capacity(256 << 10, file),
            format,
        })
    }
}

impl Sink for FileSink {
    fn write(&mut self, batch: &Batch) -> Result<(), ConnectorError> {
        for r in batch.iter() {
            write_record(&mut self.out, self.format, r).map_err(|source| ConnectorError::Io {
                path: self.path.clone(),
                source,
            })?;
        }
        Ok(())
    }

    fn finish(&mut self) -> Result<(), ConnectorError> {
        self.out.flush().map_err(|source| ConnectorError::Io {
            path: self.path.clone(),
            source,
        })
    }
}

/// Creates a new, uniquely named file in the directory of `target` (a real
/// path from [`AllowedRoots::prepare_write`]); returns it and its path.
fn create_beside(
    roots: &AllowedRoots,
    path: &Path,
    target: &Path,
) -> Result<(File, PathBuf), ConnectorError> {
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let name = target.file_name().unwrap_or_default().to_string_lossy();
    let mut attempts = 0;
    loop {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let temp = target.with_file_name(format!(
            ".{name}.{}-{}-{nanos}.new",
            std::process::id(),
            SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        match roots.create_new(&temp) {
            Ok(file) => return Ok((file, temp)),
            Err(e) if attempts < 8 && is_already_exists(&e) => attempts += 1,
            Err(e) => return Err(e.naming(path).into()),
        }
    }
}

fn is_already_exists(e: &super::ConfineError) -> bool {
    matches!(&e.reason, super::confine::Reason::Io(io) if io.kind() == std::io::ErrorKind::AlreadyExists)
}

/// Writes lines to standard output.
#[derive(Debug, Default)]
pub struct StdoutSink {
    format: OutputFormat,
}

impl StdoutSink {
    /// A stdout sink.
    pub fn new(format: OutputFormat) -> StdoutSink {
        StdoutSink { format }
    }
}

impl Sink for StdoutSink {
    fn write(&mut self, batch: &Batch) -> Result<(), ConnectorError> {
        let stdout = std::io::stdout();
        let mut out = stdout.lock();
        for r in batch.iter() {
            write_record(&mut out, self.format, r).map_err(ConnectorError::Stdout)?;
        }
        Ok(())
    }

    fn finish(&mut self) -> Result<(), ConnectorError> {
        std::io::stdout().flush().map_err(ConnectorError::Stdout)
    }
}

/// Discards records; optionally consumes at most `rate` records per second
/// (a deliberately slow consumer, for backpressure tests and benchmarks).
#[derive(Debug)]
pub struct BlackholeSink {
    rate: Option<f64>,
    consumed: u64,
    started: Instant,
}

impl BlackholeSink {
    /// A blackhole, throttled to `rate` records/s if given.
    pub fn new(rate: Option<f64>) -> BlackholeSink {
        BlackholeSink {
            rate,
            consumed: 0,
            started: Instant::now(),
        }
    }
}

impl Sink for BlackholeSink {
    fn write(&mut self, batch: &Batch) -> Result<(), ConnectorError> {
        self.consumed += batch.len() as u64;
        if let Some(rate) = self.rate {
            let due = Duration::from_secs_f64(self.consumed as f64 / rate);
            let elapsed = self.started.elapsed();
            if due > elapsed {
                std::thread::sleep(due - elapsed);
            }
        }
        Ok(())
    }

    fn finish(&mut self) -> Result<(), ConnectorError> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_sink_formats() {
        let dir = tempfile::tempdir().unwrap();
        let mut b = Batch::new();
        b.push(Some(b"k"), b"v", 7);
        b.push(None, b"w", 8);
        let roots = AllowedRoots::new([dir.path()]).unwrap();
        for (format, expected) in [
            (OutputFormat::Value, "v\nw\n"),
            (OutputFormat::KeyValue, "k\tv\n\tw\n"),
            (
                OutputFormat::Json,
                "{\"key\":\"k\",\"timestamp\":7,\"value\":\"v\"}\n{\"key\":null,\"timestamp\":8,\"value\":\"w\"}\n",
            ),
        ] {
            let path = dir.path().join("sub/out.txt");
            let mut sink = FileSink::create(&roots, &path, format).unwrap();
            sink.write(&b).unwrap();
            sink.finish().unwrap();
            assert_eq!(std::fs::read_to_string(&path).unwrap(), expected);
        }
        // Each run replaced the file; nothing else is left beside it.
        let names: Vec<_> = std::fs::read_dir(dir.path().join("sub"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["out.txt"]);
    }

    #[test]
    fn file_sink_replaces_output_without_writing_through_it() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let roots = AllowedRoots::new([dir.path()]).unwrap();
        let out = dir.path().join("out.txt");
        std::fs::write(&out, "old output\n").unwrap();
        // Another name for the old file: must keep its contents.
        let other = dir.path().join("other-link");
        std::fs::hard_link(&out, &other).unwrap();
        let mut b = Batch::new();
        b.push(None, b"new", 1);
        let mut sink = FileSink::create(&roots, &out, OutputFormat::Value).unwrap();
        sink.write(&b).unwrap();
        sink.finish().unwrap();
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "new\n");
        assert_eq!(std::fs::read_to_string(&other).unwrap(), "old output\n");
        let mode = std::fs::metadata(&out).unwrap().mode() & 0o777;
        assert_eq!(mode & 0o007, 0, "{mode:o}");

        // A symlink at the target is refused, and its target untouched.
        let victim = tempfile::tempdir().unwrap();
        let secret = victim.path().join("secret");
        std::fs::write(&secret, "keep").unwrap();
        let link = dir.path().join("link.txt");
        std::os::unix::fs::symlink(&secret, &link).unwrap();
        let err = FileSink::create(&roots, &link, OutputFormat::Value).unwrap_err();
        assert!(err.to_string().contains("symbolic link"), "{err}");
        assert_eq!(std::fs::read_to_string(&secret).unwrap(), "keep");
        assert!(
            std::fs::symlink_metadata(&link)
                .unwrap()
                .file_type()
                .is_symlink()
        );
        // Outside the roots: refused, nothing created.
        let err = FileSink::create(&roots, &victim.path().join("new.txt"), OutputFormat::Value)
            .unwrap_err();
        assert!(err.to_string().contains("outside"), "{err}");
        assert_eq!(std::fs::read_dir(victim.path()).unwrap().count(), 1);
    }
}

/// A file sink with two-phase commit, for jobs that take checkpoints.
///
/// Subtask `s` of a sink with path `P` writes part files: `P.s-<n>` once
/// committed, `P.s-<n>.inprogress` while being written, `P.s-<n>.pending`
/// once pre-committed. At a checkpoint barrier the current part is flushed,
/// synced and renamed to `.pending` (phase one); when the checkpoint
/// completes the TaskManager renames it to its final name with [`commit`]
/// (phase two). Readers see only committed parts, each exactly once. After
/// a failure the restored sink first finishes the commits of the restored
/// checkpoint, then deletes every `.inprogress` and `.pending` part it
/// finds: their records will be produced again from the restored positions.
///
/// The committable of a checkpoint lists every part still pending, not
/// only the one pre-committed at its barrier: the part of an aborted
/// checkpoint `k` is committed with the next completed one `m`, and if the
/// TaskManager is lost before it learns that `m` completed, the restore
/// from `m` must commit it too (its records come before `m`'s barrier, so
/// they are not produced again). A part leaves the list once its
/// `.pending` file is gone: it was committed.
///
/// [`commit`]: super::commit
#[derive(Debug)]
pub struct TransactionalFileSink {
    roots: AllowedRoots,
    base: PathBuf,
    subtask: u32,
    format: OutputFormat,
    next: u64,
    current: Option<(PathBuf, BufWriter<File>)>,
    /// Parts pre-committed and, as far as this sink saw, not committed.
    uncommitted: Vec<PathBuf>,
}

fn part_name(base: &Path, subtask: u32, n: u64) -> PathBuf {
    let mut name = base.as_os_str().to_owned();
    name.push(format!(".{subtask}-{n}"));
    PathBuf::from(name)
}

fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// Renames the `.pending` parts a committable lists to their final names,
/// each of which `roots` must allow. A part already committed (no
/// `.pending`, final name present) is fine.
pub(super) fn commit_files(
    committable: &serde_json::Value,
    roots: &AllowedRoots,
) -> Result<(), ConnectorError> {
    let parts = committable
        .get("parts")
        .and_then(serde_json::Value::as_array)
        .ok_or_else(|| {
            ConnectorError::Position(format!("not a file committable: {committable}"))
        })?;
    for part in parts {
        let Some(path) = part.as_str() else {
            return Err(ConnectorError::Position(format!("bad part {part}")));
        };
        let path = PathBuf::from(path);
        roots.check_write(&path)?;
        let pending = with_suffix(&path, ".pending");
        match std::fs::rename(&pending, &path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && path.exists() => {}
            Err(source) => {
                return Err(ConnectorError::Io {
                    path: pending,
                    source,
                });
            }
        }
    }
    Ok(())
}

impl TransactionalFileSink {
    /// A sink for subtask `subtask` of the sink whose path is `base`, which
    /// `roots` must allow (missing directories are created).
    /// `restored`: the committable of this subtask in the checkpoint the job
    /// restarts from (its parts are committed now); every other uncommitted
    /// part of this subtask is deleted, and so is every part committed
    /// after that checkpoint (there are some only when a restart fell back
    /// to an older checkpoint).
    pub fn open(
        roots: &AllowedRoots,
        base: &Path,
        subtask: u32,
        format: OutputFormat,
        restored: Option<&serde_json::Value>,
    ) -> Result<TransactionalFileSink, ConnectorError> {
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| ConnectorError::Io { path, source }
        };
        // Parts live beside the real path of `base` (directories resolved).
        let base = roots.prepare_write(base)?;
        let dir = base.parent().unwrap_or(Path::new("/"));
        if let Some(c) = restored {
            commit_files(c, roots)?;
        }
        // The next part number: after every part that exists in any state.
        let prefix = format!(
            "{}.{subtask}-",
            base.file_name().unwrap_or_default().to_string_lossy()
        );
        let restored_next = restored
            .and_then(|c| c.get("next"))
            .and_then(serde_json::Value::as_u64);
        let mut next = restored_next.unwrap_or(0);
        for entry in std::fs::read_dir(dir).map_err(io(dir))? {
            let entry = entry.map_err(io(dir))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(rest) = name.strip_prefix(&prefix) else {
                continue;
            };
            let (number, uncommitted) = match rest.split_once('.') {
                Some((n, "inprogress" | "pending")) => (n, true),
                Some(_) => continue,
                None => (rest, false),
            };
            let Ok(n) = number.parse::<u64>() else {
                continue;
            };
            // Parts committed after the restored checkpoint hold records
            // that will be emitted again: only when a restart falls back
            // past a completed checkpoint (the newest could not be
            // restored) are there any. Rolled back, so each record stays
            // committed exactly once.
            let rolled_back = restored_next.is_some_and(|r| n >= r);
            if uncommitted || rolled_back {
                let path = entry.path();
                if rolled_back && !uncommitted {
                    tracing::warn!(
                        part = %path.display(),
                        "removing a part committed after the checkpoint the job restores from"
                    );
                }
                std::fs::remove_file(&path).map_err(io(&path))?;
            }
            next = next.max(n + 1);
        }
        Ok(TransactionalFileSink {
            roots: roots.clone(),
            base,
            subtask,
            format,
            next,
            current: None,
            uncommitted: Vec::new(),
        })
    }

    fn writer(&mut self) -> Result<(), ConnectorError> {
        if self.current.is_none() {
            let path = part_name(&self.base, self.subtask, self.next);
            self.next += 1;
            let tmp = with_suffix(&path, ".inprogress");
            let file = self.roots.create_new(&tmp)?;
            self.current = Some((path, BufWriter::with_capacity(256 << 10, file)));
        }
        Ok(())
    }
}

impl Sink for TransactionalFileSink {
    fn write(&mut self, batch: &Batch) -> Result<(), ConnectorError> {
        if batch.is_empty() {
            return Ok(());
        }
        let format = self.format;
        self.writer()?;
        let (path, out) = self.current.as_mut().expect("opened by writer()");
        for r in batch.iter() {
            write_record(out, format, r).map_err(|source| ConnectorError::Io {
                path: path.clone(),
                source,
            })?;
        }
        Ok(())
    }

    fn finish(&mut self) -> Result<(), ConnectorError> {
        Ok(())
    }

    fn pre_commit(
        &mut self,
        _checkpoint: u64,
    ) -> Result<Option<serde_json::Value>, ConnectorError> {
        // Committed since the last barrier: its `.pending` file is gone.
        self.uncommitted
            .retain(|path| with_suffix(path, ".pending").exists());
        if let Some((path, mut out)) = self.current.take() {
            let tmp = with_suffix(&path, ".inprogress");
            let io = |source| ConnectorError::Io {
                path: tmp.clone(),
                source,
            };
            out.flush().map_err(io)?;
            let file = out.into_inner().map_err(|e| io(e.into_error()))?;
            file.sync_all().map_err(io)?;
            std::fs::rename(&tmp, with_suffix(&path, ".pending")).map_err(io)?;
            self.uncommitted.push(path);
        }
        let parts: Vec<String> = self
            .uncommitted
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        Ok(Some(
            serde_json::json!({ "parts": parts, "next": self.next }),
        ))
    }
}

#[cfg(test)]
mod transactional_tests {
    use super::*;
    use crate::connectors::commit;

    fn batch(value: &str) -> Batch {
        let mut b = Batch::new();
        b.push(None, value.as_bytes(), 0);
        b
    }

    fn parts(committable: &serde_json::Value) -> Vec<String> {
        committable["parts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                let p = Path::new(p.as_str().unwrap());
                p.file_name().unwrap().to_string_lossy().into_owned()
            })
            .collect()
    }

    /// The files beside the sink's base path, sorted.
    fn files(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn an_aborted_checkpoints_part_is_in_every_later_committable_until_committed() {
        let dir = tempfile::tempdir().unwrap();
        let roots = AllowedRoots::new([dir.path()]).unwrap();
        let base = dir.path().join("out.txt");
        let mut sink =
            TransactionalFileSink::open(&roots, &base, 0, OutputFormat::Value, None).unwrap();
        sink.write(&batch("a")).unwrap();
        let first = sink.pre_commit(1).unwrap().unwrap();
        assert_eq!(parts(&first), ["out.txt.0-0"]);
        // Checkpoint 1 is aborted: nothing commits it. Checkpoint 2's
        // committable carries its part too.
        sink.write(&batch("b")).unwrap();
        let second = sink.pre_commit(2).unwrap().unwrap();
        assert_eq!(parts(&second), ["out.txt.0-0", "out.txt.0-1"]);
        commit(&second, &roots).unwrap();
        assert_eq!(files(dir.path()), ["out.txt.0-0", "out.txt.0-1"]);
        // Committed parts leave the list.
        sink.write(&batch("c")).unwrap();
        let third = sink.pre_commit(3).unwrap().unwrap();
        assert_eq!(parts(&third), ["out.txt.0-2"]);
    }

    #[test]
    fn a_restore_commits_the_parts_of_aborted_checkpoints_before_it() {
        let dir = tempfile::tempdir().unwrap();
        let roots = AllowedRoots::new([dir.path()]).unwrap();
        let base = dir.path().join("out.txt");
        let mut sink =
            TransactionalFileSink::open(&roots, &base, 0, OutputFormat::Value, None).unwrap();
        sink.write(&batch("a")).unwrap();
        sink.pre_commit(1).unwrap(); // aborted
        sink.write(&batch("b")).unwrap();
        let second = sink.pre_commit(2).unwrap().unwrap();
        // Checkpoint 2 completed, but the TaskManager was lost before it
        // committed: the restore from 2 commits both parts.
        drop(sink);
        TransactionalFileSink::open(&roots, &base, 0, OutputFormat::Value, Some(&second)).unwrap();
        assert_eq!(files(dir.path()), ["out.txt.0-0", "out.txt.0-1"]);
        let read = |n: &str| std::fs::read_to_string(dir.path().join(n)).unwrap();
        assert_eq!(
            (read("out.txt.0-0"), read("out.txt.0-1")),
            ("a\n".into(), "b\n".into())
        );
    }
}
