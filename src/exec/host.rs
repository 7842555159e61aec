//! Facts about this machine and the clock, for records: when and where
//! (which GPUs is the device stage's). Every later stage may use them; they
//! use nothing of the crate.

use std::time::SystemTime;

pub(crate) fn unix_ms() -> u64 {
    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// Now as RFC 3339 UTC, to the second.
pub(crate) fn now() -> String {
    humantime::format_rfc3339_seconds(SystemTime::now()).to_string()
}

/// The host name, for run records.
pub(crate) fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").map(|h| h.trim().to_string()).unwrap_or_default()
}

/// Bytes available to this user on the filesystem that holds `path`.
pub(crate) fn free_bytes(path: &std::path::Path) -> Option<u64> {
    let stat = rustix::fs::statvfs(path).ok()?;
    Some(stat.f_bavail.saturating_mul(stat.f_frsize))
}
