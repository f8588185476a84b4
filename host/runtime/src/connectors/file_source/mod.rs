//! The file source: a file, a folder or a glob of files, read as lines,
//! JSON lines or CSV, plain or compressed, split over parallel subtasks,
//! optionally watching for new files.
//!
//! # Key types
//!
//! - [`FileSource`]: one subtask's reader. [`FileSourceConfig`] says what to
//!   read and how.
//! - [`FileFormat`]: how bytes become records.
//! - [`enumerate`]: the expansion of `path` under the [`AllowedRoots`] and
//!   the cutting of files into [`Split`]s.
//!
//! # Splits and who reads them
//!
//! An uncompressed file of lines is cut into byte ranges of `split_bytes`
//! (the last one open-ended); a compressed file, a CSV file (a quoted field
//! may hold a line break) and a followed file are one split each. A split
//! `[start, end)` reads every line that *starts* inside it (as Hadoop's
//! `LineRecordReader`): it skips to the first line start at or after
//! `start` and reads whole lines while they start before `end`, so every
//! line is read by exactly one split. Every subtask expands `path` itself
//! and keeps the splits it owns:
//!
//! - reading what is there (not continuous): split `i` of all splits in
//!   path order goes to subtask `i % parallelism` (balanced; it relies on
//!   every subtask seeing the same files, so files must not change while
//!   the job starts);
//! - continuous (`monitor_interval_ms`): split `k` of a file goes to
//!   subtask `(fnv1a(path) + k) % parallelism`, which does not depend on
//!   which other files a subtask has seen, so subtasks that look at
//!   different moments still agree.
//!
//! # Positions (checkpoints)
//!
//! [`Source::position`] records the files known (path and size: a restore
//! reads the same splits, and a continuous source never reads a file
//! twice) and every split this subtask still has to finish, with the
//! offset of the next line to read in the decoded bytes (and its line
//! number when known). A restore continues from there: no line lost, none
//! read twice. Assignment depends on the parallelism, so a position is only
//! valid at the parallelism that wrote it (savepoints refuse a source whose
//! parallelism changed). The position of the single-file source before
//! splits (`{"offset", "line"}`) is still accepted.
//!
//! # Must not
//!
//! Open a file other than through the roots: every file found and every
//! split opened is checked again ([`AllowedRoots::open_read`]).

mod decode;
pub mod enumerate;

use std::collections::{HashSet, VecDeque};
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use self::decode::{Compression, Input};
use self::enumerate::{FoundFile, PathKind, Split};
use super::{AllowedRoots, ConnectorError, Source, Throttle, json_key_bytes, now_millis};
use crate::record::Batch;

pub use crate::job::DEFAULT_SPLIT_BYTES;
pub use crate::job::config::DEFAULT_MAX_RECORD_BYTES;

/// How a file source turns its input into records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileFormat {
    /// One record per line; the value is the line without its line ending;
    /// no key; the timestamp is the time the line was read (ingestion time).
    Lines,
    /// One JSON object per line; the value is the line as is. Optionally the
    /// key is taken from a top-level field, and the event time (a number of
    /// milliseconds) from another.
    JsonLines {
        /// Field holding the record key (string, or any JSON value as text).
        key_field: Option<String>,
        /// Field holding the event time in ms.
        timestamp_field: Option<String>,
        /// Field whose value becomes the record's value (a string's
        /// content, any other JSON value as text) instead of the line.
        value_field: Option<String>,
    },
    /// Comma-separated values, one record per row.
    Csv(CsvFormat),
}

/// [`FileFormat::Csv`]'s settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CsvFormat {
    /// The first row names the columns (and is not a record).
    pub header: bool,
    /// The field separator.
    pub delimiter: u8,
    /// Column whose text becomes the record key: a header name, or a
    /// 0-based column number without a header.
    pub key_field: Option<String>,
    /// Column holding the event time in ms.
    pub timestamp_field: Option<String>,
    /// Column whose text becomes the value; default: the row as a JSON
    /// object of strings by column name (an array without a header).
    pub value_field: Option<String>,
}

impl FileFormat {
    fn splittable(&self) -> bool {
        !matches!(self, FileFormat::Csv(_))
    }
}

