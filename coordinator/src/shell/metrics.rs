//! Prometheus metrics of the shell and the daemon (`prometheus-client` types, text encoding).

use std::borrow::Cow;

use prometheus_client::encoding::{EncodeLabelSet, EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::metrics::{MetricType, TypedMetric};
use prometheus_client::registry::Registry;

use crate::{EngineMetrics, ErrorCode};

/// Labels of the per-API request counter.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct ApiLabels {
    /// Kafka API name, e.g. `InitProducerId`.
    pub api: Cow<'static, str>,
}

/// Labels of the build information gauge.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct BuildLabels {
    /// The crate version, e.g. `0.1.0`.
    pub version: String,
}

/// A counter whose value mirrors a monotone count kept elsewhere (the marker writer's retries,
/// the sled log's group-commit totals), copied in with [`MirroredCounter::set`] before each
/// scrape. It is exposed as a Prometheus counter (`..._total`), as a cumulative value must be.
#[derive(Debug, Clone, Default)]
pub struct MirroredCounter(Gauge);

impl MirroredCounter {
    /// Copies in the current total (negative values read as 0); returns the previous one.
    pub fn set(&self, total: i64) -> i64 {
        self.0.set(total.max(0))
    }

    /// The current total.
    pub fn get(&self) -> i64 {
        self.0.get()
    }
}

impl TypedMetric for MirroredCounter {
    const TYPE: MetricType = MetricType::Counter;
}

impl EncodeMetric for MirroredCounter {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let v = u64::try_from(self.0.get()).unwrap_or(0);
        encoder.encode_counter::<NoLabelSet, _, u64>(&v, None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

/// The constructor of the per-API request latency histograms.
type HistogramFn = fn() -> Histogram;

/// Buckets of the request latency histograms: 100 µs to about 13 s, doubling.
fn request_duration_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.0001, 2.0, 18))
}

/// Labels of the per-API error counter.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct ApiErrorLabels {
    /// Kafka API name.
    pub api: Cow<'static, str>,
    /// Kafka error name, e.g. `CONCURRENT_TRANSACTIONS` (the number for a code without one).
    pub error: Cow<'static, str>,
}

/// Labels of the per-log-partition gauges.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct LogPartitionLabels {
    /// The `__transaction_state` partition number.
    pub partition: String,
}

impl LogPartitionLabels {
    /// The labels of `partition`.
    pub fn of(partition: txn_log::LogPartition) -> Self {
        Self {
            partition: partition.0.to_string(),
        }
    }
}

