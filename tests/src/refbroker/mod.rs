//! `refbroker`: the smallest honest Kafka broker around the markers participant library.
//!
//! It is a reference and a test rig, **not a production broker**: one replica per partition,
//! no retention, no compaction, no quotas, everything of a partition under one
//! lock. What it serves it serves correctly: record batches v2 with idempotent and
//! transactional validation (through [`markers::participant`]), read_committed fetches with
//! the last stable offset and aborted-transaction index, transaction markers written as
//! Kafka's control batches, transactional offset commits that become visible only with the
//! COMMIT marker, and the classic consumer-group protocol.
//!
//! See `docs/broker-integration.md` for the API table and how the pieces fit.

mod cli;
mod cluster;
mod embedded;
mod groups;
mod handlers;
mod journal;
mod log;
mod metrics;
mod offsets;
mod partition;
pub mod process;
mod security;
mod server;
mod txn;
mod verify;

pub use cli::{Args, CoordinatorMode, parse_args};
pub use cluster::{Cluster, NodeAddr};
pub use server::{Broker, run};

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;

/// The `__consumer_offsets` topic.
pub const CONSUMER_OFFSETS: &str = "__consumer_offsets";
/// The `__transaction_state` topic name (only used for placement in embedded mode).
pub const TRANSACTION_STATE: &str = "__transaction_state";

/// Broker configuration (built by [`parse_args`] from the command line).
#[derive(Debug, Clone)]
pub struct Config {
    /// Address to bind (`--listen`): the one PLAINTEXT listener; `None` when the key
    /// `listeners` names the listeners instead.
    pub listen: Option<SocketAddr>,
    /// Data directory (the partitions' journal; the coordinator's log in embedded mode).
    pub data_dir: PathBuf,
    /// User topics and their partition counts.
    pub topics: Vec<(String, i32)>,
    /// This node's id.
    pub node_id: i32,
    /// All nodes (`--cluster`); when empty, the single node `node_id` at the bound address.
    pub cluster: BTreeMap<i32, NodeAddr>,
    /// Where the transaction coordinator lives.
    pub coordinator: CoordinatorMode,
    /// Partitions of `__consumer_offsets` (`offsets.topic.num.partitions`, 50).
    pub offsets_partitions: i32,
    /// `--set KEY=VALUE` tuning knobs (see [`cli`](parse_args) for the keys).
    pub settings: BTreeMap<String, String>,
    /// `--metrics-listen`: where `/metrics`, `/health` and `/ready` are served (none: off).
    pub metrics_listen: Option<SocketAddr>,
}

impl Config {
    /// A `--set` value parsed as an integer, or `default`.
    pub fn setting_i64(&self, key: &str, default: i64) -> i64 {
        self.settings
            .get(key)
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    }
}
