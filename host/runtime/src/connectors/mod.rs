//! Sources and sinks: where records enter and leave a job.
//!
//! # Key types
//!
//! - [`Source`]: produces batches until it is exhausted (`Ok(None)`).
//!   [`FileSource`] reads lines or JSON lines; [`GeneratorSource`] makes a
//!   deterministic, seeded stream (bounded or not, optionally rate-limited).
//! - [`Sink`]: consumes batches. [`FileSink`], [`StdoutSink`] and
//!   [`BlackholeSink`].
//!
//! - [`nats`]: a NATS JetStream source and sink (exactly-once through the
//!   stream's message de-duplication).
//! - [`AllowedRoots`] (in [`confine`]): the directories file connectors may
//!   use. Every file a source reads or a sink writes is opened through it.
//!
//! Connectors are plain blocking code driven by a subtask's thread; they know
//! nothing of channels, Wasm or job graphs. A bad input record is an error
//! that names the file and line, never a panic; so is a line longer than the
//! source's cap ([`FileSource::with_max_record_bytes`]): memory per record
//! is bounded.

pub mod confine;
mod generator;
pub mod nats;
mod sink;

pub use confine::{AllowedRoots, ConfineError};
pub use generator::{GeneratorConfig, GeneratorKind, GeneratorSource};
pub use sink::{BlackholeSink, FileSink, OutputFormat, StdoutSink, TransactionalFileSink};

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use crate::record::Batch;

/// Failure of a source or sink.
#[derive(Debug, thiserror::Error)]
pub enum ConnectorError {
    /// Reading or writing a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// An input record could not be parsed.
    #[error("{path}:{line}: {message}")]
    BadRecord {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: u64,
        /// What is wrong.
        message: String,
    },
    /// A line is longer than the source accepts.
    #[error(
        "{path}:{line}: line longer than {limit} bytes; raise the source's max_record_bytes if such lines are expected"
    )]
    RecordTooLong {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: u64,
        /// The cap, in bytes (without the line ending).
        limit: u64,
    },
    /// A path was refused by the allowed roots, or could not be opened.
    #[error(transparent)]
    Confined(#[from] ConfineError),
    /// Writing to standard output failed.
    #[error("stdout: {0}")]
    Stdout(std::io::Error),
    /// A checkpointed position or committable cannot be used.
    #[error("cannot restore: {0}")]
    Position(String),
    /// A NATS server could not be reached or refused a request; the
    /// message names the vertex and the server ([`nats`]).
    #[error("{0}")]
    Nats(String),
}

/// Paces a source to at most `rate` records per second: batches of about
/// 10 ms worth of records, each released when the records before it are due.
#[derive(Debug, Clone)]
pub struct Throttle {
    rate: f64,
    started: std::time::Instant,
    released: u64,
}

impl Throttle {
    /// A throttle starting now.
    pub fn new(records_per_second: f64) -> Throttle {
        Throttle {
            rate: records_per_second,
            started: std::time::Instant::now(),
            released: 0,
        }
    }

    /// The largest batch to produce next (at most `max`).
    pub fn batch_limit(&self, max: usize) -> usize {
        max.min(((self.rate / 100.0) as usize).max(1))
    }

    /// Blocks until the records released so far are due.
    pub fn wait(&self) {
        let due = std::time::Duration::from_secs_f64(self.released as f64 / self.rate);
        let elapsed = self.started.elapsed();
        if due > elapsed {
            std::thread::sleep(due - elapsed);
        }
    }

    /// Counts `n` more records as released.
    pub fn released(&mut self, n: usize) {
        self.released += n as u64;
    }

    /// Starts over from now (after a source seeks: the rate applies from there).
    pub fn restart(&mut self) {
        self.started = std::time::Instant::now();
        self.released = 0;
    }
}

/// A source of records.
pub trait Source: Send {
    /// The next batch of at most `max` records, or `None` at the end of input.
    fn next_batch(&mut self, max: usize) -> Result<Option<Batch>, ConnectorError>;