/// Every metric the shell and the daemon export. Cheap to clone (handles share the values).
#[derive(Debug, Clone)]
pub struct Metrics {
    /// Requests by API.
    pub requests: Family<ApiLabels, Counter>,
    /// Error answers by API and error.
    pub errors: Family<ApiErrorLabels, Counter>,
    /// Seconds from a request frame read to its response encoded, by API (daemon).
    pub request_duration_seconds: Family<ApiLabels, Histogram, HistogramFn>,
    /// Transactions begun.
    pub transactions_begun: Counter,
    /// Transactions committed (CompleteCommit durable).
    pub transactions_committed: Counter,
    /// Transactions aborted (CompleteAbort durable).
    pub transactions_aborted: Counter,
    /// Transactions aborted by the timeout reaper.
    pub transactions_timed_out: Counter,
    /// Producers fenced by an epoch bump.
    pub producers_fenced: Counter,
    /// Transactional ids removed by expiry.
    pub transactional_ids_expired: Counter,
    /// Requests parked until their id's previous transaction completed (`txn.park.max.ms`).
    pub requests_parked: Counter,
    /// Parked requests answered CONCURRENT_TRANSACTIONS after the whole wait.
    pub parked_requests_timed_out: Counter,
    /// Marker jobs submitted and not yet reported.
    pub markers_pending: Gauge,
    /// Partition markers a participant refused for good (INVALID_PRODUCER_EPOCH,
    /// TRANSACTION_COORDINATOR_FENCED).
    pub markers_refused: Counter,
    /// Decided transactions held because a participant refused their markers.
    pub transactions_refused: Gauge,
    /// Marker request retries (as reported by the marker sink; a counter).
    pub marker_retries: MirroredCounter,
    /// Marker jobs submitted.
    pub marker_jobs: Counter,
    /// Marker decisions the writer had no room for at once (backpressure); each counted once.
    pub marker_submissions_deferred: Counter,
    /// Marker decisions waiting in the partition drivers for room in the writer.
    pub markers_deferred: Gauge,
    /// Log partitions currently loaded.
    pub partitions_loaded: Gauge,
    /// The coordinator epoch of each log partition this node serves (a partition it does not
    /// serve has no series).
    pub partition_coordinator_epoch: Family<LogPartitionLabels, Gauge>,
    /// Seconds to claim, read and replay one log partition.
    pub partition_load_seconds: Histogram,
    /// Transactional ids replayed by loads.
    pub ids_loaded: Counter,
    /// Seconds from `TxnLog::append` call to durable.
    pub log_append_seconds: Histogram,
    /// Log appends that failed.
    pub log_append_failures: Counter,
    /// Open client connections (daemon).
    pub connections: Gauge,
    /// Connections closed because of bad input (daemon).
    pub connections_rejected: Counter,
    /// Group-commit batches of the sled log (daemon; set at scrape time; a counter).
    pub group_commit_batches: MirroredCounter,
    /// Write requests committed in those batches (daemon; set at scrape time; a counter).
    pub group_commit_requests: MirroredCounter,
    /// Largest group-commit batch (daemon; set at scrape time).
    pub group_commit_largest_batch: Gauge,
    /// Always 1, labelled with the version of this build.
    pub build_info: Family<BuildLabels, Gauge>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Fresh, unregistered metrics.
    pub fn new() -> Self {
        Self {
            requests: Family::default(),
            errors: Family::default(),
            request_duration_seconds: Family::new_with_constructor(request_duration_histogram),
            transactions_begun: Counter::default(),
            transactions_committed: Counter::default(),
            transactions_aborted: Counter::default(),
            transactions_timed_out: Counter::default(),
            producers_fenced: Counter::default(),
            transactional_ids_expired: Counter::default(),
            requests_parked: Counter::default(),
            parked_requests_timed_out: Counter::default(),
            markers_pending: Gauge::default(),
            markers_refused: Counter::default(),
            transactions_refused: Gauge::default(),
            marker_retries: MirroredCounter::default(),
            marker_jobs: Counter::default(),
            marker_submissions_deferred: Counter::default(),
            markers_deferred: Gauge::default(),
            partitions_loaded: Gauge::default(),
            partition_coordinator_epoch: Family::default(),
            partition_load_seconds: Histogram::new(exponential_buckets(0.001, 2.0, 16)),
            ids_loaded: Counter::default(),
            log_append_seconds: Histogram::new(exponential_buckets(0.0001, 2.0, 18)),
            log_append_failures: Counter::default(),
            connections: Gauge::default(),
            connections_rejected: Counter::default(),
            group_commit_batches: MirroredCounter::default(),
            group_commit_requests: MirroredCounter::default(),
            group_commit_largest_batch: Gauge::default(),
            build_info: {
                let f = Family::<BuildLabels, Gauge>::default();
                f.get_or_create(&BuildLabels {
                    version: env!("CARGO_PKG_VERSION").to_owned(),
                })
                .set(1);
                f
            },
        }
    }