/// What a file source reads and how.
#[derive(Debug, Clone)]
pub struct FileSourceConfig {
    /// A file, a folder or a glob pattern.
    pub path: PathBuf,
    /// How records are read.
    pub format: FileFormat,
    /// Longest line (CSV: row) accepted, without its ending.
    pub max_record_bytes: u64,
    /// Size of the byte ranges of an uncompressed file of lines.
    pub split_bytes: u64,
    /// Continuous mode: look for new files this often; never end.
    pub monitor_interval: Option<Duration>,
    /// At the end of the (single, plain) file, wait for more lines.
    pub follow: bool,
}

impl FileSourceConfig {
    /// `path` read as `format` with every default.
    pub fn new(path: impl Into<PathBuf>, format: FileFormat) -> FileSourceConfig {
        FileSourceConfig {
            path: path.into(),
            format,
            max_record_bytes: DEFAULT_MAX_RECORD_BYTES,
            split_bytes: DEFAULT_SPLIT_BYTES,
            monitor_interval: None,
            follow: false,
        }
    }
}

/// How long a file source with nothing to read right now (a followed file
/// at its end, a continuous source between looks) waits before it looks
/// again; it returns an empty batch meanwhile, so the subtask can take
/// checkpoints, notice a stop and turn idle.
pub const FOLLOW_POLL: Duration = Duration::from_millis(20);

/// A split this subtask has still to read, and how far it got.
#[derive(Debug, Clone)]
struct Pending {
    split: Split,
    /// Decoded offset of the next line to read; `None`: not started (the
    /// first line starts at or after `split.start`).
    at: Option<u64>,
    /// Lines before `at`, when known.
    line: Option<u64>,
}

/// What the split being read holds.
enum Body {
    Lines(Input),
    Csv(Box<CsvRows>),
}

/// The open split at the front of [`FileSource::pending`].
struct SplitReader {
    body: Body,
    /// Decoded offset of the next line (CSV: row) to read.
    offset: u64,
    /// Lines before `offset`, if known.
    line: Option<u64>,
}

/// One subtask of a file source. See the module docs.
pub struct FileSource {
    roots: AllowedRoots,
    config: FileSourceConfig,
    kind: PathKind,
    subtask: u32,
    parallelism: u32,
    /// Every file known, in the order their splits were planned.
    files: Vec<FoundFile>,
    known: HashSet<PathBuf>,
    /// This subtask's splits not yet finished, in reading order.
    pending: VecDeque<Pending>,
    /// Reading `pending[0]`.
    reader: Option<SplitReader>,
    next_scan: Option<Instant>,
    throttle: Option<Throttle>,
    line: Vec<u8>,
    done: bool,
    /// Splits planned when the source was created: all, and this subtask's.
    planned_total: u64,
    planned_own: u64,
}

impl std::fmt::Debug for FileSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileSource")
            .field("path", &self.config.path)
            .field("subtask", &self.subtask)
            .field("parallelism", &self.parallelism)
            .field("pending", &self.pending.len())
            .finish()
    }
}

/// Checks a file source's `path` before the job starts: confinement of the
/// folder or pattern and of every file it matches now; a folder or pattern
/// that matches nothing is an error unless `continuous`. A single file that
/// does not exist passes (it fails when the source opens it).
pub fn check_path(
    roots: &AllowedRoots,
    path: &Path,
    continuous: bool,
) -> Result<(), ConnectorError> {
    match enumerate::expand(roots, path) {
        Ok((kind, files)) if files.is_empty() && kind != PathKind::File && !continuous => {
            Err(no_files(path))
        }
        Ok(_) => Ok(()),
        Err(ConnectorError::Confined(e))
            if matches!(&e.reason, super::confine::Reason::Io(io)
                if io.kind() == std::io::ErrorKind::NotFound) =>
        {
            Ok(())
        }
        Err(e) => Err(e),
    }
}

fn no_files(path: &Path) -> ConnectorError {
    ConnectorError::Io {
        path: path.to_path_buf(),
        source: std::io::Error::new(
            std::io::ErrorKind::NotFound,
            "matches no files (a file source without monitor_interval_ms reads the files there when the job starts)",
        ),
    }
}

