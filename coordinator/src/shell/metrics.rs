//! Prometheus metrics of the shell and the daemon (`prometheus-client` types, text encoding).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::{EngineMetrics, ErrorCode};

/// Labels of the per-API request counter.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct ApiLabels {
    /// Kafka API name, e.g. `InitProducerId`.
    pub api: String,
}

/// Labels of the per-API error counter.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct ApiErrorLabels {
    /// Kafka API name.
    pub api: String,
    /// Kafka error name, e.g. `CONCURRENT_TRANSACTIONS`.
    pub error: String,
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
    /// Marker jobs submitted and not yet reported.
    pub markers_pending: Gauge,
    /// Marker request retries (as reported by the marker sink).
    pub marker_retries: Gauge,
    /// Marker jobs submitted.
    pub marker_jobs: Counter,
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
    /// Group-commit batches of the sled log (daemon; set at scrape time).
    pub group_commit_batches: Gauge,
    /// Write requests committed in those batches (daemon; set at scrape time).
    pub group_commit_requests: Gauge,
    /// Largest group-commit batch (daemon; set at scrape time).
    pub group_commit_largest_batch: Gauge,
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
            transactions_begun: Counter::default(),
            transactions_committed: Counter::default(),
            transactions_aborted: Counter::default(),
            transactions_timed_out: Counter::default(),
            producers_fenced: Counter::default(),
            transactional_ids_expired: Counter::default(),
            markers_pending: Gauge::default(),
            marker_retries: Gauge::default(),
            marker_jobs: Counter::default(),
            partitions_loaded: Gauge::default(),
            partition_coordinator_epoch: Family::default(),
            partition_load_seconds: Histogram::new(exponential_buckets(0.001, 2.0, 16)),
            ids_loaded: Counter::default(),
            log_append_seconds: Histogram::new(exponential_buckets(0.0001, 2.0, 18)),
            log_append_failures: Counter::default(),
            connections: Gauge::default(),
            connections_rejected: Counter::default(),
            group_commit_batches: Gauge::default(),
            group_commit_requests: Gauge::default(),
            group_commit_largest_batch: Gauge::default(),
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
    }

    /// Counts one request of `api` answered with `error`.
    pub fn record(&self, api: &str, error: ErrorCode) {
        self.requests
            .get_or_create(&ApiLabels {
                api: api.to_owned(),
            })
            .inc();
        if !error.is_none() {
            let name = error
                .name()
                .map_or_else(|| error.0.to_string(), str::to_owned);
            self.errors
                .get_or_create(&ApiErrorLabels {
                    api: api.to_owned(),
                    error: name,
                })
                .inc();
        }
    }

    /// Adds the growth of an engine's counters between `before` and `after`.
    pub fn add_engine_delta(&self, before: &EngineMetrics, after: &EngineMetrics) {
        let d = |a: u64, b: u64| b.saturating_sub(a);
        self.transactions_begun
            .inc_by(d(before.transactions_begun, after.transactions_begun));
        self.transactions_committed.inc_by(d(
            before.transactions_committed,
            after.transactions_committed,
        ));
        self.transactions_aborted
            .inc_by(d(before.transactions_aborted, after.transactions_aborted));
        self.transactions_timed_out.inc_by(d(
            before.transactions_timed_out,
            after.transactions_timed_out,
        ));
        self.producers_fenced
            .inc_by(d(before.producers_fenced, after.producers_fenced));
        self.transactional_ids_expired.inc_by(d(
            before.transactional_ids_expired,
            after.transactional_ids_expired,
        ));
    }

    /// The Prometheus text exposition of `registry`.
    pub fn encode(registry: &Registry) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, registry);
        out
    }
}