    /// Registers every metric under the `txn_coordinator` prefix.
    pub fn register(&self, registry: &mut Registry) {
        let r = registry.sub_registry_with_prefix("txn_coordinator");
        r.register("requests", "Requests by API", self.requests.clone());
        r.register(
            "errors",
            "Error answers by API and error code",
            self.errors.clone(),
        );
        r.register(
            "request_duration_seconds",
            "Time from a request read to its response ready, by API",
            self.request_duration_seconds.clone(),
        );
        r.register(
            "transactions_begun",
            "Transactions begun",
            self.transactions_begun.clone(),
        );
        r.register(
            "transactions_committed",
            "Transactions committed (CompleteCommit durable)",
            self.transactions_committed.clone(),
        );
        r.register(
            "transactions_aborted",
            "Transactions aborted (CompleteAbort durable)",
            self.transactions_aborted.clone(),
        );
        r.register(
            "transactions_timed_out",
            "Transactions aborted by the timeout reaper",
            self.transactions_timed_out.clone(),
        );
        r.register(
            "requests_parked",
            "Requests held until their transactional id's previous transaction completed",
            self.requests_parked.clone(),
        );
        r.register(
            "parked_requests_timed_out",
            "Held requests answered CONCURRENT_TRANSACTIONS after txn.park.max.ms",
            self.parked_requests_timed_out.clone(),
        );
        r.register(
            "producers_fenced",
            "Producers fenced by a coordinator epoch bump",
            self.producers_fenced.clone(),
        );
        r.register(
            "transactional_ids_expired",
            "Transactional ids removed after transactional.id.expiration.ms",
            self.transactional_ids_expired.clone(),
        );
        r.register(
            "markers_pending",
            "Marker jobs submitted and not yet finished",
            self.markers_pending.clone(),
        );
        r.register(
            "markers_refused",
            "Partition markers a participant refused for good (INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED)",
            self.markers_refused.clone(),
        );
        r.register(
            "transactions_refused",
            "Decided transactions held because a participant refused their markers (describe them; force-terminate once the participant is fixed)",
            self.transactions_refused.clone(),
        );
        r.register(
            "marker_retries",
            "WriteTxnMarkers retries reported by the marker writer",
            self.marker_retries.clone(),
        );
        r.register(
            "marker_jobs",
            "Marker jobs submitted",
            self.marker_jobs.clone(),
        );
        r.register(
            "marker_submissions_deferred",
            "Marker decisions that waited for room in the marker writer (backpressure)",
            self.marker_submissions_deferred.clone(),
        );
        r.register(
            "markers_deferred",
            "Marker decisions waiting for room in the marker writer",
            self.markers_deferred.clone(),
        );
        r.register(
            "partitions_loaded",
            "Transaction log partitions loaded and served",
            self.partitions_loaded.clone(),
        );
        r.register(
            "partition_coordinator_epoch",
            "Coordinator epoch of each transaction log partition served here",
            self.partition_coordinator_epoch.clone(),
        );
        r.register(
            "partition_load_seconds",
            "Time to claim, read and replay one log partition",
            self.partition_load_seconds.clone(),
        );
        r.register(
            "ids_loaded",
            "Transactional ids replayed by loads",
            self.ids_loaded.clone(),
        );
        r.register(
            "log_append_seconds",
            "Transaction log append latency (call to durable)",
            self.log_append_seconds.clone(),
        );
        r.register(
            "log_append_failures",
            "Transaction log appends that failed",
            self.log_append_failures.clone(),
        );
        r.register(
            "connections",
            "Open client connections",
            self.connections.clone(),
        );
        r.register(
            "connections_rejected",
            "Connections closed for bad input or over the connection limit",
            self.connections_rejected.clone(),
        );
        r.register(
            "group_commit_batches",
            "Group-commit batches of the sled log (batch size = requests / batches)",
            self.group_commit_batches.clone(),
        );
        r.register(
            "group_commit_requests",
            "Write requests committed in group-commit batches",
            self.group_commit_requests.clone(),
        );
        r.register(
            "group_commit_largest_batch",
            "Largest group-commit batch",
            self.group_commit_largest_batch.clone(),
        );
        r.register(
            "build_info",
            "Build information: always 1, labelled with the version",
            self.build_info.clone(),
        );
    }

    /// Records how long one request of `api` took, from its frame read to its response ready.
    /// A `&'static str` name costs no allocation once its series exists.
    pub fn observe_request(&self, api: impl Into<Cow<'static, str>>, elapsed: std::time::Duration) {
        self.request_duration_seconds
            .get_or_create(&ApiLabels { api: api.into() })
            .observe(elapsed.as_secs_f64());
    }

    /// Whether `partition` is loaded and served here: its coordinator-epoch series exists
    /// exactly from the end of its load until it is unloaded or its driver stops.
    pub fn is_partition_loaded(&self, partition: txn_log::LogPartition) -> bool {
        self.partition_coordinator_epoch
            .get(&LogPartitionLabels::of(partition))
            .is_some()
    }

    /// Counts one request of `api` answered with `error`. A `&'static str` name and a named
    /// error code cost no allocation once their series exist.
    pub fn record(&self, api: impl Into<Cow<'static, str>>, error: ErrorCode) {
        let api = api.into();
        if !error.is_none() {
            let name = error
                .name()
                .map_or_else(|| Cow::Owned(error.0.to_string()), Cow::Borrowed);
            self.errors
                .get_or_create(&ApiErrorLabels {
                    api: api.clone(),
                    error: name,
                })
                .inc();
        }
        self.requests.get_or_create(&ApiLabels { api }).inc();
    }