    /// Where the source stands: enough to resume right after the last
    /// record returned (recorded in checkpoints).
    fn position(&self) -> serde_json::Value {
        serde_json::Value::Null
    }

    /// Resumes after `position` (an earlier [`Source::position`]).
    fn seek(&mut self, position: &serde_json::Value) -> Result<(), ConnectorError> {
        match position {
            serde_json::Value::Null => Ok(()),
            other => Err(ConnectorError::Position(format!(
                "this source cannot resume from {other}"
            ))),
        }
    }
}

/// A sink for records.
pub trait Sink: Send {
    /// Writes a batch.
    fn write(&mut self, batch: &Batch) -> Result<(), ConnectorError>;
    /// Flushes everything written; called once at the end of input.
    fn finish(&mut self) -> Result<(), ConnectorError>;

    /// Two-phase commit, phase one, at a checkpoint barrier (or, with
    /// [`crate::taskmanager::FINISHED`], at the end of input): makes what
    /// was written since the last call durable but not yet visible, and
    /// returns what [`commit`] needs to publish it. `None`: nothing to
    /// commit (or a sink without transactions).
    fn pre_commit(
        &mut self,
        _checkpoint: u64,
    ) -> Result<Option<serde_json::Value>, ConnectorError> {
        Ok(None)
    }
}

/// Two-phase commit, phase two: publishes what a sink's
/// [`Sink::pre_commit`] returned, once its checkpoint completed. Idempotent:
/// committing twice (after a restore) is harmless. Every part must be
/// where `roots` allow.
pub fn commit(committable: &serde_json::Value, roots: &AllowedRoots) -> Result<(), ConnectorError> {
    if nats::is_committable(committable) {
        return nats::commit(committable);
    }
    sink::commit_files(committable, roots)
}

/// How a file source reads its file.
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
}

pub use crate::job::config::DEFAULT_MAX_RECORD_BYTES;

/// Reads a file of lines or JSON lines.
#[derive(Debug)]
pub struct FileSource {
    path: PathBuf,
    reader: BufReader<File>,
    format: FileFormat,
    /// Longest line accepted, without its ending.
    max_record_bytes: u64,
    line_no: u64,
    /// Bytes consumed so far: where the next line starts.
    offset: u64,
    /// Set to read at most so many lines per second.
    throttle: Option<Throttle>,
    line: Vec<u8>,
    done: bool,
    /// At the end of the file, wait for more lines instead of ending.
    follow: bool,
}

/// How long a followed file source waits at the end of its file before it
/// looks again (and returns an empty batch, so the subtask can take
/// checkpoints, notice a stop and turn idle meanwhile).
pub const FOLLOW_POLL: std::time::Duration = std::time::Duration::from_millis(20);

impl FileSource {
    /// Opens `path`, which `roots` must allow ([`AllowedRoots::open_read`]:
    /// a regular file under a root). Messages name `path` as given.
    pub fn open(
        roots: &AllowedRoots,
        path: &Path,
        format: FileFormat,
    ) -> Result<FileSource, ConnectorError> {
        let file = roots.open_read(path)?;
        Ok(FileSource {
            path: path.to_path_buf(),
            reader: BufReader::with_capacity(256 << 10, file),
            format,
            max_record_bytes: DEFAULT_MAX_RECORD_BYTES,
            line_no: 0,
            offset: 0,
            throttle: None,
            line: Vec::new(),
            done: false,
            follow: false,
        })
    }

    /// With `follow`, the end of the file is not the end of input: lines
    /// appended later are read as they come (as `tail -f`), and a last
    /// line without its line ending waits for it. The source never ends.
    pub fn with_follow(mut self, follow: bool) -> FileSource {
        self.follow = follow;
        self
    }

    /// Reads at most `lines_per_second`.
    pub fn with_rate(mut self, lines_per_second: f64) -> FileSource {
        self.throttle = Some(Throttle::new(lines_per_second));
        self
    }

