//! This process's memory as the kernel counts it: resident set now and at
//! its peak (`VmRSS` and `VmHWM` of `/proc/self/status`), what a
//! TaskManager reports with its heartbeats and on its `/metrics`. Linux
//! only: elsewhere there is nothing to report.

use serde::{Deserialize, Serialize};

/// A process's resident memory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessMemory {
    /// Resident set size now, bytes.
    pub rss_bytes: u64,
    /// The largest resident set size so far, bytes.
    pub peak_rss_bytes: u64,
}

impl ProcessMemory {
    /// This process's, if `/proc/self/status` tells it.
    pub fn current() -> Option<ProcessMemory> {
        parse_status(&std::fs::read_to_string("/proc/self/status").ok()?)
    }
}

/// `VmRSS` and `VmHWM` of a `/proc/<pid>/status` text (in kB there).
fn parse_status(status: &str) -> Option<ProcessMemory> {
    let kib = |field: &str| -> Option<u64> {
        let line = status.lines().find(|l| l.starts_with(field))?;
        let value = line[field.len()..].trim().strip_suffix("kB")?.trim();
        value.parse::<u64>().ok().map(|k| k * 1024)
    };
    Some(ProcessMemory {
        rss_bytes: kib("VmRSS:")?,
        peak_rss_bytes: kib("VmHWM:")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_rss_and_peak_from_a_status_text() {
        let status = "Name:\tweir\nVmPeak:\t  900000 kB\nVmHWM:\t   20480 kB\nVmRSS:\t   10240 kB\nThreads:\t9\n";
        assert_eq!(
            parse_status(status),
            Some(ProcessMemory {
                rss_bytes: 10_240 * 1024,
                peak_rss_bytes: 20_480 * 1024,
            })
        );
        assert_eq!(parse_status("Name:\tweir\n"), None);
    }

    #[test]
    fn this_process_has_resident_memory() {
        let m = ProcessMemory::current().expect("Linux has /proc/self/status");
        assert!(m.rss_bytes > 0 && m.peak_rss_bytes >= m.rss_bytes, "{m:?}");
    }
}