impl FileSource {
    /// Subtask 0 of 1 reading `path` (a file, folder or glob), which
    /// `roots` must allow. Messages name files as the expansion names
    /// them.
    pub fn open(
        roots: &AllowedRoots,
        path: &Path,
        format: FileFormat,
    ) -> Result<FileSource, ConnectorError> {
        FileSource::new(roots, FileSourceConfig::new(path, format), 0, 1)
    }

    /// Subtask `subtask` of `parallelism`: expands the path now (a folder
    /// or pattern matching nothing is an error unless continuous) and
    /// plans this subtask's splits.
    pub fn new(
        roots: &AllowedRoots,
        config: FileSourceConfig,
        subtask: u32,
        parallelism: u32,
    ) -> Result<FileSource, ConnectorError> {
        let (kind, files) = enumerate::expand(roots, &config.path)?;
        if kind != PathKind::File && files.is_empty() && config.monitor_interval.is_none() {
            return Err(no_files(&config.path));
        }
        let mut source = FileSource {
            roots: roots.clone(),
            kind,
            subtask,
            parallelism: parallelism.max(1),
            files: Vec::new(),
            known: HashSet::new(),
            pending: VecDeque::new(),
            reader: None,
            next_scan: config.monitor_interval.map(|i| Instant::now() + i),
            throttle: None,
            line: Vec::new(),
            done: false,
            planned_total: 0,
            planned_own: 0,
            config,
        };
        source.plan(files);
        source.planned_own = source.pending.len() as u64;
        source.planned_total = source.files.iter().map(|f| source.split_count(f)).sum();
        Ok(source)
    }

    /// With `follow`, the end of the file is not the end of input: lines
    /// appended later are read as they come (as `tail -f`), and a last
    /// line without its line ending waits for it. The source never ends.
    /// A followed file is one split.
    pub fn with_follow(mut self, follow: bool) -> FileSource {
        self.config.follow = follow;
        let files = std::mem::take(&mut self.files);
        self.known.clear();
        self.pending.clear();
        self.plan(files);
        self.planned_own = self.pending.len() as u64;
        self.planned_total = self.files.iter().map(|f| self.split_count(f)).sum();
        self
    }

    /// Reads at most `lines_per_second` (this subtask).
    pub fn with_rate(mut self, lines_per_second: f64) -> FileSource {
        self.throttle = Some(Throttle::new(lines_per_second));
        self
    }

    /// Reads at most `lines_per_second` over all subtasks: this subtask's
    /// share is its part of the splits planned at the start (a file of one
    /// split keeps the whole rate); in continuous mode, an even share.
    pub fn with_total_rate(self, lines_per_second: f64) -> FileSource {
        let share = if self.config.monitor_interval.is_some() {
            1.0 / f64::from(self.parallelism)
        } else if self.planned_total == 0 {
            1.0
        } else {
            self.planned_own as f64 / self.planned_total as f64
        };
        if share == 0.0 {
            return self;
        }
        self.with_rate(lines_per_second * share)
    }

    /// Fails on a line longer than `bytes` (without its line ending)
    /// instead of buffering it; default [`DEFAULT_MAX_RECORD_BYTES`].
    pub fn with_max_record_bytes(mut self, bytes: u64) -> FileSource {
        self.config.max_record_bytes = bytes;
        self
    }

    fn splittable(&self, path: &Path) -> bool {
        self.config.format.splittable()
            && !self.config.follow
            && Compression::of(path) == Compression::None
    }

    /// Adds `files` (not known before) and the splits of them this subtask
    /// owns.
    fn plan(&mut self, files: Vec<FoundFile>) {
        let p = u64::from(self.parallelism);
        let mut index = self.files.iter().map(|f| self.split_count(f)).sum::<u64>();
        for file in files {
            if !self.known.insert(file.path.clone()) {
                continue;
            }
            let splits = enumerate::splits_of(
                &file.path,
                file.size,
                self.config.split_bytes,
                self.splittable(&file.path),
            );
            for split in splits {
                let owner = if self.config.monitor_interval.is_some() {
                    enumerate::path_hash(&split.path).wrapping_add(split.index) % p
                } else {
                    index % p
                };
                index += 1;
                if owner == u64::from(self.subtask) {
                    self.pending.push_back(Pending {
                        split,
                        at: None,
                        line: None,
                    });
                }
            }
            self.files.push(file);
        }
    }