    /// Fails on a line longer than `bytes` (without its line ending)
    /// instead of buffering it; default [`DEFAULT_MAX_RECORD_BYTES`].
    pub fn with_max_record_bytes(mut self, bytes: u64) -> FileSource {
        self.max_record_bytes = bytes;
        self
    }

    /// Reads the next line, with its ending, into `self.line`; returns the
    /// bytes consumed (0 at the end of the file). A line longer than the
    /// cap is an error, found before it is buffered whole.
    fn read_line(&mut self) -> Result<usize, ConnectorError> {
        self.line.clear();
        let mut consumed = 0;
        loop {
            let buf = match self.reader.fill_buf() {
                Ok(buf) => buf,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(source) => {
                    return Err(ConnectorError::Io {
                        path: self.path.clone(),
                        source,
                    });
                }
            };
            if buf.is_empty() {
                return Ok(consumed);
            }
            let (chunk, complete) = match buf.iter().position(|&b| b == b'\n') {
                Some(i) => (&buf[..=i], true),
                None => (buf, false),
            };
            let content = (self.line.len() + chunk.len() - usize::from(complete)) as u64;
            if content > self.max_record_bytes {
                return Err(ConnectorError::RecordTooLong {
                    path: self.path.clone(),
                    line: self.line_no + 1,
                    limit: self.max_record_bytes,
                });
            }
            self.line.extend_from_slice(chunk);
            let n = chunk.len();
            self.reader.consume(n);
            consumed += n;
            if complete {
                return Ok(consumed);
            }
        }
    }

    fn bad(&self, message: String) -> ConnectorError {
        ConnectorError::BadRecord {
            path: self.path.clone(),
            line: self.line_no,
            message,
        }
    }
}

/// The text of a JSON value used as a key: strings without quotes, anything
/// else as compact JSON.
pub fn json_key_bytes(v: &serde_json::Value) -> Vec<u8> {
    match v {
        serde_json::Value::String(s) => s.as_bytes().to_vec(),
        other => other.to_string().into_bytes(),
    }
}

impl Source for FileSource {
    fn position(&self) -> serde_json::Value {
        serde_json::json!({ "offset": self.offset, "line": self.line_no })
    }

    fn seek(&mut self, position: &serde_json::Value) -> Result<(), ConnectorError> {
        use std::io::{Seek, SeekFrom};
        let (Some(offset), Some(line)) = (
            position.get("offset").and_then(serde_json::Value::as_u64),
            position.get("line").and_then(serde_json::Value::as_u64),
        ) else {
            return Err(ConnectorError::Position(format!(
                "{}: not a file position: {position}",
                self.path.display()
            )));
        };
        self.reader
            .seek(SeekFrom::Start(offset))
            .map_err(|source| ConnectorError::Io {
                path: self.path.clone(),
                source,
            })?;
        self.offset = offset;
        self.line_no = line;
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
        while batch.len() < max {
            let n = self.read_line()?;
            if self.follow && !self.line.ends_with(b"\n") {
                // The end of the file for now: give back a partial line
                // (it is read again whole once its ending is written).
                if n > 0 {
                    self.reader.seek_relative(-(n as i64)).map_err(|source| {
                        ConnectorError::Io {
                            path: self.path.clone(),
                            source,
                        }
                    })?;
                }
                if batch.is_empty() {
                    std::thread::sleep(FOLLOW_POLL);
                }
                break;
            }
            if n == 0 {
                self.done = true;
                break;
            }
            self.line_no += 1;
            self.offset += n as u64;
            let mut line = &self.line[..];
            if let Some(l) = line.strip_suffix(b"\n") {
                line = l;
            }
            if let Some(l) = line.strip_suffix(b"\r") {
                line = l;
            }
            match &self.format {
                FileFormat::Lines => batch.push(None, line, now),
                FileFormat::JsonLines {
                    key_field,
                    timestamp_field,
                    value_field,
                } => {
                    if line.iter().all(u8::is_ascii_whitespace) {
                        continue;
                    }
                    let v: serde_json::Value = serde_json::from_slice(line)
                        .map_err(|e| self.bad(format!("invalid JSON: {e}")))?;
                    let key = match key_field {
                        Some(f) => {
                            Some(json_key_bytes(v.get(f).ok_or_else(|| {
                                self.bad(format!("missing key field `{f}`"))
                            })?))
                        }
                        None => None,
                    };
                    let ts = match timestamp_field {
                        Some(f) => v.get(f).and_then(|t| t.as_i64()).ok_or_else(|| {
                            self.bad(format!(
                                "timestamp field `{f}` missing or not an integer (ms)"
                            ))
                        })?,
                        None => now,
                    };
                    match value_field {
                        Some(f) => {
                            let value =
                                json_key_bytes(v.get(f).ok_or_else(|| {
                                    self.bad(format!("missing value field `{f}`"))
                                })?);
                            batch.push(key.as_deref(), &value, ts);
                        }
                        None => batch.push(key.as_deref(), line, ts),
                    }
                }
            }
        }
        if batch.is_empty() && self.done {
            return Ok(None);
        }
        Ok(Some(batch))
    }
}

