//! The command line (a contract the end-to-end tests rely on):
//!
//! ```text
//! refbroker --listen HOST:PORT --data-dir DIR --topics NAME:PARTITIONS[,...]
//!           (--embedded-coordinator | --coordinator HOST:PORT[,HOST:PORT...] [--coordinator-node-id N])
//!           [--node-id N --cluster 1=HOST:PORT,2=HOST:PORT,...]
//!           [--offsets-partitions N] [--set KEY=VALUE]...
//! ```
//!
//! `--coordinator` with several addresses names the daemons of a cluster on etcd: any live one
//! is asked (FindCoordinator is relayed to it, so clients learn the owner of their id), and
//! Metadata lists the daemons that answered the last probe (see `txn.rs`).
//!
//! `--listen HOST:0` binds a free port; the broker prints `refbroker listening on ADDR` on
//! stdout once it accepts connections. `--set` keys:
//!
//! | key | default | meaning |
//! |---|---|---|
//! | `group.initial.rebalance.delay.ms` | 0 | wait before the first rebalance of an empty group completes |
//! | `group.min.session.timeout.ms` | 1000 | smallest session timeout accepted |
//! | `group.max.session.timeout.ms` | 300000 | largest session timeout accepted |
//! | `fetch.max.wait.ms` | 1000 | cap on a Fetch's `max_wait_ms` |
//! | `log.flush` | `fsync` | `fsync`: acks=all appends, markers and offset commits are fdatasync'd (one group commit of the broker's journal) before they are answered, and the high watermark covers only synced data; `none`: no fsync (Kafka's default), appends written to the OS in order |
//! | `transaction.version` | `2` (Kafka 4.x's default) | the level finalized in ApiVersions (0, 1 or 2). 2: Produce v12, TxnOffsetCommit v5 and (standalone) EndTxn v5 are listed and a first transactional append of a v12 / v5 request adds the partition to the transaction (KIP-890 part 2), so Kafka's Java client 4.x uses transaction version 2; embedded, the key also configures the coordinator |
//! | `coordinator.security.protocol`, `coordinator.ssl.*`, `coordinator.sasl.*` | `PLAINTEXT` | security of the connections to the standalone daemons (forwarded requests, probes, KIP-890 verification): Kafka's client keys `security.protocol`, `ssl.truststore.location`, `ssl.keystore.location`, `ssl.endpoint.identification.algorithm`, `sasl.mechanism`, `sasl.jaas.config` under `coordinator.`, read as the daemon reads its `broker.*` keys (`docs/security.md`) |
//! | `transaction.partition.verification.enable` | `true` | KIP-890 part 1: before a producer's first transactional append to a partition (Produce, TxnOffsetCommit), ask the coordinator whether the partition is in its transaction (`markers::verify`, see `verify.rs`); `false`: append without asking, as Kafka with the same setting |
//!
//! Security, with the daemon's keys and code (`docs/security.md`, "refbroker"):
//!
//! | key | default | meaning |
//! |---|---|---|
//! | `listeners` | (none) | `NAME://HOST:PORT,...` with PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL listeners; replaces `--listen` (both: refused) |
//! | `advertised.listeners` | (none) | what Metadata and FindCoordinator name this broker as, per listener (a client is told the address of the listener it came through) |
//! | `listener.security.protocol.map` | (none) | `NAME:PROTOCOL,...` for other listener names |
//! | `ssl.keystore.location`, `ssl.truststore.location`, `ssl.client.auth`, `ssl.keystore.type`, `ssl.truststore.type` | (none), (none), `none`, PEM, PEM | TLS of SSL and SASL_SSL listeners; with a client certificate on an SSL listener the principal is `User:<subject DN>` |
//! | `sasl.enabled.mechanisms`, `sasl.jaas.config`, `sasl.server.max.receive.size` | both SCRAM (+ PLAIN with a PLAIN JAAS configuration), (none), 524288 | SASL listeners: PLAIN users from a `PlainLoginModule` configuration, SCRAM-SHA-256/512 credentials from the log backend |
//! | `listener.name.<listener>.<key>` | (none) | per-listener forms of the `ssl.*` keys, `sasl.enabled.mechanisms`, `<mechanism>.sasl.jaas.config` |
//! | `inter.broker.listener.name`, `sasl.mechanism.inter.broker.protocol`, `ssl.endpoint.identification.algorithm` | the first listener, (none), `https` | the nodes of an embedded `--cluster` talk to each other (markers, KIP-890 verification, etcd probes) on this listener with its TLS settings as a client and, on a SASL listener, this mechanism and the login of the listener's `<mechanism>.sasl.jaas.config` |
//! | `txn.scram.credentials` | (none) | SCRAM credentials in memory, `SCRAM-SHA-512=[name=alice,password=...]` (tests and trials) |
//! | `authorizer.class.name`, `super.users`, `allow.everyone.if.no.acl.found` | (none), (none), false | Kafka's ACLs, checked per API as Kafka's `KafkaApis`; ACLs and SCRAM credentials in `<data-dir>/txn-log` (sled) or etcd |
//!
//! Every key of `txn-coordinator serve --set` (`coordinator::server::KEYS`, e.g.
//! `transaction.max.timeout.ms`, `transaction.abort.timed.out.transaction.cleanup.interval.ms`,
//! `transaction.state.log.num.partitions`, `transaction.version`) is also accepted and
//! configures the embedded coordinator; `offsets.topic.num.partitions` is the same as
//! `--offsets-partitions`. Unknown keys are refused.