    fn split_count(&self, f: &FoundFile) -> u64 {
        enumerate::splits_of(
            &f.path,
            f.size,
            self.config.split_bytes,
            self.splittable(&f.path),
        )
        .len() as u64
    }

    fn io(path: &Path, source: std::io::Error) -> ConnectorError {
        ConnectorError::Io {
            path: path.to_path_buf(),
            source,
        }
    }

    /// Opens `pending[0]` where it stands.
    fn open_front(&mut self) -> Result<(), ConnectorError> {
        let Some(front) = self.pending.front() else {
            return Ok(());
        };
        let path = front.split.path.clone();
        let compression = Compression::of(&path);
        let open = |roots: &AllowedRoots| -> Result<Input, ConnectorError> {
            let file = roots.open_read(&path)?;
            Input::new(file, compression).map_err(|e| Self::io(&path, e))
        };
        let mut input = open(&self.roots)?;
        let (offset, line) = match (front.at, front.split.start) {
            (Some(at), _) => {
                input.skip_to(0, at).map_err(|e| Self::io(&path, e))?;
                (at, front.line)
            }
            (None, 0) => (0, Some(0)),
            (None, start) => {
                // Skip to the first line start at or after `start`: the
                // line around `start` belongs to the split before.
                input
                    .skip_to(0, start - 1)
                    .map_err(|e| Self::io(&path, e))?;
                let skipped = skip_line(&mut input).map_err(|e| Self::io(&path, e))?;
                (start - 1 + skipped, None)
            }
        };
        let body = match &self.config.format {
            FileFormat::Csv(format) => {
                let header = if format.header {
                    if offset == 0 {
                        None
                    } else {
                        // The header, from a second reader at the start.
                        let mut rows = CsvRows::new(open(&self.roots)?, format, 0, 0);
                        Some(rows.read_header(&path, format)?)
                    }
                } else {
                    Some(Vec::new())
                };
                let mut rows = CsvRows::new(input, format, offset, line.unwrap_or(0));
                match header {
                    None => {
                        let names = rows.read_header(&path, format)?;
                        rows.resolve(&path, format, &names)?;
                    }
                    Some(names) => rows.resolve(&path, format, &names)?,
                }
                Body::Csv(Box::new(rows))
            }
            _ => Body::Lines(input),
        };
        self.reader = Some(SplitReader { body, offset, line });
        Ok(())
    }

    /// Reads the next line of the open split, with its ending, into
    /// `self.line`; returns the bytes consumed (0 at the end of the file).
    /// A line longer than the cap is an error, found before it is
    /// buffered whole.
    fn read_line(&mut self) -> Result<usize, ConnectorError> {
        self.line.clear();
        let path = &self.pending[0].split.path;
        let reader = self.reader.as_mut().expect("an open split");
        let Body::Lines(input) = &mut reader.body else {
            unreachable!("lines are read from a split of lines")
        };
        let mut consumed = 0;
        loop {
            let buf = match input.fill_buf() {
                Ok(buf) => buf,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(source) => return Err(Self::io(path, source)),
            };
            if buf.is_empty() {
                return Ok(consumed);
            }
            let (chunk, complete) = match memchr::memchr(b'\n', buf) {
                Some(i) => (&buf[..=i], true),
                None => (buf, false),
            };
            let content = (self.line.len() + chunk.len() - usize::from(complete)) as u64;
            if content > self.config.max_record_bytes {
                let offset = reader.offset;
                let line = reader.line;
                return Err(ConnectorError::RecordTooLong {
                    path: path.clone(),
                    line: self.line_number(path, offset, line),
                    limit: self.config.max_record_bytes,
                });
            }
            self.line.extend_from_slice(chunk);
            let n = chunk.len();
            input.consume(n);
            consumed += n;
            if complete {
                return Ok(consumed);
            }
        }
    }

