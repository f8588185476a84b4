//! A file's bytes as a file source reads them: plain, or decompressed by
//! its extension (`.gz`: gzip, every member; `.zst`: zstd, every frame, the
//! content checksum verified when the frame has one).
//!
//! [`Input`] is a `BufRead` whose offsets are those of the decoded bytes. A
//! plain file seeks; a compressed one can only be read from its start, so
//! positioning it decodes and discards. A truncated or corrupt compressed
//! file is an `io::Error` (`UnexpectedEof` or `InvalidData`), which the
//! source reports with the file's path.

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};

/// Buffer of every reader: large enough that a read is one system call per
/// many lines.
const BUFFER: usize = 256 << 10;

/// A file's decoded bytes.
pub enum Input {
    /// Uncompressed: seekable.
    Plain(BufReader<File>),
    /// Decompressed: forward only.
    Decoded(BufReader<Box<dyn Read + Send>>),
}

impl std::fmt::Debug for Input {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Input::Plain(_) => "Input::Plain",
            Input::Decoded(_) => "Input::Decoded",
        })
    }
}

/// How a file is compressed, by its extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    /// Not compressed.
    None,
    /// `.gz`.
    Gzip,
    /// `.zst`.
    Zstd,
}

impl Compression {
    /// By the file name's extension.
    pub fn of(path: &std::path::Path) -> Compression {
        match path.extension().and_then(|e| e.to_str()) {
            Some("gz") => Compression::Gzip,
            Some("zst") => Compression::Zstd,
            _ => Compression::None,
        }
    }
}

impl Input {
    /// The bytes of `file`, decoded as `compression` says.
    pub fn new(file: File, compression: Compression) -> std::io::Result<Input> {
        Ok(match compression {
            Compression::None => Input::Plain(BufReader::with_capacity(BUFFER, file)),
            Compression::Gzip => Input::Decoded(BufReader::with_capacity(
                BUFFER,
                Box::new(flate2::bufread::MultiGzDecoder::new(
                    BufReader::with_capacity(BUFFER, file),
                )),
            )),
            Compression::Zstd => Input::Decoded(BufReader::with_capacity(
                BUFFER,
                Box::new(ZstdFrames::new(BufReader::with_capacity(BUFFER, file))),
            )),
        })
    }

    /// Moves to decoded offset `to` from `from` (the current offset):
    /// seeks a plain file, decodes and discards otherwise (forward only).
    pub fn skip_to(&mut self, from: u64, to: u64) -> std::io::Result<()> {
        match self {
            Input::Plain(r) => r.seek(SeekFrom::Start(to)).map(drop),
            Input::Decoded(r) => {
                let want = to.checked_sub(from).ok_or_else(|| {
                    std::io::Error::other("a compressed file cannot be read backwards")
                })?;
                let skipped = std::io::copy(&mut r.by_ref().take(want), &mut std::io::sink())?;
                if skipped < want {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        format!(
                            "ends at decoded byte {}, before the recorded position {to}",
                            from + skipped
                        ),
                    ));
                }
                Ok(())
            }
        }
    }

    /// Steps back `n` bytes just read (a followed file's partial last line).
    pub fn give_back(&mut self, n: u64) -> std::io::Result<()> {
        match self {
            Input::Plain(r) => r.seek_relative(-(n as i64)),
            Input::Decoded(_) => Err(std::io::Error::other(
                "a compressed file cannot be followed",
            )),
        }
    }
}

impl Read for Input {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Input::Plain(r) => r.read(buf),
            Input::Decoded(r) => r.read(buf),
        }
    }
}

impl BufRead for Input {
    fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
        match self {
            Input::Plain(r) => r.fill_buf(),
            Input::Decoded(r) => r.fill_buf(),
        }
    }

    fn consume(&mut self, amount: usize) {
        match self {
            Input::Plain(r) => r.consume(amount),
            Input::Decoded(r) => r.consume(amount),
        }
    }
}

/// Every zstd frame of a stream, one after the other (ruzstd's
/// `StreamingDecoder` reads one), skippable frames skipped, each frame's
/// content checksum verified. A stream that ends inside a frame is an
/// `UnexpectedEof` error.
struct ZstdFrames<R: BufRead> {
    source: R,
    decoder: ruzstd::decoding::FrameDecoder,
    in_frame: bool,
}

impl<R: BufRead> ZstdFrames<R> {
    fn new(source: R) -> ZstdFrames<R> {
        ZstdFrames {
            source,
            decoder: ruzstd::decoding::FrameDecoder::new(),
            in_frame: false,
        }
    }
}

fn invalid(e: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        format!("corrupt zstd data: {e}"),
    )
}

impl<R: BufRead> Read for ZstdFrames<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        use ruzstd::decoding::errors::{FrameDecoderError, ReadFrameHeaderError};
        loop {
            if !self.in_frame {
                if self.source.fill_buf()?.is_empty() {
                    return Ok(0);
                }
                match self.decoder.reset(&mut self.source) {
                    Ok(()) => self.in_frame = true,
                    Err(FrameDecoderError::ReadFrameHeaderError(
                        ReadFrameHeaderError::SkipFrame { length, .. },
                    )) => {
                        let want = u64::from(length);
                        let skipped = std::io::copy(
                            &mut (&mut self.source).take(want),
                            &mut std::io::sink(),
                        )?;
                        if skipped < want {
                            return Err(std::io::Error::new(
                                std::io::ErrorKind::UnexpectedEof,
                                "truncated zstd data (inside a skippable frame)",
                            ));
                        }
                        continue;
                    }
                    Err(e) => return Err(truncated_or_invalid(e)),
                }
            }
            if self.decoder.can_collect() == 0 && !self.decoder.is_finished() {
                self.decoder
                    .decode_blocks(
                        &mut self.source,
                        ruzstd::decoding::BlockDecodingStrategy::UptoBlocks(1),
                    )
                    .map_err(truncated_or_invalid)?;
                continue;
            }
            if self.decoder.can_collect() > 0 {
                let n = self.decoder.read(buf)?;
                if n > 0 {
                    return Ok(n);
                }
            }
            if self.decoder.is_finished() && self.decoder.can_collect() == 0 {
                if let (Some(stored), Some(computed)) = (
                    self.decoder.get_checksum_from_data(),
                    self.decoder.get_calculated_checksum(),
                ) && stored != computed
                {
                    return Err(invalid(format!(
                        "content checksum {computed:08x} does not match the frame's {stored:08x}"
                    )));
                }
                self.in_frame = false;
            }
        }
    }
}

/// A decoder error as `io::Error`: `UnexpectedEof` when the data ended
/// early, `InvalidData` otherwise.
fn truncated_or_invalid(e: ruzstd::decoding::errors::FrameDecoderError) -> std::io::Error {
    let text = e.to_string();
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&e);
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<std::io::Error>()
            && io.kind() == std::io::ErrorKind::UnexpectedEof
        {
            return std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!("truncated zstd data: {text}"),
            );
        }
        source = s.source();
    }
    if text.to_ascii_lowercase().contains("eof") || text.contains("fill whole buffer") {
        return std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            format!("truncated zstd data: {text}"),
        );
    }
    invalid(text)
}