    /// Adds the growth of an engine's counters between `before` and `after`.
    pub fn add_engine_delta(&self, before: &EngineMetrics, after: &EngineMetrics) {
        let (b, a) = (before, after);
        let counters = [
            (
                &self.transactions_begun,
                b.transactions_begun,
                a.transactions_begun,
            ),
            (
                &self.transactions_committed,
                b.transactions_committed,
                a.transactions_committed,
            ),
            (
                &self.transactions_aborted,
                b.transactions_aborted,
                a.transactions_aborted,
            ),
            (
                &self.transactions_timed_out,
                b.transactions_timed_out,
                a.transactions_timed_out,
            ),
            (
                &self.producers_fenced,
                b.producers_fenced,
                a.producers_fenced,
            ),
            (
                &self.transactional_ids_expired,
                b.transactional_ids_expired,
                a.transactional_ids_expired,
            ),
            (&self.requests_parked, b.requests_parked, a.requests_parked),
            (
                &self.parked_requests_timed_out,
                b.parked_requests_timed_out,
                a.parked_requests_timed_out,
            ),
            (&self.markers_refused, b.markers_refused, a.markers_refused),
        ];
        // Shared by every driver: a counter that did not move is not written.
        for (counter, was, is) in counters {
            let d = is.saturating_sub(was);
            if d > 0 {
                counter.inc_by(d);
            }
        }
    }

    /// The Prometheus text exposition of `registry`.
    pub fn encode(registry: &Registry) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_histograms_counters_and_build_info_are_exposed() {
        let m = Metrics::new();
        let mut registry = Registry::default();
        m.register(&mut registry);
        m.observe_request("EndTxn", std::time::Duration::from_millis(3));
        m.observe_request("EndTxn", std::time::Duration::from_millis(30));
        m.record("EndTxn", ErrorCode::CONCURRENT_TRANSACTIONS);
        m.record(String::from("EndTxn"), ErrorCode(-42));
        m.marker_retries.set(4);
        m.group_commit_batches.set(7);
        m.group_commit_requests.set(-1);
        let text = Metrics::encode(&registry);
        assert!(
            text.contains("# TYPE txn_coordinator_request_duration_seconds histogram"),
            "{text}"
        );
        assert!(
            text.contains("txn_coordinator_request_duration_seconds_count{api=\"EndTxn\"} 2"),
            "{text}"
        );
        assert!(
            text.contains(
                "txn_coordinator_request_duration_seconds_bucket{le=\"0.0064\",api=\"EndTxn\"} 1"
            ) || text.contains(
                "txn_coordinator_request_duration_seconds_bucket{api=\"EndTxn\",le=\"0.0064\"} 1"
            ),
            "{text}"
        );
        for series in [
            "txn_coordinator_requests_total{api=\"EndTxn\"} 2",
            "txn_coordinator_errors_total{api=\"EndTxn\",error=\"CONCURRENT_TRANSACTIONS\"} 1",
            "txn_coordinator_errors_total{api=\"EndTxn\",error=\"-42\"} 1",
        ] {
            assert!(text.contains(series), "{series} missing from {text}");
        }
        assert!(
            text.contains("# TYPE txn_coordinator_marker_retries counter")
                && text.contains("txn_coordinator_marker_retries_total 4"),
            "{text}"
        );
        assert!(
            text.contains("txn_coordinator_group_commit_batches_total 7")
                && text.contains("txn_coordinator_group_commit_requests_total 0"),
            "{text}"
        );
        assert!(
            text.contains(&format!(
                "txn_coordinator_build_info{{version=\"{}\"}} 1",
                env!("CARGO_PKG_VERSION")
            )),
            "{text}"
        );
        // Every cumulative series is a counter: nothing typed gauge ends in _total.
        for line in text.lines().filter(|l| l.starts_with("# TYPE ")) {
            let mut w = line.split_whitespace().skip(2);
            let (name, kind) = (w.next().unwrap_or(""), w.next().unwrap_or(""));
            assert!(!(kind == "gauge" && name.ends_with("_total")), "{line}");
        }
    }

    #[test]
    fn a_partition_is_loaded_while_its_epoch_series_exists() {
        let m = Metrics::new();
        let p = txn_log::LogPartition(3);
        assert!(!m.is_partition_loaded(p));
        m.partition_coordinator_epoch
            .get_or_create(&LogPartitionLabels::of(p))
            .set(2);
        assert!(m.is_partition_loaded(p));
        m.partition_coordinator_epoch
            .remove(&LogPartitionLabels::of(p));
        assert!(!m.is_partition_loaded(p));
    }
}