    /// The 1-based number of the line starting at `offset` of `path`:
    /// `known` lines before it, else counted from the file's start (only
    /// on the way to an error: a split that starts mid-file does not count
    /// the lines before it).
    fn line_number(&self, path: &Path, offset: u64, known: Option<u64>) -> u64 {
        if let Some(n) = known {
            return n + 1;
        }
        let count = || -> std::io::Result<u64> {
            let file = self.roots.open_read(path).map_err(std::io::Error::other)?;
            let mut input = Input::new(file, Compression::of(path))?;
            let mut left = offset;
            let mut lines = 0;
            while left > 0 {
                let buf = input.fill_buf()?;
                if buf.is_empty() {
                    break;
                }
                let n = buf.len().min(left as usize);
                lines += memchr::memchr_iter(b'\n', &buf[..n]).count() as u64;
                input.consume(n);
                left -= n as u64;
            }
            Ok(lines)
        };
        count().map_or(0, |n| n + 1)
    }

    /// Reads records of the open split into `batch` until it holds `max`.
    /// Returns whether the split is finished.
    fn read_split(
        &mut self,
        batch: &mut Batch,
        max: usize,
        now: i64,
    ) -> Result<Step, ConnectorError> {
        if matches!(self.reader.as_ref().map(|r| &r.body), Some(Body::Csv(_))) {
            return self.read_csv(batch, max, now);
        }
        let end = self.pending[0].split.end;
        while batch.len() < max {
            let reader = self.reader.as_ref().expect("an open split");
            if end.is_some_and(|end| reader.offset >= end) {
                return Ok(Step::Finished);
            }
            let n = self.read_line()?;
            if self.config.follow && !self.line.ends_with(b"\n") {
                // The end of the file for now: give back a partial line
                // (it is read again whole once its ending is written).
                let path = self.pending[0].split.path.clone();
                if n > 0
                    && let Some(SplitReader {
                        body: Body::Lines(input),
                        ..
                    }) = &mut self.reader
                {
                    input.give_back(n as u64).map_err(|e| Self::io(&path, e))?;
                }
                return Ok(Step::Wait);
            }
            if n == 0 {
                return Ok(Step::Finished);
            }
            let reader = self.reader.as_mut().expect("an open split");
            let start = reader.offset;
            let known = reader.line;
            reader.offset += n as u64;
            reader.line = reader.line.map(|l| l + 1);
            let mut line = &self.line[..];
            if let Some(l) = line.strip_suffix(b"\n") {
                line = l;
            }
            if let Some(l) = line.strip_suffix(b"\r") {
                line = l;
            }
            match &self.config.format {
                FileFormat::Lines => batch.push(None, line, now),
                FileFormat::JsonLines {
                    key_field,
                    timestamp_field,
                    value_field,
                } => {
                    if line.iter().all(u8::is_ascii_whitespace) {
                        continue;
                    }
                    let path = &self.pending[0].split.path;
                    let bad = |message: String| ConnectorError::BadRecord {
                        path: path.clone(),
                        line: self.line_number(path, start, known),
                        message,
                    };
                    let [key, ts, value] = crate::json_fields::pick(
                        line,
                        [
                            key_field.as_deref(),
                            timestamp_field.as_deref(),
                            value_field.as_deref(),
                        ],
                    )
                    .map_err(|e| bad(format!("invalid JSON: {e}")))?;
                    let key = match key_field {
                        Some(f) => Some(json_key_bytes(
                            &key.ok_or_else(|| bad(format!("missing key field `{f}`")))?,
                        )),
                        None => None,
                    };
                    let ts = match timestamp_field {
                        Some(f) => ts.as_ref().and_then(|t| t.as_i64()).ok_or_else(|| {
                            bad(format!(
                                "timestamp field `{f}` missing or not an integer (ms)"
                            ))
                        })?,
                        None => now,
                    };
                    match value_field {
                        Some(f) => {
                            let value = json_key_bytes(
                                &value.ok_or_else(|| bad(format!("missing value field `{f}`")))?,
                            );
                            batch.push(key.as_deref(), &value, ts);
                        }
                        None => batch.push(key.as_deref(), line, ts),
                    }
                }
                FileFormat::Csv(_) => unreachable!("CSV is read by read_csv"),
            }
        }
        Ok(Step::More)
    }

