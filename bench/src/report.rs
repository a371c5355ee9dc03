//! One run's result: JSON shape and the stdout table.

use serde::{Deserialize, Serialize};

use crate::null_broker::NullBrokerUsage;
use crate::stats::LatSummary;

/// The measured servers' CPU per transaction beside the null broker's CPU per request of the
/// same run: the coordinator's cost in units of a server that only answers, which holds from
/// one machine to another where absolute CPU times do not.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub(crate) struct ShellCost {
    /// CPU microseconds of the `--server-pid` processes per transaction (committed or
    /// aborted) inside the window.
    pub(crate) server_cpu_us_per_txn: f64,
    /// Requests each transaction sends the coordinator: AddPartitionsToTxn and EndTxn (TV1),
    /// EndTxn (TV2).
    pub(crate) coordinator_requests_per_txn: f64,
    /// server CPU per txn / (null broker CPU per request x coordinator requests per txn);
    /// `None` without `--null-broker-stats` or when the null broker answered nothing.
    pub(crate) overhead_vs_null: Option<f64>,
}

impl ShellCost {
    /// The cost of `txns` transactions (of transaction version `tv`) that took `server_cpu_s`.
    pub(crate) fn of(server_cpu_s: f64, txns: u64, tv: u8, null: Option<&NullBrokerUsage>) -> Self {
        let coordinator_requests_per_txn = if tv >= 2 { 1.0 } else { 2.0 };
        #[allow(clippy::cast_precision_loss)]
        let server_cpu_us_per_txn = if txns > 0 {
            server_cpu_s * 1e6 / txns as f64
        } else {
            0.0
        };
        let overhead_vs_null = null
            .map(|n| n.cpu_us_per_request * coordinator_requests_per_txn)
            .filter(|floor| *floor > 0.0 && txns > 0)
            .map(|floor| server_cpu_us_per_txn / floor);
        Self {
            server_cpu_us_per_txn,
            coordinator_requests_per_txn,
            overhead_vs_null,
        }
    }
}

/// CPU and memory of one server process over the measured window.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub(crate) struct ServerUsage {
    pub(crate) pid: u32,
    pub(crate) name: String,
    /// CPU seconds (user + system) used inside the window.
    pub(crate) cpu_s: f64,
    /// CPU seconds per 1000 committed transactions.
    pub(crate) cpu_s_per_1000_txn: f64,
    /// VmRSS at the end of the window, MiB.
    pub(crate) rss_mib: f64,
    /// VmHWM (peak RSS since the process started), MiB.
    pub(crate) peak_rss_mib: f64,
}

/// Result of one run (one producer count).
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub(crate) struct RunResult {
    pub(crate) label: String,
    pub(crate) bootstrap: String,
    pub(crate) producers: usize,
    pub(crate) partitions_per_txn: usize,
    pub(crate) records_per_txn: usize,
    pub(crate) record_size: usize,
    pub(crate) txn_version: u8,
    pub(crate) abort_fraction: f64,
    /// Target rate (txn/s over all producers), if paced.
    pub(crate) rate: Option<f64>,
    pub(crate) duration_s: f64,
    pub(crate) committed: u64,
    pub(crate) aborted: u64,
    pub(crate) committed_per_s: f64,
    pub(crate) records_per_s: f64,
    pub(crate) retries: u64,
    pub(crate) errors: u64,
    pub(crate) reinits: u64,
    pub(crate) failed_producers: usize,
    pub(crate) first_error: Option<String>,
    pub(crate) add_partitions: LatSummary,
    pub(crate) produce: LatSummary,
    pub(crate) end_txn: LatSummary,
    pub(crate) txn: LatSummary,
    /// EndTxn latency CDF: (quantile, µs).
    pub(crate) end_txn_cdf: Vec<(f64, u64)>,
    pub(crate) servers: Vec<ServerUsage>,
    /// The null broker over the window (`--null-broker-stats`).
    #[serde(default)]
    pub(crate) null_broker: Option<NullBrokerUsage>,
    /// The servers' CPU per transaction, alone and over the null broker's per request.
    #[serde(default)]
    pub(crate) shell: ShellCost,
    /// CPU seconds of this benchmark process inside the window.
    pub(crate) client_cpu_s: f64,
    /// Whole machine busy fraction inside the window (all cores = 1.0).
    pub(crate) machine_busy: f64,
    /// Busy fraction not explained by the servers and this client (other work on the machine).
    pub(crate) other_busy: f64,
    pub(crate) loadavg_start: f64,
    pub(crate) loadavg_end: f64,
    pub(crate) ncpu: usize,
}

