//! Logging into the host's log, tagged by the host with the operator's uid
//! and subtask.
//!
//! Functions ([`log()`], [`info()`], ...) and `format!`-style macros
//! ([`info!`](crate::log::info), ...). Natively, inside the test harness,
//! messages are captured (see `Harness::logs`); outside it they go to stderr.
//!
//! ```
//! weir_sdk::log::info!("opened with {} keys", 3);
//! weir_sdk::log::warn("dropping a malformed record");
//! ```

pub use crate::bindings::weir::operator::log::Level;

use crate::backend;

/// Writes `message` at `level`.
pub fn log(level: Level, message: &str) {
    backend::log(level, message);
}

/// Writes `message` at trace level.
pub fn trace(message: &str) {
    log(Level::Trace, message);
}

/// Writes `message` at debug level.
pub fn debug(message: &str) {
    log(Level::Debug, message);
}

/// Writes `message` at info level.
pub fn info(message: &str) {
    log(Level::Info, message);
}

/// Writes `message` at warn level.
pub fn warn(message: &str) {
    log(Level::Warn, message);
}

/// Writes `message` at error level.
pub fn error(message: &str) {
    log(Level::Error, message);
}

#[doc(hidden)]
#[macro_export]
macro_rules! __weir_log {
    ($level:ident, $($arg:tt)+) => {
        $crate::log::log($crate::log::Level::$level, &::std::format!($($arg)+))
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __weir_trace {
    ($($arg:tt)+) => { $crate::__weir_log!(Trace, $($arg)+) };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __weir_debug {
    ($($arg:tt)+) => { $crate::__weir_log!(Debug, $($arg)+) };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __weir_info {
    ($($arg:tt)+) => { $crate::__weir_log!(Info, $($arg)+) };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __weir_warn {
    ($($arg:tt)+) => { $crate::__weir_log!(Warn, $($arg)+) };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __weir_error {
    ($($arg:tt)+) => { $crate::__weir_log!(Error, $($arg)+) };
}

/// Logs at trace level, `format!`-style.
pub use crate::__weir_trace as trace;

/// Logs at debug level, `format!`-style.
pub use crate::__weir_debug as debug;

/// Logs at info level, `format!`-style.
pub use crate::__weir_info as info;

/// Logs at warn level, `format!`-style.
pub use crate::__weir_warn as warn;

/// Logs at error level, `format!`-style.
pub use crate::__weir_error as error;