    fn read_csv(
        &mut self,
        batch: &mut Batch,
        max: usize,
        now: i64,
    ) -> Result<Step, ConnectorError> {
        let path = self.pending[0].split.path.clone();
        let limit = self.config.max_record_bytes;
        let reader = self.reader.as_mut().expect("an open split");
        let Body::Csv(rows) = &mut reader.body else {
            unreachable!("read_csv reads CSV")
        };
        while batch.len() < max {
            match rows.next(&path, limit, batch, now)? {
                true => {}
                false => return Ok(Step::Finished),
            }
            let (offset, line) = rows.position();
            reader.offset = offset;
            reader.line = Some(line);
        }
        Ok(Step::More)
    }

    /// Looks for new files (continuous mode) when it is time.
    fn scan(&mut self) -> Result<(), ConnectorError> {
        let (Some(interval), Some(due)) = (self.config.monitor_interval, self.next_scan) else {
            return Ok(());
        };
        if Instant::now() < due {
            return Ok(());
        }
        self.next_scan = Some(Instant::now() + interval);
        let (_, found) = enumerate::expand(&self.roots, &self.config.path)?;
        let new: Vec<FoundFile> = found
            .into_iter()
            .filter(|f| !self.known.contains(&f.path))
            .collect();
        if !new.is_empty() {
            tracing::debug!(
                files = new.len(),
                path = %self.config.path.display(),
                "file source found new files"
            );
            self.plan(new);
        }
        Ok(())
    }
}

/// What reading a split came to.
enum Step {
    /// The batch is full; the split has more.
    More,
    /// The split is read.
    Finished,
    /// A followed file has nothing more for now.
    Wait,
}

/// Consumes through the next `\n` (not buffering the line); returns the
/// bytes consumed.
fn skip_line(input: &mut Input) -> std::io::Result<u64> {
    let mut consumed = 0u64;
    loop {
        let buf = input.fill_buf()?;
        if buf.is_empty() {
            return Ok(consumed);
        }
        match memchr::memchr(b'\n', buf) {
            Some(i) => {
                input.consume(i + 1);
                return Ok(consumed + i as u64 + 1);
            }
            None => {
                let n = buf.len();
                input.consume(n);
                consumed += n as u64;
            }
        }
    }
}

