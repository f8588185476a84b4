//! Sinks: file, stdout and blackhole.
//!
//! Every sink writes one record per line in an [`OutputFormat`].

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::{ConnectorError, Sink};
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

/// Writes lines to a file (created, or truncated).
#[derive(Debug)]
pub struct FileSink {
    path: PathBuf,
    out: BufWriter<File>,
    format: OutputFormat,
}

impl FileSink {
    /// Creates the file and its parent directories.
    pub fn create(path: &Path, format: OutputFormat) -> Result<FileSink, ConnectorError> {
        let io = |source| ConnectorError::Io {
            path: path.to_path_buf(),
            source,
        };
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(io)?;
        }
        let file = File::create(path).map_err(io)?;
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
        for (format, expected) in [
            (OutputFormat::Value, "v\nw\n"),
            (OutputFormat::KeyValue, "k\tv\n\tw\n"),
            (
                OutputFormat::Json,
                "{\"key\":\"k\",\"timestamp\":7,\"value\":\"v\"}\n{\"key\":null,\"timestamp\":8,\"value\":\"w\"}\n",
            ),
        ] {
            let path = dir.path().join("sub/out.txt");
            let mut sink = FileSink::create(&path, format).unwrap();
            sink.write(&b).unwrap();
            sink.finish().unwrap();
            assert_eq!(std::fs::read_to_string(&path).unwrap(), expected);
        }
    }
}
