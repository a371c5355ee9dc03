//! Latency histograms and `/proc` sampling (server CPU, peak RSS, machine load).

use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

/// A latency histogram in microseconds (1 µs .. 100 s, 3 significant digits).
#[derive(Debug, Clone)]
pub(crate) struct Lat(Histogram<u64>);

impl Default for Lat {
    fn default() -> Self {
        Self(Histogram::new_with_bounds(1, 100_000_000, 3).expect("static bounds are valid"))
    }
}

impl Lat {
    /// Records one duration (saturating at the upper bound).
    pub(crate) fn record(&mut self, d: Duration) {
        let us = u64::try_from(d.as_micros()).unwrap_or(u64::MAX).max(1);
        self.0.saturating_record(us);
    }

    /// Adds `other` into `self`.
    pub(crate) fn merge(&mut self, other: &Self) {
        // Same bounds on both sides: cannot fail.
        let _ = self.0.add(&other.0);
    }

    /// Summary in microseconds.
    pub(crate) fn summary(&self) -> LatSummary {
        let h = &self.0;
        let q = |p: f64| {
            if h.is_empty() {
                0
            } else {
                h.value_at_quantile(p)
            }
        };
        LatSummary {
            count: h.len(),
            mean_us: if h.is_empty() { 0.0 } else { h.mean() },
            p50_us: q(0.50),
            p90_us: q(0.90),
            p99_us: q(0.99),
            p999_us: q(0.999),
            max_us: h.max(),
        }
    }

    /// (quantile, µs) points for a CDF plot.
    pub(crate) fn cdf(&self) -> Vec<(f64, u64)> {
        if self.0.is_empty() {
            return Vec::new();
        }
        let mut out = Vec::new();
        let mut q = 0.0f64;
        while q < 0.9999 {
            out.push((q, self.0.value_at_quantile(q)));
            // Dense near the tail: step is 1/20 of the distance to 1.
            q += ((1.0 - q) / 20.0).max(0.0001);
        }
        out.push((0.9999, self.0.value_at_quantile(0.9999)));
        out.push((1.0, self.0.max()));
        out
    }
}

/// Quantiles of one latency histogram.
#[derive(Debug, Clone, Serialize, serde::Deserialize, Default)]
pub(crate) struct LatSummary {
    pub(crate) count: u64,
    pub(crate) mean_us: f64,
    pub(crate) p50_us: u64,
    pub(crate) p90_us: u64,
    pub(crate) p99_us: u64,
    pub(crate) p999_us: u64,
    pub(crate) max_us: u64,
}

/// Clock ticks per second of `/proc/PID/stat` times (USER_HZ; 100 on every Linux we run on).
const USER_HZ: f64 = 100.0;

/// CPU time and memory of one process.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ProcSample {
    /// utime + stime in seconds.
    pub(crate) cpu_s: f64,
    /// VmRSS in KiB.
    pub(crate) rss_kib: u64,
    /// VmHWM (peak RSS since start) in KiB.
    pub(crate) hwm_kib: u64,
}

/// Reads `/proc/PID/stat` and `/proc/PID/status`; `None` if the process is gone.
pub(crate) fn sample_pid(pid: u32) -> Option<ProcSample> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the parenthesised command name (which may contain spaces).
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // rest[0] is field 3 (state); utime is field 14, stime 15.
    let utime: f64 = f.get(11)?.parse().ok()?;
    let stime: f64 = f.get(12)?.parse().ok()?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib = |key: &str| {
        status
            .lines()
            .find(|l| l.starts_with(key))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    Some(ProcSample {
        cpu_s: (utime + stime) / USER_HZ,
        rss_kib: kib("VmRSS:"),
        hwm_kib: kib("VmHWM:"),
    })
}

/// The process's command name (`/proc/PID/comm`).
pub(crate) fn pid_name(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| format!("pid{pid}"))
}

/// Machine-wide CPU counters from `/proc/stat` (busy, total) in ticks.
pub(crate) fn machine_ticks() -> (u64, u64) {
    let Ok(s) = std::fs::read_to_string("/proc/stat") else {
        return (0, 0);
    };
    let Some(line) = s.lines().next() else {
        return (0, 0);
    };
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    let total: u64 = v.iter().take(8).sum();
    // idle + iowait
    let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
    (total.saturating_sub(idle), total)
}

/// The 1-minute load average.
pub(crate) fn loadavg() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()))
        .unwrap_or(0.0)
}

/// Number of online CPUs.
pub(crate) fn ncpu() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZero::get)
}

/// Ticks per second of `/proc/stat`.
pub(crate) const MACHINE_HZ: f64 = USER_HZ;