impl Source for FileSource {
    fn position(&self) -> serde_json::Value {
        let files: Vec<serde_json::Value> = self
            .files
            .iter()
            .map(|f| serde_json::json!({ "path": f.path, "size": f.size }))
            .collect();
        let pending: Vec<serde_json::Value> = self
            .pending
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let (at, line) = match (&self.reader, i) {
                    (Some(r), 0) => (Some(r.offset), r.line),
                    _ => (p.at, p.line),
                };
                serde_json::json!({
                    "path": p.split.path,
                    "split": p.split.index,
                    "start": p.split.start,
                    "end": p.split.end,
                    "at": at,
                    "line": line,
                })
            })
            .collect();
        serde_json::json!({ "files": files, "pending": pending })
    }

    fn seek(&mut self, position: &serde_json::Value) -> Result<(), ConnectorError> {
        let bad = || {
            ConnectorError::Position(format!(
                "{}: not a file source position: {position}",
                self.config.path.display()
            ))
        };
        let u64_of = |v: &serde_json::Value, k: &str| v.get(k).and_then(serde_json::Value::as_u64);
        let (files, pending) = if let (Some(offset), Some(line)) =
            (u64_of(position, "offset"), u64_of(position, "line"))
        {
            // The single-file source's position, before splits.
            if self.kind != PathKind::File {
                return Err(bad());
            }
            let path = self.config.path.clone();
            let size = self
                .files
                .iter()
                .find(|f| f.path == path)
                .map_or(0, |f| f.size);
            let split = Split {
                path: path.clone(),
                index: 0,
                start: 0,
                end: None,
            };
            let pending = if self.subtask == 0 {
                vec![Pending {
                    split,
                    at: Some(offset),
                    line: Some(line),
                }]
            } else {
                Vec::new()
            };
            (vec![FoundFile { path, size }], pending)
        } else {
            let files = position
                .get("files")
                .and_then(serde_json::Value::as_array)
                .ok_or_else(bad)?
                .iter()
                .map(|f| {
                    Some(FoundFile {
                        path: PathBuf::from(f.get("path")?.as_str()?),
                        size: u64_of(f, "size")?,
                    })
                })
                .collect::<Option<Vec<_>>>()
                .ok_or_else(bad)?;
            let pending = position
                .get("pending")
                .and_then(serde_json::Value::as_array)
                .ok_or_else(bad)?
                .iter()
                .map(|p| {
                    Some(Pending {
                        split: Split {
                            path: PathBuf::from(p.get("path")?.as_str()?),
                            index: u64_of(p, "split")?,
                            start: u64_of(p, "start")?,
                            end: u64_of(p, "end"),
                        },
                        at: u64_of(p, "at"),
                        line: u64_of(p, "line"),
                    })
                })
                .collect::<Option<Vec<_>>>()
                .ok_or_else(bad)?;
            (files, pending)
        };
        self.known = files.iter().map(|f| f.path.clone()).collect();
        self.files = files;
        self.pending = pending.into();
        self.reader = None;
        self.done = false;
        if let Some(t) = &mut self.throttle {
            t.restart();
        }
        Ok(())
    }

    fn next_batch(&mut self, max: usize) -> Result<Option<Batch>, ConnectorError> {
        if self.done {
            return Ok(None);
        }
        let mut max = max;
        if let Some(t) = &mut self.throttle {
            max = t.batch_limit(max);
            t.wait();
            t.released(max);
        }
        let now = now_millis();
        let mut batch = Batch::with_capacity(max, max * 64);
        let mut wait = false;
        while batch.len() < max {
            if self.reader.is_none() {
                if self.pending.is_empty() {
                    self.scan()?;
                }
                if self.pending.is_empty() {
                    if self.config.monitor_interval.is_some() {
                        wait = true;
                    } else {
                        self.done = true;
                    }
                    break;
                }
                self.open_front()?;
            }
            match self.read_split(&mut batch, max, now)? {
                Step::More => {}
                Step::Finished => {
                    self.reader = None;
                    self.pending.pop_front();
                }
                Step::Wait => {
                    wait = true;
                    break;
                }
            }
        }
        if batch.is_empty() {
            if self.done {
                return Ok(None);
            }
            if wait {
                std::thread::sleep(FOLLOW_POLL);
            }
        }
        Ok(Some(batch))
    }
}

/// The rows of a CSV split (a whole file) and where its columns are.
struct CsvRows {
    reader: csv::Reader<Input>,
    record: csv::ByteRecord,
    /// Decoded offset and lines before it where `reader` started.
    base: u64,
    base_line: u64,
    names: Option<Vec<String>>,
    key: Option<usize>,
    timestamp: Option<usize>,
    value: Option<usize>,
    fields: (Option<String>, Option<String>, Option<String>),
}

impl CsvRows {
    fn new(input: Input, format: &CsvFormat, base: u64, base_line: u64) -> CsvRows {
        let reader = csv::ReaderBuilder::new()
            .has_headers(false)
            .delimiter(format.delimiter)
            .from_reader(input);
        CsvRows {
            reader,
            record: csv::ByteRecord::new(),
            base,
            base_line,
            names: None,
            key: None,
            timestamp: None,
            value: None,
            fields: (
                format.key_field.clone(),
                format.timestamp_field.clone(),
                format.value_field.clone(),
            ),
        }
    }

    fn error(&self, path: &Path, e: csv::Error) -> ConnectorError {
        let line = e.position().map_or(0, |p| self.base_line + p.line());
        if let csv::ErrorKind::Io(_) = e.kind() {
            let csv::ErrorKind::Io(io) = e.into_kind() else {
                unreachable!()
            };
            return FileSource::io(path, io);
        }
        ConnectorError::BadRecord {
            path: path.to_path_buf(),
            line,
            message: e.to_string(),
        }
    }

    /// Reads the header row: the column names.
    fn read_header(
        &mut self,
        path: &Path,
        format: &CsvFormat,
    ) -> Result<Vec<String>, ConnectorError> {
        let _ = format;
        match self.reader.read_byte_record(&mut self.record) {
            Ok(true) => Ok(self
                .record
                .iter()
                .map(|f| String::from_utf8_lossy(f).into_owned())
                .collect()),
            Ok(false) => Ok(Vec::new()),
            Err(e) => Err(self.error(path, e)),
        }
    }

