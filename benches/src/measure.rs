//! Measuring a run: peak resident memory and latency percentiles.

/// The process's peak resident set size in KiB (`VmHWM` in
/// `/proc/self/status`), or `None` where that file does not exist.
///
/// It is a high-water mark over the whole life of the process (unless
/// [`reset_peak_rss`] moved it), so the workload harness runs every case in
/// a fresh child process.
pub fn peak_rss_kib() -> Option<u64> {
    status_kib("VmHWM")
}

/// The process's current resident set size in KiB (`VmRSS`), or `None`
/// where `/proc/self/status` does not exist.
pub fn rss_kib() -> Option<u64> {
    status_kib("VmRSS")
}

/// Sets the peak resident set size ([`peak_rss_kib`]) to the current one,
/// so that the next reading is the peak from now on (Linux 4.0 and later:
/// `/proc/self/clear_refs`). Whether it could.
pub fn reset_peak_rss() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// A `kB` field of `/proc/self/status`.
fn status_kib(key: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// The `q`-quantile (0.0..=1.0) of `samples` by the nearest-rank method;
/// sorts `samples`. `None` when there are none.
pub fn quantile(samples: &mut [u64], q: f64) -> Option<u64> {
    if samples.is_empty() {
        return None;
    }
    samples.sort_unstable();
    let rank = (q.clamp(0.0, 1.0) * samples.len() as f64).ceil() as usize;
    Some(samples[rank.clamp(1, samples.len()) - 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_quantiles() {
        let mut s: Vec<u64> = (1..=100).rev().collect();
        assert_eq!(quantile(&mut s, 0.5), Some(50));
        assert_eq!(quantile(&mut s, 0.99), Some(99));
        assert_eq!(quantile(&mut s, 1.0), Some(100));
        assert_eq!(quantile(&mut s, 0.0), Some(1));
        assert_eq!(quantile(&mut [], 0.5), None);
    }

    #[test]
    fn reads_peak_rss_on_linux() {
        if cfg!(target_os = "linux") {
            assert!(peak_rss_kib().unwrap() > 0);
            assert!(rss_kib().unwrap() > 0);
        }
    }

    #[test]
    fn a_reset_peak_forgets_an_earlier_one() {
        if !cfg!(target_os = "linux") {
            return;
        }
        // 64 MiB made resident, then freed: the peak stays above it until
        // the reset, and only then falls back near the current size.
        let big = vec![1u8; 64 << 20];
        std::hint::black_box(&big);
        drop(big);
        let before = peak_rss_kib().unwrap();
        assert!(before >= 64 << 10, "{before} KiB");
        assert!(reset_peak_rss());
        let after = peak_rss_kib().unwrap();
        assert!(after < before, "{after} KiB after, {before} KiB before");
    }
}