/// Milliseconds since the Unix epoch, now.
pub fn now_millis() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    type Records = Vec<(Option<Vec<u8>>, Vec<u8>, i64)>;

    fn drain(src: &mut dyn Source, max: usize) -> Result<Records, ConnectorError> {
        let mut out = Vec::new();
        while let Some(b) = src.next_batch(max)? {
            assert!(b.len() <= max);
            for r in b.iter() {
                out.push((r.key.map(<[u8]>::to_vec), r.value.to_vec(), r.timestamp));
            }
        }
        Ok(out)
    }

    #[test]
    fn file_source_reads_lines_without_endings() {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(b"one\r\ntwo\n\nthree").unwrap();
        let mut src = FileSource::open(&roots_of(f.path()), f.path(), FileFormat::Lines).unwrap();
        let values: Vec<_> = drain(&mut src, 2)
            .unwrap()
            .into_iter()
            .map(|r| r.1)
            .collect();
        assert_eq!(
            values,
            vec![
                b"one".to_vec(),
                b"two".to_vec(),
                b"".to_vec(),
                b"three".to_vec()
            ]
        );
    }

    #[test]
    fn json_lines_take_key_and_timestamp_and_name_bad_lines() {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(b"{\"a\":\"x\",\"t\":5}\n{\"a\":7,\"t\":6}\n{oops\n")
            .unwrap();
        let format = FileFormat::JsonLines {
            key_field: Some("a".into()),
            timestamp_field: Some("t".into()),
            value_field: None,
        };
        let mut src = FileSource::open(&roots_of(f.path()), f.path(), format).unwrap();
        let err = drain(&mut src, 10).unwrap_err().to_string();
        assert!(err.contains(":3: invalid JSON"), "{err}");
        let mut f2 = tempfile::NamedTempFile::new().unwrap();
        f2.write_all(b"{\"a\":\"x\",\"t\":5}\n{\"a\":7,\"t\":6}\n")
            .unwrap();
        let format = FileFormat::JsonLines {
            key_field: Some("a".into()),
            timestamp_field: Some("t".into()),
            value_field: None,
        };
        let mut src = FileSource::open(&roots_of(f2.path()), f2.path(), format).unwrap();
        let got = drain(&mut src, 10).unwrap();
        assert_eq!(got[0].0.as_deref(), Some(&b"x"[..]));
        assert_eq!(got[1].0.as_deref(), Some(&b"7"[..]));
        assert_eq!((got[0].2, got[1].2), (5, 6));
        assert_eq!(got[0].1, br#"{"a":"x","t":5}"#);
    }

    #[test]
    fn a_value_field_becomes_the_value_and_a_missing_one_is_named() {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(b"{\"k\":\"a\",\"x\":-12}\n{\"k\":\"b\",\"x\":\"text\"}\n{\"k\":\"c\"}\n")
            .unwrap();
        let format = FileFormat::JsonLines {
            key_field: Some("k".into()),
            timestamp_field: None,
            value_field: Some("x".into()),
        };
        let mut src = FileSource::open(&roots_of(f.path()), f.path(), format).unwrap();
        let mut got = Vec::new();
        let err = loop {
            match src.next_batch(1) {
                Ok(Some(b)) => got.extend(b.iter().map(|r| r.value.to_vec())),
                Ok(None) => panic!("the third line has no `x`"),
                Err(e) => break e.to_string(),
            }
        };
        assert_eq!(got, [b"-12".to_vec(), b"text".to_vec()]);
        assert!(err.contains(":3: missing value field `x`"), "{err}");
    }

    #[test]
    fn missing_file_is_an_error_naming_it() {
        let roots = AllowedRoots::new(["/"]).unwrap();
        let err = FileSource::open(
            &roots,
            Path::new("/nonexistent/weir.txt"),
            FileFormat::Lines,
        )
        .unwrap_err();
        assert!(err.to_string().contains("/nonexistent/weir.txt"));
    }

    #[test]
    fn a_file_outside_the_roots_is_refused() {
        let f = tempfile::NamedTempFile::new().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        let roots = AllowedRoots::new([elsewhere.path()]).unwrap();
        let err = FileSource::open(&roots, f.path(), FileFormat::Lines).unwrap_err();
        assert!(matches!(err, ConnectorError::Confined(_)), "{err}");
        assert!(err.to_string().contains("outside"), "{err}");
    }

    #[test]
    fn a_line_over_the_cap_fails_naming_file_and_line() {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        let long = "x".repeat(100);
        write!(
            f,
            "short\n{}\n{long}\n{long}x\nnever read\n",
            "y".repeat(99)
        )
        .unwrap();
        let mut src = FileSource::open(&roots_of(f.path()), f.path(), FileFormat::Lines)
            .unwrap()
            .with_max_record_bytes(100);
        let err = drain(&mut src, 1).unwrap_err();
        let text = err.to_string();
        assert!(
            matches!(
                err,
                ConnectorError::RecordTooLong {
                    line: 4,
                    limit: 100,
                    ..
                }
            ),
            "{text}"
        );
        assert!(
            text.contains(&format!("{}:4:", f.path().display())),
            "{text}"
        );
        assert!(text.contains("max_record_bytes"), "{text}");
        // Lines up to the cap (and with \r\n or no ending) are fine.
        let mut g = tempfile::NamedTempFile::new().unwrap();
        write!(g, "{long}\n{long}").unwrap();
        let mut src = FileSource::open(&roots_of(g.path()), g.path(), FileFormat::Lines)
            .unwrap()
            .with_max_record_bytes(100);
        assert_eq!(drain(&mut src, 10).unwrap().len(), 2);
    }

    #[test]
    fn a_followed_file_waits_for_appended_lines_and_whole_lines() {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(b"one\ntw").unwrap();
        let mut src = FileSource::open(&roots_of(f.path()), f.path(), FileFormat::Lines)
            .unwrap()
            .with_follow(true);
        let values = |b: Option<Batch>| -> Vec<Vec<u8>> {
            b.expect("a followed file never ends")
                .iter()
                .map(|r| r.value.to_vec())
                .collect()
        };
        assert_eq!(values(src.next_batch(10).unwrap()), [b"one".to_vec()]);
        // The partial line waits for its ending; meanwhile, empty batches.
        assert!(values(src.next_batch(10).unwrap()).is_empty());
        f.write_all(b"o\nthree\n").unwrap();
        f.flush().unwrap();
        assert_eq!(
            values(src.next_batch(10).unwrap()),
            [b"two".to_vec(), b"three".to_vec()]
        );
        assert!(values(src.next_batch(10).unwrap()).is_empty());
        assert_eq!(src.position()["line"], 3);
    }

    fn roots_of(file: &Path) -> AllowedRoots {
        AllowedRoots::new([file.parent().unwrap()]).unwrap()
    }
}