    /// Finds the key, timestamp and value columns among `names` (empty
    /// without a header: the fields are column numbers).
    fn resolve(
        &mut self,
        path: &Path,
        format: &CsvFormat,
        names: &[String],
    ) -> Result<(), ConnectorError> {
        let find = |field: &Option<String>| -> Result<Option<usize>, ConnectorError> {
            let Some(field) = field else { return Ok(None) };
            if !format.header {
                return field
                    .parse::<usize>()
                    .map(Some)
                    .map_err(|_| ConnectorError::BadRecord {
                        path: path.to_path_buf(),
                        line: 1,
                        message: format!(
                            "`{field}` is not a column number (the file has no header)"
                        ),
                    });
            }
            match names.iter().position(|n| n == field) {
                Some(i) => Ok(Some(i)),
                None if names.is_empty() => Ok(None),
                None => Err(ConnectorError::BadRecord {
                    path: path.to_path_buf(),
                    line: 1,
                    message: format!("no column `{field}` in the header ({})", names.join(", ")),
                }),
            }
        };
        self.key = find(&format.key_field)?;
        self.timestamp = find(&format.timestamp_field)?;
        self.value = find(&format.value_field)?;
        if format.header {
            self.names = Some(names.to_vec());
        }
        Ok(())
    }

    /// Decoded offset of the next row and the lines before it.
    fn position(&self) -> (u64, u64) {
        let p = self.reader.position();
        (self.base + p.byte(), self.base_line + p.line() - 1)
    }

    /// Reads one row into `batch`; `false` at the end.
    fn next(
        &mut self,
        path: &Path,
        limit: u64,
        batch: &mut Batch,
        now: i64,
    ) -> Result<bool, ConnectorError> {
        match self.reader.read_byte_record(&mut self.record) {
            Ok(true) => {}
            Ok(false) => return Ok(false),
            Err(e) => return Err(self.error(path, e)),
        }
        let line = self.base_line + self.record.position().map_or(1, |p| p.line());
        let bad = |message: String| ConnectorError::BadRecord {
            path: path.to_path_buf(),
            line,
            message,
        };
        if self.record.as_slice().len() as u64 > limit {
            return Err(ConnectorError::RecordTooLong {
                path: path.to_path_buf(),
                line,
                limit,
            });
        }
        let column = |i: Option<usize>,
                      what: &str,
                      name: &Option<String>|
         -> Result<Option<&[u8]>, ConnectorError> {
            match i {
                None => Ok(None),
                Some(i) => self.record.get(i).map(Some).ok_or_else(|| {
                    bad(format!(
                        "the row has {} fields, no {what} column `{}`",
                        self.record.len(),
                        name.as_deref().unwrap_or_default()
                    ))
                }),
            }
        };
        let key = column(self.key, "key", &self.fields.0)?;
        let ts = match column(self.timestamp, "timestamp", &self.fields.1)? {
            Some(text) => std::str::from_utf8(text)
                .ok()
                .and_then(|t| t.trim().parse::<i64>().ok())
                .ok_or_else(|| {
                    bad(format!(
                        "timestamp column `{}` is not an integer (ms): {:?}",
                        self.fields.1.as_deref().unwrap_or_default(),
                        String::from_utf8_lossy(text)
                    ))
                })?,
            None => now,
        };
        match column(self.value, "value", &self.fields.2)? {
            Some(value) => batch.push(key, value, ts),
            None => {
                let text =
                    |f: &[u8]| serde_json::Value::String(String::from_utf8_lossy(f).into_owned());
                let value = match &self.names {
                    Some(names) => {
                        let mut object = serde_json::Map::new();
                        for (i, f) in self.record.iter().enumerate() {
                            let name = names.get(i).cloned().unwrap_or_else(|| i.to_string());
                            object.insert(name, text(f));
                        }
                        serde_json::Value::Object(object)
                    }
                    None => serde_json::Value::Array(self.record.iter().map(text).collect()),
                };
                let bytes = serde_json::to_vec(&value).expect("JSON of strings serializes");
                batch.push(key, &bytes, ts);
            }
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests;