use std::collections::BTreeMap;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;

use anyhow::{Context, bail};
use clap::Parser;

use super::{Config, NodeAddr};

/// `--set` keys the broker itself reads.
const BROKER_KEYS: &[&str] = &[
    "group.initial.rebalance.delay.ms",
    "group.min.session.timeout.ms",
    "group.max.session.timeout.ms",
    "fetch.max.wait.ms",
    "log.flush",
    markers::verify::VERIFICATION_ENABLE_KEY,
];

/// Where the transaction coordinator runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CoordinatorMode {
    /// In this process (`--embedded-coordinator`).
    Embedded,
    /// Standalone `txn-coordinator` daemons (`--coordinator HOST:PORT[,HOST:PORT...]`).
    Standalone {
        /// Their addresses (at least one).
        addrs: Vec<NodeAddr>,
        /// The node id Metadata gives a single daemon until it has been probed
        /// (`--coordinator-node-id`, default 1000).
        node_id: i32,
    },
}

fn parse_addr(s: &str) -> anyhow::Result<NodeAddr> {
    let (host, port) = s
        .rsplit_once(':')
        .with_context(|| format!("{s:?} is not HOST:PORT"))?;
    let port = port.parse().with_context(|| format!("bad port in {s:?}"))?;
    Ok(NodeAddr {
        host: host.to_owned(),
        port,
    })
}

/// The command line as given (values checked by [`Args::into_config`]). Every flag but
/// `--topics`, `--cluster` and `--set` (which add up when repeated) may be repeated; the last
/// one counts.
#[derive(Debug, Parser)]
#[command(
    name = "refbroker",
    about = "Reference Kafka broker of the txn-coordinator test suite (a test rig, not a production broker)",
    long_about = None,
    args_override_self = true,
    after_help = "Tuning keys (--set KEY=VALUE): group.initial.rebalance.delay.ms (0), \
                  group.min.session.timeout.ms (1000), group.max.session.timeout.ms (300000), \
                  fetch.max.wait.ms (1000), log.flush (fsync | none), \
                  transaction.partition.verification.enable (true | false), and every key of \
                  `txn-coordinator serve --set` for the embedded coordinator; the daemon's \
                  listener, TLS, SASL and authorizer keys (listeners, ssl.*, sasl.*, \
                  authorizer.class.name, ...) secure the broker (docs/security.md). \
                  See docs/broker-integration.md."
)]
pub struct Args {
    /// Address to accept clients on; port 0 picks a free one (printed on stdout as
    /// `refbroker listening on ADDR`). Required unless the key `listeners` is set.
    #[arg(long, value_name = "HOST:PORT", allow_hyphen_values = true)]
    pub listen: Option<String>,
    /// Directory of the broker's journal (every partition's batches, offsets included).
    /// Required.
    #[arg(long = "data-dir", value_name = "DIR", allow_hyphen_values = true)]
    pub data_dir: Option<PathBuf>,
    /// Topics this broker hosts (repeatable).
    #[arg(long, value_name = "NAME:PARTITIONS[,...]", allow_hyphen_values = true)]
    pub topics: Vec<String>,
    /// This broker's id (default 1).
    #[arg(long = "node-id", value_name = "N", allow_hyphen_values = true)]
    pub node_id: Option<String>,
    /// Every broker of the cluster with its id, this one included (repeatable).
    #[arg(long, value_name = "ID=HOST:PORT[,...]", allow_hyphen_values = true)]
    pub cluster: Vec<String>,
    /// Run the transaction coordinator in this process.
    #[arg(long = "embedded-coordinator")]
    pub embedded_coordinator: bool,
    /// Standalone txn-coordinator daemons (several: a coordinator cluster on etcd).
    #[arg(long, value_name = "HOST:PORT[,...]", allow_hyphen_values = true)]
    pub coordinator: Option<String>,
    /// Node id Metadata gives a single daemon until it has been probed (default 1000).
    #[arg(
        long = "coordinator-node-id",
        value_name = "N",
        allow_hyphen_values = true
    )]
    pub coordinator_node_id: Option<String>,
    /// Partitions of __consumer_offsets (default 50).
    #[arg(
        long = "offsets-partitions",
        value_name = "N",
        allow_hyphen_values = true
    )]
    pub offsets_partitions: Option<String>,
    /// A tuning or coordinator key (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE", allow_hyphen_values = true)]
    pub set: Vec<String>,
    /// Serve /metrics (Prometheus), /health and /ready on HOST:PORT, as the daemon's flag.
    #[arg(
        long = "metrics-listen",
        value_name = "HOST:PORT",
        allow_hyphen_values = true
    )]
    pub metrics_listen: Option<String>,
}

