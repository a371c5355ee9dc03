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
//! | `log.flush` | `fsync` | `fsync`: acks=all appends, markers and offset commits are fdatasync'd (group commit per partition) before they are answered, and the high watermark covers only synced data; `none`: no fsync (Kafka's default), appends written to the OS in order |
//!
//! Every key of `txn-coordinator serve --set` (`coordinator::server::KEYS`, e.g.
//! `transaction.max.timeout.ms`, `transaction.abort.timed.out.transaction.cleanup.interval.ms`,
//! `transaction.state.log.num.partitions`, `transaction.version`) is also accepted and
//! configures the embedded coordinator; `offsets.topic.num.partitions` is the same as
//! `--offsets-partitions`. Unknown keys are refused.

use std::collections::BTreeMap;
use std::net::{SocketAddr, ToSocketAddrs};

use anyhow::{Context, bail};

use super::{Config, NodeAddr};

/// `--set` keys the broker itself reads.
const BROKER_KEYS: &[&str] = &[
    "group.initial.rebalance.delay.ms",
    "group.min.session.timeout.ms",
    "group.max.session.timeout.ms",
    "fetch.max.wait.ms",
    "log.flush",
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

/// Parses the command line (without the program name).
pub fn parse_args(args: impl IntoIterator<Item = String>) -> anyhow::Result<Config> {
    let mut args = args.into_iter();
    let mut listen: Option<SocketAddr> = None;
    let mut data_dir = None;
    let mut topics = Vec::new();
    let mut node_id = 1;
    let mut cluster = BTreeMap::new();
    let mut embedded = false;
    let mut coordinator = None;
    let mut coordinator_node_id = 1000;
    let mut offsets_partitions = None;
    let mut settings = BTreeMap::new();
    while let Some(flag) = args.next() {
        let mut value = || args.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--listen" => {
                let v = value()?;
                listen = Some(
                    v.to_socket_addrs()
                        .with_context(|| format!("cannot resolve {v:?}"))?
                        .next()
                        .with_context(|| format!("{v:?} resolves to nothing"))?,
                );
            }
            "--data-dir" => data_dir = Some(value()?.into()),
            "--topics" => {
                for t in value()?.split(',').filter(|t| !t.is_empty()) {
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
            "--node-id" => node_id = value()?.parse().context("--node-id")?,
            "--cluster" => {
                for n in value()?.split(',').filter(|n| !n.is_empty()) {
                    let (id, addr) = n
                        .split_once('=')
                        .with_context(|| format!("cluster entry {n:?} is not ID=HOST:PORT"))?;
                    cluster.insert(id.parse().context("cluster node id")?, parse_addr(addr)?);
                }
            }
            "--embedded-coordinator" => embedded = true,
            "--coordinator" => {
                let addrs = value()?
                    .split(',')
                    .filter(|a| !a.is_empty())
                    .map(parse_addr)
                    .collect::<anyhow::Result<Vec<_>>>()?;
                if addrs.is_empty() {
                    bail!("--coordinator needs at least one HOST:PORT");
                }
                coordinator = Some(addrs);
            }
            "--coordinator-node-id" => {
                coordinator_node_id = value()?.parse().context("--coordinator-node-id")?;
            }
            "--offsets-partitions" => {
                offsets_partitions = Some(value()?.parse().context("--offsets-partitions")?);
            }
            "--set" => {
                let v = value()?;
                let (k, val) = v
                    .split_once('=')
                    .with_context(|| format!("--set {v:?} is not KEY=VALUE"))?;
                settings.insert(k.to_owned(), val.to_owned());
            }
            other => bail!("unknown argument {other:?}"),
        }
    }
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
        if !BROKER_KEYS.contains(&k.as_str()) && !super::embedded::is_coordinator_key(k) {
            bail!("unknown --set key {k:?}");
        }
    }
    if let Some(v) = settings.get("log.flush")
        && super::log::Flush::parse(v).is_none()
    {
        bail!("log.flush={v:?}: expected fsync or none");
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
    Ok(Config {
        listen: listen.context("--listen is required")?,
        data_dir: data_dir.context("--data-dir is required")?,
        topics,
        node_id,
        cluster,
        coordinator,
        offsets_partitions,
        settings,
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
