//! The SDK's error type: a message for the host.
//!
//! Owns [`Error`]. Every fallible SDK and operator function returns it; the
//! export glue turns it into the WIT `result<_, string>` error, which fails the
//! task with the message. Like `anyhow::Error`, any `std::error::Error`
//! converts into it with `?`, so [`Error`] itself does not implement
//! `std::error::Error` (it converts into `Box<dyn std::error::Error + Send +
//! Sync>` instead, for tests that use boxed errors or `anyhow`).

use std::fmt;

/// An operator error: a human-readable message that the host reports with the
/// operator's uid when it fails the task.
pub struct Error {
    message: String,
}

impl Error {
    /// An error with `message`.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
        }
    }

    /// An error from anything printable.
    pub fn msg(message: impl fmt::Display) -> Self {
        Self::new(message.to_string())
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// This error with `context: ` put before its message.
    pub fn context(self, context: impl fmt::Display) -> Self {
        Self::new(format!("{context}: {}", self.message))
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // `fn main() -> Result<(), Error>` and failing tests print Debug:
        // show the message as it is, not escaped in a struct.
        f.write_str(&self.message)
    }
}

impl<E: std::error::Error> From<E> for Error {
    fn from(error: E) -> Self {
        Self::msg(error)
    }
}

impl From<Error> for Box<dyn std::error::Error + Send + Sync + 'static> {
    fn from(error: Error) -> Self {
        error.message.into()
    }
}

impl From<Error> for Box<dyn std::error::Error + 'static> {
    fn from(error: Error) -> Self {
        error.message.into()
    }
}

impl From<Error> for String {
    fn from(error: Error) -> Self {
        error.message
    }
}

/// Returns early with an [`Error`] built like `format!`.
///
/// ```
/// fn check(n: u64) -> Result<(), weir_sdk::Error> {
///     if n == 0 {
///         weir_sdk::bail!("n must be positive, got {n}");
///     }
///     Ok(())
/// }
/// assert_eq!(check(0).unwrap_err().message(), "n must be positive, got 0");
/// ```
#[macro_export]
macro_rules! bail {
    ($($arg:tt)+) => {
        return ::core::result::Result::Err($crate::Error::new(::std::format!($($arg)+)))
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn std_errors_convert_with_question_mark() {
        fn parse(s: &str) -> Result<u32, Error> {
            Ok(s.parse::<u32>()?)
        }
        assert_eq!(
            parse("x").unwrap_err().message(),
            "invalid digit found in string"
        );
    }

    #[test]
    fn context_prefixes_the_message() {
        let e = Error::new("boom").context("state `count`");
        assert_eq!(e.to_string(), "state `count`: boom");
        assert_eq!(format!("{e:?}"), "state `count`: boom");
    }
}
