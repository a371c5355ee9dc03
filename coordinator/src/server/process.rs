//! The standard `process_*` metrics of the Prometheus client libraries, read from `/proc` at
//! each scrape (Linux; elsewhere, or when `/proc` is unreadable, they are left out).
//!
//! | metric | type | source |
//! |---|---|---|
//! | `process_cpu_seconds_total` | counter | `utime + stime` of `/proc/self/stat` |
//! | `process_resident_memory_bytes` | gauge | `VmRSS` of `/proc/self/status` |
//! | `process_virtual_memory_bytes` | gauge | `VmSize` of `/proc/self/status` |
//! | `process_open_fds` | gauge | entries of `/proc/self/fd` |
//! | `process_max_fds` | gauge | the soft `Max open files` of `/proc/self/limits` |
//! | `process_start_time_seconds` | gauge | `starttime` of `/proc/self/stat` plus `btime` of `/proc/stat` |

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

/// Clock ticks per second of the times in `/proc` (`USER_HZ`, 100 on every Linux
/// architecture; the Prometheus Go client's procfs assumes the same).
const USER_HZ: f64 = 100.0;

/// What one scrape reads about this process.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct ProcessStats {
    pub(crate) cpu_seconds: Option<f64>,
    pub(crate) start_time_seconds: Option<f64>,
    pub(crate) resident_memory_bytes: Option<u64>,
    pub(crate) virtual_memory_bytes: Option<u64>,
    pub(crate) open_fds: Option<u64>,
    pub(crate) max_fds: Option<u64>,
}

/// `(utime + stime, starttime)` in clock ticks from the text of `/proc/PID/stat`. The command
/// name (field 2, in parentheses) may hold spaces and parentheses, so fields are counted from
/// the last `)`.
pub(crate) fn parse_stat(stat: &str) -> Option<(u64, u64)> {
    let rest = &stat[stat.rfind(')')? + 1..];
    // rest starts at field 3 (state): field N is at index N - 3.
    let f: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = f.get(14 - 3)?.parse().ok()?;
    let stime: u64 = f.get(15 - 3)?.parse().ok()?;
    let starttime: u64 = f.get(22 - 3)?.parse().ok()?;
    Some((utime + stime, starttime))
}

/// A `kB` line of `/proc/PID/status` (e.g. `VmRSS:   1234 kB`), in bytes.
pub(crate) fn parse_status_kb(status: &str, key: &str) -> Option<u64> {
    status.lines().find_map(|l| {
        let v = l.strip_prefix(key)?.strip_prefix(':')?;
        let kb: u64 = v.split_whitespace().next()?.parse().ok()?;
        Some(kb * 1024)
    })
}

/// `btime` (boot time, seconds since the Unix epoch) of `/proc/stat`.
pub(crate) fn parse_btime(stat: &str) -> Option<u64> {
    stat.lines()
        .find_map(|l| l.strip_prefix("btime ")?.trim().parse().ok())
}

/// The soft limit of `Max open files` in `/proc/PID/limits`.
pub(crate) fn parse_max_fds(limits: &str) -> Option<u64> {
    limits.lines().find_map(|l| {
        let v = l.strip_prefix("Max open files")?;
        v.split_whitespace().next()?.parse().ok()
    })
}

impl ProcessStats {
    /// Reads this process's figures from `/proc`; whatever is unreadable stays `None`.
    pub(crate) fn read() -> Self {
        let read = |p: &str| std::fs::read_to_string(p).ok();
        let mut s = Self::default();
        if let Some((ticks, start)) = read("/proc/self/stat").as_deref().and_then(parse_stat) {
            s.cpu_seconds = Some(ticks as f64 / USER_HZ);
            s.start_time_seconds = read("/proc/stat")
                .as_deref()
                .and_then(parse_btime)
                .map(|b| b as f64 + start as f64 / USER_HZ);
        }
        if let Some(status) = read("/proc/self/status") {
            s.resident_memory_bytes = parse_status_kb(&status, "VmRSS");
            s.virtual_memory_bytes = parse_status_kb(&status, "VmSize");
        }
        s.open_fds = std::fs::read_dir("/proc/self/fd")
            .ok()
            .map(|d| d.count() as u64);
        s.max_fds = read("/proc/self/limits").as_deref().and_then(parse_max_fds);
        s
    }
}

