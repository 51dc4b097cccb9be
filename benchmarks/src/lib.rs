//! Shared helpers for Refract benchmarks: JSON-line output and memory readings.
//!
//! Every benchmark binary prints one JSON object per measurement on stdout, so
//! runs can be collected with `> results.jsonl` and compared over time.

use serde_json::Value;

/// Prints one JSON measurement line.
pub fn emit(record: Value) {
    println!("{record}");
}

/// Peak resident set size of this process so far, in bytes (`VmHWM`), or 0 where
/// `/proc` is unavailable.
pub fn peak_rss_bytes() -> u64 {
    proc_status_kib("VmHWM:") * 1024
}

/// Current resident set size, in bytes (`VmRSS`).
pub fn current_rss_bytes() -> u64 {
    proc_status_kib("VmRSS:") * 1024
}

/// Resets the peak RSS counter so a later [`peak_rss_bytes`] measures one phase
/// (Linux: writing 5 to `/proc/self/clear_refs`). Returns false when unsupported.
pub fn reset_peak_rss() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

fn proc_status_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status.lines().find_map(|line| {
                line.strip_prefix(field)?
                    .split_whitespace()
                    .next()?
                    .parse()
                    .ok()
            })
        })
        .unwrap_or(0)
}