/// Parses the command line (without the program name). `--help` comes back as an error
/// carrying the help text; the binary uses [`Args::parse`] and [`Args::into_config`].
pub fn parse_args(args: impl IntoIterator<Item = String>) -> anyhow::Result<Config> {
    let a = Args::try_parse_from(std::iter::once("refbroker".to_owned()).chain(args))
        .map_err(|e| anyhow::anyhow!("{}", e.to_string().trim_end()))?;
    a.into_config()
}

impl Args {
    /// Checks the values and builds the broker configuration.
    pub fn into_config(self) -> anyhow::Result<Config> {
        let mut listen: Option<SocketAddr> = None;
        if let Some(v) = &self.listen {
            listen = Some(
                v.to_socket_addrs()
                    .with_context(|| format!("cannot resolve {v:?}"))?
                    .next()
                    .with_context(|| format!("{v:?} resolves to nothing"))?,
            );
        }
        let data_dir = self.data_dir;
        let mut topics = Vec::new();
        for value in &self.topics {
            for t in value.split(',').filter(|t| !t.is_empty()) {
                let (name, n) = t
                    .rsplit_once(':')
                    .with_context(|| format!("topic {t:?} is not NAME:PARTITIONS"))?;
                let n: i32 = n.parse().with_context(|| format!("bad count in {t:?}"))?;
                if n <= 0 || name.is_empty() || name.starts_with("__") {
                    bail!("topic {t:?}: need a non-internal name and a positive count");
                }
                topics.push((name.to_owned(), n));
            }
        }
        let node_id: i32 = match &self.node_id {
            Some(v) => v.parse().context("--node-id")?,
            None => 1,
        };
        let mut cluster = BTreeMap::new();
        for value in &self.cluster {
            for n in value.split(',').filter(|n| !n.is_empty()) {
                let (id, addr) = n
                    .split_once('=')
                    .with_context(|| format!("cluster entry {n:?} is not ID=HOST:PORT"))?;
                cluster.insert(id.parse().context("cluster node id")?, parse_addr(addr)?);
            }
        }
        let embedded = self.embedded_coordinator;
        let coordinator = match &self.coordinator {
            Some(v) => {
                let addrs = v
                    .split(',')
                    .filter(|a| !a.is_empty())
                    .map(parse_addr)
                    .collect::<anyhow::Result<Vec<_>>>()?;
                if addrs.is_empty() {
                    bail!("--coordinator needs at least one HOST:PORT");
                }
                Some(addrs)
            }
            None => None,
        };
        let coordinator_node_id: i32 = match &self.coordinator_node_id {
            Some(v) => v.parse().context("--coordinator-node-id")?,
            None => 1000,
        };
        let offsets_partitions: Option<i32> = match &self.offsets_partitions {
            Some(v) => Some(v.parse().context("--offsets-partitions")?),
            None => None,
        };
        let mut settings = BTreeMap::new();
        for v in &self.set {
            let (k, val) = v
                .split_once('=')
                .with_context(|| format!("--set {v:?} is not KEY=VALUE"))?;
            settings.insert(k.to_owned(), val.to_owned());
        }
        let metrics_listen = match &self.metrics_listen {
            Some(v) => Some(
                v.to_socket_addrs()
                    .with_context(|| format!("--metrics-listen: cannot resolve {v:?}"))?
                    .next()
                    .with_context(|| format!("--metrics-listen: {v:?} resolves to nothing"))?,
            ),
            None => None,
        };
        let mut config = check(
            listen,
            data_dir,
            topics,
            node_id,
            cluster,
            embedded,
            coordinator,
            coordinator_node_id,
            offsets_partitions,
            settings,
        )?;
        config.metrics_listen = metrics_listen;
        Ok(config)
    }
}