fn ms(us: u64) -> String {
    #[allow(clippy::cast_precision_loss)]
    let v = us as f64 / 1000.0;
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// Prints the table of `results` to stdout.
pub(crate) fn print_table(results: &[RunResult]) {
    println!(
        "{:<14} {:>5} {:>3} {:>4} {:>10} {:>7} | {:>27} | {:>27} | {:>27} | {:>8} {:>8} {:>7}",
        "label",
        "prod",
        "ppt",
        "tv",
        "commit/s",
        "retries",
        "AddPartitions p50/p90/p99/p99.9",
        "Produce p50/p90/p99/p99.9",
        "EndTxn p50/p90/p99/p99.9 ms",
        "cpu/1k",
        "peakMiB",
        "other%"
    );
    for r in results {
        let q = |s: &LatSummary| {
            format!(
                "{}/{}/{}/{}",
                ms(s.p50_us),
                ms(s.p90_us),
                ms(s.p99_us),
                ms(s.p999_us)
            )
        };
        let cpu: f64 = r.servers.iter().map(|s| s.cpu_s_per_1000_txn).sum();
        let peak: f64 = r.servers.iter().map(|s| s.peak_rss_mib).sum();
        println!(
            "{:<14} {:>5} {:>3} {:>4} {:>10.0} {:>7} | {:>27} | {:>27} | {:>27} | {:>8.3} {:>8.1} {:>7.0}",
            r.label,
            r.producers,
            r.partitions_per_txn,
            r.txn_version,
            r.committed_per_s,
            r.retries,
            q(&r.add_partitions),
            q(&r.produce),
            q(&r.end_txn),
            cpu,
            peak,
            r.other_busy * 100.0
        );
        if r.failed_producers > 0 || r.errors > 0 {
            println!(
                "  ! {} producers failed, {} server errors; first: {}",
                r.failed_producers,
                r.errors,
                r.first_error.as_deref().unwrap_or("-")
            );
        }
    }
    for r in results {
        for s in &r.servers {
            println!(
                "  server {} (pid {}): {:.2} CPU s in window, {:.3} CPU s/1000 txn, RSS {:.1} MiB, peak {:.1} MiB",
                s.name, s.pid, s.cpu_s, s.cpu_s_per_1000_txn, s.rss_mib, s.peak_rss_mib
            );
        }
        if let Some(n) = &r.null_broker {
            let ratio = r
                .shell
                .overhead_vs_null
                .map_or_else(|| "-".to_owned(), |x| format!("{x:.1}"));
            println!(
                "  servers {:.1} CPU µs/txn; null broker {:.1} CPU µs/request ({} requests, {:.2} CPU s); {} requests/txn to the coordinator: {ratio} x the null broker's floor",
                r.shell.server_cpu_us_per_txn,
                n.cpu_us_per_request,
                n.requests,
                n.cpu_s,
                r.shell.coordinator_requests_per_txn
            );
        }
        println!(
            "  machine: {:.0}% busy of {} cores ({:.0}% not servers/client), load {:.2} -> {:.2}",
            r.machine_busy * 100.0,
            r.ncpu,
            r.other_busy * 100.0,
            r.loadavg_start,
            r.loadavg_end
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overhead_is_server_cpu_per_txn_over_the_null_floor() {
        let null = NullBrokerUsage {
            requests: 1000,
            cpu_s: 0.02,
            cpu_us_per_request: 20.0,
        };
        // 2 CPU s for 10_000 TV1 transactions: 200 µs/txn over 2 x 20 µs = 5.
        let c = ShellCost::of(2.0, 10_000, 1, Some(&null));
        assert!((c.server_cpu_us_per_txn - 200.0).abs() < 1e-9);
        assert_eq!(c.coordinator_requests_per_txn, 2.0);
        assert!((c.overhead_vs_null.expect("ratio") - 5.0).abs() < 1e-9);
        // TV2 sends one request per transaction.
        let c = ShellCost::of(2.0, 10_000, 2, Some(&null));
        assert!((c.overhead_vs_null.expect("ratio") - 10.0).abs() < 1e-9);
        assert!(
            ShellCost::of(2.0, 10_000, 1, None)
                .overhead_vs_null
                .is_none()
        );
        assert!(
            ShellCost::of(2.0, 0, 1, Some(&null))
                .overhead_vs_null
                .is_none()
        );
    }
}