/// Encodes [`ProcessStats::read`] at each scrape. Register it at the top of the registry (no
/// prefix): the names are the client libraries' standard ones.
#[derive(Debug, Default)]
pub struct ProcessCollector;

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let s = ProcessStats::read();
        if let Some(v) = s.cpu_seconds {
            let m = encoder.encode_descriptor(
                "process_cpu_seconds",
                "Total user and system CPU time spent in seconds",
                None,
                MetricType::Counter,
            )?;
            ConstCounter::new(v).encode(m)?;
        }
        let gauges: [(&str, &str, Option<f64>); 5] = [
            (
                "process_resident_memory_bytes",
                "Resident memory size in bytes",
                s.resident_memory_bytes.map(|v| v as f64),
            ),
            (
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes",
                s.virtual_memory_bytes.map(|v| v as f64),
            ),
            (
                "process_open_fds",
                "Number of open file descriptors",
                s.open_fds.map(|v| v as f64),
            ),
            (
                "process_max_fds",
                "Maximum number of open file descriptors",
                s.max_fds.map(|v| v as f64),
            ),
            (
                "process_start_time_seconds",
                "Start time of the process since the Unix epoch in seconds",
                s.start_time_seconds,
            ),
        ];
        for (name, help, value) in gauges {
            if let Some(v) = value {
                let m = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
                ConstGauge::new(v).encode(m)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_files_parse() {
        let stat = "4242 (txn (co) x) S 1 4242 4242 0 -1 4194560 900 0 0 0 \
                    150 50 0 0 20 0 9 0 123456 234567890 4321 18446744073709551615";
        assert_eq!(parse_stat(stat), Some((200, 123_456)));
        assert_eq!(parse_stat("garbage"), None);
        let status = "Name:\ttxn-coordinator\nVmSize:\t  200 kB\nVmRSS:\t   12 kB\n";
        assert_eq!(parse_status_kb(status, "VmRSS"), Some(12 * 1024));
        assert_eq!(parse_status_kb(status, "VmSize"), Some(200 * 1024));
        assert_eq!(parse_status_kb(status, "VmSwap"), None);
        assert_eq!(
            parse_btime("cpu  1 2 3\nbtime 1764754800\nprocesses 9\n"),
            Some(1_764_754_800)
        );
        let limits = "Limit                     Soft Limit           Hard Limit           Units\n\
                      Max open files            1024                 524288               files\n";
        assert_eq!(parse_max_fds(limits), Some(1024));
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn this_process_is_measured() {
        let s = ProcessStats::read();
        assert!(s.cpu_seconds.is_some_and(|v| v >= 0.0), "{s:?}");
        assert!(s.resident_memory_bytes.is_some_and(|v| v > 0), "{s:?}");
        assert!(s.open_fds.is_some_and(|v| v > 0), "{s:?}");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        assert!(
            s.start_time_seconds
                .is_some_and(|t| t <= now + 1.0 && t > now - 86_400.0 * 365.0),
            "{s:?}"
        );
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register_collector(Box::new(ProcessCollector));
        let text = crate::shell::Metrics::encode(&registry);
        for name in [
            "process_cpu_seconds_total ",
            "process_resident_memory_bytes ",
            "process_open_fds ",
            "process_start_time_seconds ",
        ] {
            assert!(text.lines().any(|l| l.starts_with(name)), "{name}: {text}");
        }
        assert!(
            text.contains("# TYPE process_cpu_seconds counter"),
            "{text}"
        );
    }
}