/// The checks across flags.
#[allow(clippy::too_many_arguments)]
fn check(
    listen: Option<SocketAddr>,
    data_dir: Option<PathBuf>,
    topics: Vec<(String, i32)>,
    node_id: i32,
    cluster: BTreeMap<i32, NodeAddr>,
    embedded: bool,
    coordinator: Option<Vec<NodeAddr>>,
    coordinator_node_id: i32,
    offsets_partitions: Option<i32>,
    settings: BTreeMap<String, String>,
) -> anyhow::Result<Config> {
    let coordinator = match (embedded, coordinator) {
        (true, None) => CoordinatorMode::Embedded,
        (false, Some(addrs)) => CoordinatorMode::Standalone {
            addrs,
            node_id: coordinator_node_id,
        },
        _ => bail!("give exactly one of --embedded-coordinator and --coordinator HOST:PORT"),
    };
    if !cluster.is_empty() && !cluster.contains_key(&node_id) {
        bail!("--cluster does not list this node's id {node_id}");
    }
    for k in settings.keys() {
        if !BROKER_KEYS.contains(&k.as_str())
            && !super::embedded::is_coordinator_key(k)
            && !coordinator::server::outgoing::is_client_key(super::txn::DAEMON_KEY_PREFIX, k)
        {
            bail!("unknown --set key {k:?}");
        }
    }
    if let Some(v) = settings.get("log.flush")
        && super::journal::Flush::parse(v).is_none()
    {
        bail!("log.flush={v:?}: expected fsync or none");
    }
    let mut verification = markers::verify::VerificationConfig::default();
    for (k, v) in &settings {
        verification.set(k, v)?;
    }
    let from_set: Option<i32> = match settings.get("offsets.topic.num.partitions") {
        Some(v) => Some(v.parse().context("offsets.topic.num.partitions")?),
        None => None,
    };
    let offsets_partitions = match (offsets_partitions, from_set) {
        (Some(a), Some(b)) if a != b => {
            bail!("--offsets-partitions {a} contradicts offsets.topic.num.partitions={b}")
        }
        (a, b) => a.or(b).unwrap_or(50),
    };
    if offsets_partitions <= 0 {
        bail!("--offsets-partitions must be positive");
    }
    if let CoordinatorMode::Standalone { node_id: c, .. } = &coordinator
        && cluster.contains_key(c)
    {
        bail!("--coordinator-node-id {c} collides with a broker id");
    }
    // The key `listeners` replaces --listen (as the daemon's; checked again at start).
    let listen = match (listen, settings.contains_key("listeners")) {
        (Some(_), true) => bail!("give --listen or the key listeners, not both"),
        (None, false) => bail!("--listen is required"),
        (l, _) => l,
    };
    Ok(Config {
        listen,
        data_dir: data_dir.context("--data-dir is required")?,
        topics,
        node_id,
        cluster,
        coordinator,
        offsets_partitions,
        settings,
        metrics_listen: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn the_documented_command_lines_parse() {
        let c = parse_args(args(
            "--listen 127.0.0.1:9092 --data-dir /tmp/x --topics a:3,b:1 --embedded-coordinator",
        ))
        .unwrap();
        assert_eq!(c.topics, vec![("a".into(), 3), ("b".into(), 1)]);
        assert_eq!(c.coordinator, CoordinatorMode::Embedded);
        let c = parse_args(args(
            "--listen 127.0.0.1:9093 --data-dir d --topics a:1 --coordinator 127.0.0.1:9000 \
             --node-id 2 --cluster 1=127.0.0.1:9092,2=127.0.0.1:9093 --set fetch.max.wait.ms=50",
        ))
        .unwrap();
        assert_eq!(c.node_id, 2);
        assert_eq!(c.cluster.len(), 2);
        assert_eq!(c.setting_i64("fetch.max.wait.ms", 0), 50);
        assert!(matches!(
            c.coordinator,
            CoordinatorMode::Standalone { node_id: 1000, .. }
        ));
        let c = parse_args(args(
            "--listen 127.0.0.1:9093 --data-dir d --topics a:1 \
             --coordinator 127.0.0.1:9000,127.0.0.1:9001,h:9002",
        ))
        .unwrap();
        let CoordinatorMode::Standalone { addrs, .. } = c.coordinator else {
            panic!("standalone expected");
        };
        let ports: Vec<u16> = addrs.iter().map(|a| a.port).collect();
        assert_eq!(ports, [9000, 9001, 9002]);
    }

    #[test]
    fn the_key_listeners_replaces_listen() {
        let c = parse_args(args(
            "--data-dir d --topics a:1 --embedded-coordinator \
             --set listeners=SASL_SSL://127.0.0.1:0 --set sasl.enabled.mechanisms=SCRAM-SHA-512 \
             --set listener.name.sasl_ssl.ssl.client.auth=none",
        ))
        .unwrap();
        assert_eq!(c.listen, None);
        assert!(
            parse_args(args(
                "--listen 127.0.0.1:1 --data-dir d --topics a:1 --embedded-coordinator \
                 --set listeners=SASL_SSL://127.0.0.1:0",
            ))
            .is_err()
        );
    }

    #[test]
    fn log_flush_takes_fsync_or_none() {
        for v in ["fsync", "none"] {
            let c = parse_args(args(&format!(
                "--listen 127.0.0.1:1 --data-dir d --topics a:1 --embedded-coordinator \
                 --set log.flush={v}"
            )))
            .unwrap();
            assert_eq!(c.settings.get("log.flush").map(String::as_str), Some(v));
        }
    }

    #[test]
    fn transaction_verification_is_switched_with_kafkas_key() {
        let base = "--listen 127.0.0.1:1 --data-dir d --topics a:1 --coordinator h:1";
        for v in ["true", "false"] {
            let c = parse_args(args(&format!(
                "{base} --set transaction.partition.verification.enable={v}"
            )))
            .unwrap();
            let verification = super::super::server::verification_config(&c).unwrap();
            assert_eq!(verification.enable, v == "true");
        }
        let c = parse_args(args(base)).unwrap();
        assert!(
            super::super::server::verification_config(&c)
                .unwrap()
                .enable
        );
        assert!(
            parse_args(args(&format!(
                "{base} --set transaction.partition.verification.enable=maybe"
            )))
            .is_err()
        );
    }

    #[test]
    fn repeated_flags_add_up_or_the_last_one_counts_as_before() {
        let c = parse_args(args(
            "--listen 127.0.0.1:1 --listen 127.0.0.1:2 --data-dir d --topics a:1 --topics b:2 \
             --embedded-coordinator --node-id 2 --cluster 1=h:1 --cluster 2=h:2 --set a.b=1 \
             --set fetch.max.wait.ms=5",
        ));
        // a.b is no key: refused, as before.
        assert!(c.is_err());
        let c = parse_args(args(
            "--listen 127.0.0.1:1 --listen 127.0.0.1:2 --data-dir d --topics a:1 --topics b:2 \
             --embedded-coordinator --node-id 2 --cluster 1=h:1 --cluster 2=h:2 \
             --set fetch.max.wait.ms=5 --set log.flush=none",
        ))
        .unwrap();
        assert_eq!(c.listen.map(|l| l.port()), Some(2));
        assert_eq!(c.topics.len(), 2);
        assert_eq!(c.cluster.len(), 2);
        assert_eq!(c.settings.len(), 2);
    }

    #[test]
    fn contradictory_or_incomplete_command_lines_are_refused() {
        for bad in [
            "--listen 127.0.0.1:1 --data-dir d --topics a:1",
            "--listen 127.0.0.1:1 --data-dir d --topics a:0 --embedded-coordinator",
            "--listen 127.0.0.1:1 --data-dir d --embedded-coordinator --coordinator h:1",
            "--data-dir d --embedded-coordinator",
            "--listen 127.0.0.1:1 --data-dir d --embedded-coordinator --node-id 3 --cluster 1=h:1",
            "--listen 127.0.0.1:1 --data-dir d --embedded-coordinator --bogus",
            "--listen 127.0.0.1:1 --data-dir d --coordinator ,",
            "--listen 127.0.0.1:1 --data-dir d --coordinator h:1,h",
            "--listen 127.0.0.1:1 --data-dir d --embedded-coordinator --set no.such.key=1",
            "--listen 127.0.0.1:1 --data-dir d --embedded-coordinator --set log.flush=sometimes",
            "--listen 127.0.0.1:1 --data-dir d --embedded-coordinator --offsets-partitions 4 \
             --set offsets.topic.num.partitions=5",
        ] {
            assert!(parse_args(args(bad)).is_err(), "{bad}");
        }
    }
}
