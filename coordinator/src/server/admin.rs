//! Admin commands (like `kafka-transactions.sh`), speaking the Kafka protocol to a running
//! coordinator, and `dump-log`, which decodes the sled log offline.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use kafka_protocol::messages::{self as km};
use kafka_protocol::protocol::StrBytes;
use markers::wire::{BoxedConnection, Connector};
use serde::Serialize;
use txn_log::{LogPartition, SledConfig, SledTxnLog, TxnLog, TxnRecord};

use super::outgoing::{CLIENT_KEYS, ClientSecurity};

/// How long `abort` waits by default for the fenced id to become idle (ms).
pub const DEFAULT_ABORT_TIMEOUT_MS: u64 = 60_000;

/// The states `find-hanging` looks for: a transaction is open in them. PrepareEpochFence is
/// not one: it is a pending-only state (Kafka's `pendingState` while an epoch bump to fence is
/// written), never persisted and never reported by ListTransactions or DescribeTransactions.
pub const OPEN_STATES: [&str; 3] = ["Ongoing", "PrepareCommit", "PrepareAbort"];

/// Output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Aligned columns.
    Table,
    /// One JSON document.
    Json,
}

/// A connection to a coordinator; `list`, `describe`, `find-hanging` and `abort` give the
/// answer of the whole cluster: ListTransactions goes to every node Metadata names (nodes
/// that are not coordinators are skipped), and an id's requests go to its coordinator
/// (FindCoordinator), as Kafka's Admin client does.
pub struct AdminClient {
    /// Opens the connections, with the security of `--command-config`.
    connector: Arc<dyn Connector>,
    conn: BoxedConnection,
    /// The addresses (`ip:port`, and the `host:port` given) of the bootstrap daemon.
    me: Vec<String>,
    /// Connections to the other coordinators, by address.
    others: BTreeMap<String, BoxedConnection>,
}

impl std::fmt::Debug for AdminClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminClient").finish_non_exhaustive()
    }
}

/// The filters of [`AdminClient::list`], as `kafka-transactions.sh list` has them; every one
/// left empty lists everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListFilters {
    /// Only these states.
    pub states: Vec<String>,
    /// Only these producer ids.
    pub producer_ids: Vec<i64>,
    /// Only transactions running longer than this (ms).
    pub duration_ms: Option<i64>,
    /// Only ids this regular expression matches as a whole (ListTransactions v2, KIP-1152).
    pub transactional_id_pattern: Option<String>,
}

/// One row of `list` / `describe` / `find-hanging` (its JSON names are Kafka's).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TxnRow {
    /// Node id of the coordinator that answered for it (-1 when unknown).
    pub coordinator_id: i32,
    /// Transactional id.
    pub transactional_id: String,
    /// Producer id.
    pub producer_id: i64,
    /// Producer epoch (-1 when unknown).
    pub producer_epoch: i16,
    /// State name.
    pub state: String,
    /// Timeout (ms; -1 when unknown).
    pub timeout_ms: i32,
    /// Start time (ms since epoch; -1 when not started).
    #[serde(rename = "startTimeMs")]
    pub start_ms: i64,
    /// Partitions of the open transaction.
    pub partitions: Vec<String>,
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_owned())
}

fn err_name(code: i16) -> String {
    crate::ErrorCode(code)
        .name()
        .map_or_else(|| code.to_string(), str::to_owned)
}

/// The client id of the admin commands' requests.
const CLIENT_ID: &str = "txn-coordinator-admin";

/// Bound on opening one connection (TCP, TLS handshake, SASL exchange).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Opens a connection to `addr` (`HOST:PORT`) through `connector`.
async fn open(connector: &dyn Connector, addr: &str) -> anyhow::Result<BoxedConnection> {
    let (host, port) = addr
        .rsplit_once(':')
        .and_then(|(h, p)| {
            Some((
                h.trim_start_matches('[').trim_end_matches(']'),
                p.parse().ok()?,
            ))
        })
        .with_context(|| format!("{addr} is not HOST:PORT"))?;
    tokio::time::timeout(CONNECT_TIMEOUT, connector.connect(host, port, CLIENT_ID))
        .await
        .map_err(|_| {
            anyhow::anyhow!("connecting to {addr}: no connection within {CONNECT_TIMEOUT:?}")
        })?
        .map_err(anyhow::Error::new)
}

/// Parses a Java properties file as Kafka's tools read `--command-config`: `key=value` (or
/// `key: value`, `key value`) lines, `#` and `!` comments, a trailing `\` continuing a line,
/// and `\` escaping the next character (`\t`, `\n`, `\r`, `\f` as in Java).
pub fn parse_properties(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut lines = text.lines();
    while let Some(first) = lines.next() {
        let mut line = first.trim_start().to_owned();
        if line.is_empty() || line.starts_with('#') || line.starts_with('!') {
            continue;
        }
        // An odd number of trailing backslashes continues the line.
        while line.chars().rev().take_while(|&c| c == '\\').count() % 2 == 1 {
            line.pop();
            match lines.next() {
                Some(next) => line.push_str(next.trim_start()),
                None => break,
            }
        }
        let (key, value) = split_property(&line);
        out.insert(key, value);
    }
    out
}

/// One logical line: the key up to the first unescaped `=`, `:` or white space, then the
/// value after the separator, both unescaped.
fn split_property(line: &str) -> (String, String) {
    let chars: Vec<char> = line.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '\\' => i += 2,
            '=' | ':' | ' ' | '\t' | '\u{c}' => break,
            _ => i += 1,
        }
    }
    let end = i.min(chars.len());
    let mut j = end;
    while j < chars.len() && matches!(chars[j], ' ' | '\t' | '\u{c}') {
        j += 1;
    }
    if j < chars.len() && matches!(chars[j], '=' | ':') {
        j += 1;
        while j < chars.len() && matches!(chars[j], ' ' | '\t' | '\u{c}') {
            j += 1;
        }
    }
    let unescape = |s: &[char]| {
        let mut out = String::new();
        let mut it = s.iter();
        while let Some(&c) = it.next() {
            if c == '\\' {
                match it.next() {
                    Some('t') => out.push('\t'),
                    Some('n') => out.push('\n'),
                    Some('r') => out.push('\r'),
                    Some('f') => out.push('\u{c}'),
                    Some(&other) => out.push(other),
                    None => {}
                }
            } else {
                out.push(c);
            }
        }
        out
    };
    (unescape(&chars[..end]), unescape(&chars[j..]))
}

/// The security of the admin commands' connections from `--command-config` `path`: Kafka's
/// client keys ([`super::outgoing::CLIENT_KEYS`]: `security.protocol`,
/// `ssl.truststore.location`, `sasl.jaas.config`, ...), without a prefix. Also the keys it
/// does not read (for a warning: Kafka's tools take every client key).
pub fn command_config(path: &Path) -> anyhow::Result<(ClientSecurity, Vec<String>)> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("--command-config: cannot read {}", path.display()))?;
    let props = parse_properties(&text);
    let ignored = props
        .keys()
        .filter(|k| !CLIENT_KEYS.contains(&k.as_str()))
        .cloned()
        .collect();
    let security = ClientSecurity::from_keys("", |k| props.get(k).cloned())
        .with_context(|| format!("--command-config {}", path.display()))?;
    Ok((security, ignored))
}

impl AdminClient {
    /// Connects to `addr` (`HOST:PORT`) with `security` (for every connection the commands
    /// open).
    pub async fn connect(addr: &str, security: ClientSecurity) -> anyhow::Result<Self> {
        let connector = security.connector();
        let conn = open(connector.as_ref(), addr).await?;
        let mut me = vec![addr.to_owned()];
        if let Ok(resolved) = tokio::net::lookup_host(addr).await {
            me.extend(resolved.map(|a| a.to_string()));
        }
        Ok(Self {
            connector,
            conn,
            me,
            others: BTreeMap::new(),
        })
    }

    /// Whether `addr` (`host:port`) is the bootstrap daemon's.
    fn is_me(&self, addr: &str) -> bool {
        self.me.iter().any(|m| m == addr)
    }

    /// A connection to `addr`, made on first use.
    async fn to(&mut self, addr: &str) -> anyhow::Result<&mut BoxedConnection> {
        if !self.others.contains_key(addr) {
            let conn = open(self.connector.as_ref(), addr).await?;
            self.others.insert(addr.to_owned(), conn);
        }
        self.others.get_mut(addr).context("connection just made")
    }

    /// The nodes Metadata names: the bootstrap node's id (-1 if it is not named under the
    /// address connected to) and the others as `(node id, host:port)`.
    async fn nodes(&mut self) -> anyhow::Result<(i32, Vec<(i32, String)>)> {
        let r = self
            .conn
            .call(
                &km::MetadataRequest::default().with_topics(Some(Vec::new())),
                4,
            )
            .await?;
        let mut me = -1;
        let mut others = Vec::new();
        for b in &r.brokers {
            let addr = format!("{}:{}", b.host, b.port);
            if self.is_me(&addr) {
                me = b.node_id.0;
            } else {
                others.push((b.node_id.0, addr));
            }
        }
        Ok((me, others))
    }

    /// The coordinator of `id`: its node id and `host:port`, the latter `None` for the
    /// bootstrap node.
    async fn coordinator_of(&mut self, id: &str) -> anyhow::Result<(i32, Option<String>)> {
        let req = km::FindCoordinatorRequest::default()
            .with_key(s(id))
            .with_key_type(1);
        let r = self.conn.call(&req, 3).await?;
        anyhow::ensure!(
            r.error_code == 0,
            "FindCoordinator({id}) failed: {}",
            err_name(r.error_code)
        );
        let addr = format!("{}:{}", r.host, r.port);
        Ok((r.node_id.0, (!self.is_me(&addr)).then_some(addr)))
    }

    /// ListTransactions with filters: v1, or v2 when a transactional id pattern is given.
    pub async fn list(&mut self, filters: &ListFilters) -> anyhow::Result<Vec<TxnRow>> {
        let req = km::ListTransactionsRequest::default()
            .with_state_filters(filters.states.iter().map(|x| s(x)).collect())
            .with_producer_id_filters(
                filters
                    .producer_ids
                    .iter()
                    .map(|p| km::ProducerId(*p))
                    .collect(),
            )
            .with_duration_filter(filters.duration_ms.unwrap_or(-1))
            .with_transactional_id_pattern(filters.transactional_id_pattern.as_deref().map(s));
        let version = if filters.transactional_id_pattern.is_some() {
            2
        } else {
            1
        };
        let r = self.conn.call(&req, version).await?;
        anyhow::ensure!(
            r.error_code == 0,
            "ListTransactions failed: {}",
            err_name(r.error_code)
        );
        if !r.unknown_state_filters.is_empty() {
            eprintln!("unknown states ignored: {:?}", r.unknown_state_filters);
        }
        let (me, others) = self.nodes().await?;
        let mut states: Vec<(i32, km::list_transactions_response::TransactionState)> =
            r.transaction_states.into_iter().map(|t| (me, t)).collect();
        // The other coordinators' partitions; a node that is not a coordinator (a data
        // broker) or does not answer is skipped.
        for (node, addr) in others {
            let Ok(conn) = self.to(&addr).await else {
                continue;
            };
            match tokio::time::timeout(Duration::from_secs(10), conn.call(&req, version)).await {
                Ok(Ok(r)) if r.error_code == 0 => {
                    states.extend(r.transaction_states.into_iter().map(|t| (node, t)));
                }
                _ => {
                    self.others.remove(&addr);
                }
            }
        }
        states.sort_by(|a, b| a.1.transactional_id.0.cmp(&b.1.transactional_id.0));
        states.dedup_by(|a, b| a.1.transactional_id.0 == b.1.transactional_id.0);
        Ok(states
            .iter()
            .map(|(node, t)| TxnRow {
                coordinator_id: *node,
                transactional_id: t.transactional_id.0.to_string(),
                producer_id: t.producer_id.0,
                producer_epoch: -1,
                state: t.transaction_state.to_string(),
                timeout_ms: -1,
                start_ms: -1,
                partitions: Vec::new(),
            })
            .collect())
    }

    /// DescribeTransactions v0 for `ids`.
    pub async fn describe(
        &mut self,
        ids: &[String],
    ) -> anyhow::Result<Vec<(String, Result<TxnRow, String>)>> {
        let mut states = Vec::new();
        for id in ids {
            let req = km::DescribeTransactionsRequest::default()
                .with_transactional_ids(vec![km::TransactionalId(s(id))]);
            let (node, addr) = self.coordinator_of(id).await?;
            let r = match addr {
                Some(addr) => self.to(&addr).await?.call(&req, 0).await?,
                None => self.conn.call(&req, 0).await?,
            };
            states.extend(r.transaction_states.into_iter().map(|t| (node, t)));
        }
        Ok(states
            .iter()
            .map(|(node, t)| {
                let id = t.transactional_id.0.to_string();
                if t.error_code != 0 {
                    return (id, Err(err_name(t.error_code)));
                }
                let partitions = t
                    .topics
                    .iter()
                    .flat_map(|tp| {
                        tp.partitions
                            .iter()
                            .map(move |p| format!("{}-{p}", tp.topic.0))
                    })
                    .collect();
                (
                    id.clone(),
                    Ok(TxnRow {
                        coordinator_id: *node,
                        transactional_id: id,
                        producer_id: t.producer_id.0,
                        producer_epoch: t.producer_epoch,
                        state: t.transaction_state.to_string(),
                        timeout_ms: t.transaction_timeout_ms,
                        start_ms: t.transaction_start_time_ms,
                        partitions,
                    }),
                )
            })
            .collect())
    }

    /// Open transactions (Ongoing, PrepareCommit, PrepareAbort) running longer than their
    /// timeout. A Prepare* one means its markers are not delivered: the LSO of its partitions
    /// is stuck until they are.
    pub async fn find_hanging(&mut self) -> anyhow::Result<Vec<TxnRow>> {
        let states = OPEN_STATES.iter().map(|x| (*x).to_owned()).collect();
        let ids: Vec<String> = self
            .list(&ListFilters {
                states,
                ..ListFilters::default()
            })
            .await?
            .into_iter()
            .map(|r| r.transactional_id)
            .collect();
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let now = now_ms();
        Ok(self
            .describe(&ids)
            .await?
            .into_iter()
            .filter_map(|(_, r)| r.ok())
            .filter(|r| r.start_ms >= 0 && now - r.start_ms > i64::from(r.timeout_ms))
            .collect())
    }

    /// [`AdminClient::abort_within`] with [`DEFAULT_ABORT_TIMEOUT_MS`].
    pub async fn abort(&mut self, id: &str) -> anyhow::Result<TxnRow> {
        self.abort_within(id, Duration::from_millis(DEFAULT_ABORT_TIMEOUT_MS))
            .await
    }

    /// Aborts the open transaction of `id` by fencing its producer, as `Admin.fenceProducers`
    /// (KIP-618) does: InitProducerId with the id bumps the epoch and aborts what is open.
    /// A transaction already decided (PrepareCommit/PrepareAbort) keeps its decision: the
    /// InitProducerId delivers its markers again (a participant that refused them may have
    /// been fixed) and fences the producer once it is complete. Waits until the id is idle
    /// again (the InitProducerId succeeds once the transaction is complete, markers included)
    /// and returns its final row; an error if it is not idle within `timeout` (the abort or the
    /// delivery goes on in the coordinator).
    pub async fn abort_within(&mut self, id: &str, timeout: Duration) -> anyhow::Result<TxnRow> {
        let described = self.describe(&[id.to_owned()]).await?;
        let row = match described.into_iter().next() {
            Some((_, Ok(r))) => r,
            Some((_, Err(e))) => anyhow::bail!("{id}: {e}"),
            None => anyhow::bail!("{id}: no answer"),
        };
        if matches!(
            row.state.as_str(),
            "Empty" | "CompleteCommit" | "CompleteAbort"
        ) {
            anyhow::bail!("{id} has no open transaction (state {})", row.state);
        }
        if matches!(row.state.as_str(), "PrepareCommit" | "PrepareAbort") {
            eprintln!(
                "{id} is already decided ({}): the decision stands; its markers are delivered \
                 again (to {}), then the producer is fenced",
                row.state,
                row.partitions.join(", ")
            );
        }
        // A two-phase-commit id (KIP-939) shows Kafka's "no timeout", i32::MAX, which an
        // InitProducerId without Enable2Pc may not ask for: Kafka's Admin sends its request
        // timeout there, we send the producer's default transaction timeout.
        let timeout_ms = if row.timeout_ms == i32::MAX {
            60_000
        } else {
            row.timeout_ms.max(1)
        };
        let req = km::InitProducerIdRequest::default()
            .with_transactional_id(Some(km::TransactionalId(s(id))))
            .with_transaction_timeout_ms(timeout_ms);
        let (_, owner) = self.coordinator_of(id).await?;
        let started = Instant::now();
        loop {
            let r = match &owner {
                Some(addr) => self.to(addr).await?.call(&req, 4).await?,
                None => self.conn.call(&req, 4).await?,
            };
            match r.error_code {
                0 => break,
                // 51 CONCURRENT_TRANSACTIONS: the fence/abort is under way; 14 loading.
                51 | 14 => {
                    if started.elapsed() >= timeout {
                        let state = match self.describe(&[id.to_owned()]).await {
                            Ok(d) => match d.into_iter().next() {
                                Some((_, Ok(r))) => r.state,
                                Some((_, Err(e))) => e,
                                None => "unknown".to_owned(),
                            },
                            Err(e) => format!("unknown ({e:#})"),
                        };
                        anyhow::bail!(
                            "gave up after {} ms: {id} is not idle yet (state {state}; the \
                             coordinator answers {}). The abort goes on in the coordinator; if \
                             the state stays PrepareCommit/PrepareAbort, its markers are not \
                             being delivered or a participant refuses them: describe shows the \
                             partitions still without one, the coordinator's log says why",
                            timeout.as_millis(),
                            err_name(r.error_code)
                        );
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                e => anyhow::bail!("fencing {id} failed: {}", err_name(e)),
            }
        }
        match self.describe(&[id.to_owned()]).await?.into_iter().next() {
            Some((_, Ok(r))) => Ok(r),
            Some((_, Err(e))) => anyhow::bail!("{id}: {e}"),
            None => anyhow::bail!("{id}: no answer"),
        }
    }

    /// The leader of `topic`-`partition` as Metadata (through the bootstrap node) names it:
    /// `(node id, host:port)`.
    async fn leader_of(&mut self, topic: &str, partition: i32) -> anyhow::Result<(i32, String)> {
        use km::metadata_request::MetadataRequestTopic;
        let r = self
            .conn
            .call(
                &km::MetadataRequest::default().with_topics(Some(vec![
                    MetadataRequestTopic::default().with_name(Some(km::TopicName(s(topic)))),
                ])),
                4,
            )
            .await?;
        let t = r
            .topics
            .iter()
            .find(|t| t.name.as_ref().is_some_and(|n| n.0.as_str() == topic))
            .with_context(|| format!("Metadata has no topic {topic}"))?;
        anyhow::ensure!(
            t.error_code == 0,
            "Metadata for topic {topic}: {}",
            err_name(t.error_code)
        );
        let p = t
            .partitions
            .iter()
            .find(|p| p.partition_index == partition)
            .with_context(|| format!("topic {topic} has no partition {partition}"))?;
        anyhow::ensure!(
            p.error_code == 0 && p.leader_id.0 >= 0,
            "{topic}-{partition} has no leader ({})",
            err_name(p.error_code)
        );
        let leader = p.leader_id.0;
        let b = r
            .brokers
            .iter()
            .find(|b| b.node_id.0 == leader)
            .with_context(|| {
                format!("the leader {leader} of {topic}-{partition} is not in Metadata")
            })?;
        Ok((leader, format!("{}:{}", b.host, b.port)))
    }

    /// Aborts the transaction open on `topic`-`partition` at `start_offset`, as Kafka's
    /// `kafka-transactions.sh abort --topic T --partition P --start-offset O`
    /// (`Admin.abortTransaction`) does: DescribeProducers on the partition's leader finds the
    /// producer whose open transaction starts there, and WriteTxnMarkers sends that leader an
    /// ABORT marker with the producer's epoch and last coordinator epoch (0 if none). This is
    /// for a hanging transaction, one the coordinator does not know (or has completed): the
    /// coordinator is not asked and not changed.
    pub async fn abort_partition(
        &mut self,
        topic: &str,
        partition: i32,
        start_offset: i64,
    ) -> anyhow::Result<HangingRow> {
        let (_, leader) = self.leader_of(topic, partition).await?;
        let conn = if self.is_me(&leader) {
            &mut self.conn
        } else {
            self.to(&leader).await?
        };
        let req = km::DescribeProducersRequest::default().with_topics(vec![
            km::describe_producers_request::TopicRequest::default()
                .with_name(km::TopicName(s(topic)))
                .with_partition_indexes(vec![partition]),
        ]);
        let r = conn.call(&req, 0).await?;
        let part = r
            .topics
            .iter()
            .flat_map(|t| t.partitions.iter())
            .find(|p| p.partition_index == partition)
            .with_context(|| format!("DescribeProducers: no answer for {topic}-{partition}"))?;
        anyhow::ensure!(
            part.error_code == 0,
            "DescribeProducers {topic}-{partition} at {leader}: {}",
            err_name(part.error_code)
        );
        let Some(p) = part
            .active_producers
            .iter()
            .find(|p| p.current_txn_start_offset == start_offset)
        else {
            anyhow::bail!(
                "Could not find any open transactions starting at offset {start_offset} on \
                 partition {topic}-{partition}"
            );
        };
        let epoch = i16::try_from(p.producer_epoch)
            .with_context(|| format!("producer epoch {} out of range", p.producer_epoch))?;
        let coordinator_epoch = p.coordinator_epoch.max(0);
        let marker = km::write_txn_markers_request::WritableTxnMarker::default()
            .with_producer_id(p.producer_id)
            .with_producer_epoch(epoch)
            .with_transaction_result(false)
            .with_coordinator_epoch(coordinator_epoch)
            .with_topics(vec![
                km::write_txn_markers_request::WritableTxnMarkerTopic::default()
                    .with_name(km::TopicName(s(topic)))
                    .with_partition_indexes(vec![partition]),
            ]);
        let row = HangingRow {
            topic: topic.to_owned(),
            partition,
            producer_id: p.producer_id.0,
            producer_epoch: epoch,
            coordinator_epoch,
            start_offset,
        };
        let r = conn
            .call(
                &km::WriteTxnMarkersRequest::default().with_markers(vec![marker]),
                1,
            )
            .await?;
        let code = r
            .markers
            .iter()
            .flat_map(|m| m.topics.iter())
            .flat_map(|t| t.partitions.iter())
            .find(|p| p.partition_index == partition)
            .map(|p| p.error_code)
            .context("WriteTxnMarkers: no answer for the partition")?;
        anyhow::ensure!(
            code == 0,
            "WriteTxnMarkers (ABORT) to {topic}-{partition} at {leader}: {}",
            err_name(code)
        );
        Ok(row)
    }

    /// Kafka's `find-hanging` question (`kafka-transactions.sh find-hanging`): transactions
    /// open on a partition whose producer's last write is older than `max_timeout_ms`, and
    /// that no coordinator will close: the producer id is not listed by any coordinator, its
    /// transactional id is unknown, or the coordinator's transaction does not include that
    /// partition (it completed, or never had it). The partitions searched: `topic` (one
    /// `partition` of it), or every partition whose leader is `broker` (Metadata through
    /// the bootstrap node); each leader is asked with DescribeProducers.
    pub async fn find_hanging_on_partitions(
        &mut self,
        topic: Option<&str>,
        partition: Option<i32>,
        broker: Option<i32>,
        max_timeout_ms: i64,
    ) -> anyhow::Result<Vec<OpenTxnRow>> {
        use km::metadata_request::MetadataRequestTopic;
        let req =
            km::MetadataRequest::default().with_topics(topic.map(|t| {
                vec![MetadataRequestTopic::default().with_name(Some(km::TopicName(s(t))))]
            }));
        let md = self.conn.call(&req, 4).await?;
        let addr_of = |node: i32| {
            md.brokers
                .iter()
                .find(|b| b.node_id.0 == node)
                .map(|b| format!("{}:{}", b.host, b.port))
        };
        // (leader address) -> [(topic, partition)]
        let mut by_leader: BTreeMap<String, Vec<(String, i32)>> = BTreeMap::new();
        for t in &md.topics {
            let Some(name) = t.name.as_ref().map(|n| n.0.to_string()) else {
                continue;
            };
            anyhow::ensure!(
                t.error_code == 0,
                "Metadata for topic {name}: {}",
                err_name(t.error_code)
            );
            for p in &t.partitions {
                let leader = p.leader_id.0;
                if partition.is_some_and(|want| want != p.partition_index)
                    || broker.is_some_and(|b| b != leader)
                {
                    continue;
                }
                let addr = addr_of(leader).with_context(|| {
                    format!(
                        "the leader {leader} of {name}-{} is not in Metadata",
                        p.partition_index
                    )
                })?;
                by_leader
                    .entry(addr)
                    .or_default()
                    .push((name.clone(), p.partition_index));
            }
        }
        let now = now_ms();
        let mut candidates = Vec::new();
        for (addr, parts) in by_leader {
            let mut topics: Vec<km::describe_producers_request::TopicRequest> = Vec::new();
            for (t, p) in &parts {
                match topics.iter_mut().find(|x| x.name.0.as_str() == t) {
                    Some(x) => x.partition_indexes.push(*p),
                    None => topics.push(
                        km::describe_producers_request::TopicRequest::default()
                            .with_name(km::TopicName(s(t)))
                            .with_partition_indexes(vec![*p]),
                    ),
                }
            }
            let req = km::DescribeProducersRequest::default().with_topics(topics);
            let r = if self.is_me(&addr) {
                self.conn.call(&req, 0).await?
            } else {
                self.to(&addr).await?.call(&req, 0).await?
            };
            for t in &r.topics {
                for p in &t.partitions {
                    anyhow::ensure!(
                        p.error_code == 0,
                        "DescribeProducers {}-{} at {addr}: {}",
                        t.name.0,
                        p.partition_index,
                        err_name(p.error_code)
                    );
                    for a in &p.active_producers {
                        if a.current_txn_start_offset >= 0
                            && now - a.last_timestamp > max_timeout_ms
                        {
                            candidates.push(OpenTxnRow {
                                topic: t.name.0.to_string(),
                                partition: p.partition_index,
                                producer_id: a.producer_id.0,
                                producer_epoch: a.producer_epoch,
                                coordinator_epoch: a.coordinator_epoch,
                                start_offset: a.current_txn_start_offset,
                                last_timestamp_ms: a.last_timestamp,
                            });
                        }
                    }
                }
            }
        }
        if candidates.is_empty() {
            return Ok(candidates);
        }
        let mut pids: Vec<i64> = candidates.iter().map(|c| c.producer_id).collect();
        pids.sort_unstable();
        pids.dedup();
        let listed = self
            .list(&ListFilters {
                producer_ids: pids,
                ..ListFilters::default()
            })
            .await?;
        let ids: Vec<String> = listed.iter().map(|r| r.transactional_id.clone()).collect();
        let described: Vec<TxnRow> = if ids.is_empty() {
            Vec::new()
        } else {
            self.describe(&ids)
                .await?
                .into_iter()
                .filter_map(|(_, r)| r.ok())
                .collect()
        };
        Ok(candidates
            .into_iter()
            .filter(|c| {
                let Some(id) = listed.iter().find(|r| r.producer_id == c.producer_id) else {
                    return true;
                };
                let Some(d) = described
                    .iter()
                    .find(|d| d.transactional_id == id.transactional_id)
                else {
                    return true;
                };
                !d.partitions
                    .contains(&format!("{}-{}", c.topic, c.partition))
            })
            .collect())
    }
}

/// A transaction open on a partition, as Kafka's `find-hanging` prints it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OpenTxnRow {
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// Producer id.
    pub producer_id: i64,
    /// Producer epoch.
    pub producer_epoch: i32,
    /// Coordinator epoch of its last marker there (-1 if none).
    pub coordinator_epoch: i32,
    /// Offset of the transaction's first record.
    pub start_offset: i64,
    /// Timestamp of the producer's last batch or marker there (ms).
    #[serde(rename = "lastTimestamp")]
    pub last_timestamp_ms: i64,
}

/// The columns of `find-hanging` with `--topic` or `--broker-id`, in order: those of Kafka's
/// `kafka-transactions.sh find-hanging`.
pub const HANGING_COLUMNS: [&str; 8] = [
    "Topic",
    "Partition",
    "ProducerId",
    "ProducerEpoch",
    "CoordinatorEpoch",
    "StartOffset",
    "LastTimestamp",
    "Duration(min)",
];

/// Renders [`OpenTxnRow`]s as Kafka's `find-hanging` does (a table), or as JSON.
pub fn render_open_txns(rows: &[OpenTxnRow], format: Format) -> String {
    match format {
        Format::Json => to_json(rows),
        Format::Table => {
            let now = now_ms();
            let mut table = vec![HANGING_COLUMNS.map(String::from).to_vec()];
            for r in rows {
                let mut row = hanging_cells(
                    &r.topic,
                    r.partition,
                    r.producer_id,
                    r.producer_epoch,
                    r.coordinator_epoch,
                    r.start_offset,
                );
                row.push(r.last_timestamp_ms.to_string());
                row.push(((now - r.last_timestamp_ms) / 60_000).to_string());
                table.push(row);
            }
            render_table(table)
        }
    }
}

/// The transaction `abort --topic --partition --start-offset` aborted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HangingRow {
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// Producer id.
    pub producer_id: i64,
    /// Producer epoch the marker carried.
    pub producer_epoch: i16,
    /// Coordinator epoch the marker carried.
    pub coordinator_epoch: i32,
    /// Offset where the aborted transaction started.
    pub start_offset: i64,
}

/// Renders the partition-level abort's row: Kafka's find-hanging columns that apply.
pub fn render_aborted(r: &HangingRow, format: Format) -> String {
    match format {
        Format::Json => to_json(r),
        Format::Table => {
            let cells = hanging_cells(
                &r.topic,
                r.partition,
                r.producer_id,
                r.producer_epoch.into(),
                r.coordinator_epoch,
                r.start_offset,
            );
            let header = HANGING_COLUMNS[..cells.len()].iter();
            render_table(vec![header.map(|c| c.to_string()).collect(), cells])
        }
    }
}

/// The first six cells of a `find-hanging` row: where the transaction is open and who opened it.
fn hanging_cells(
    topic: &str,
    partition: i32,
    producer_id: i64,
    producer_epoch: i32,
    coordinator_epoch: i32,
    start_offset: i64,
) -> Vec<String> {
    vec![
        topic.to_owned(),
        partition.to_string(),
        producer_id.to_string(),
        producer_epoch.to_string(),
        coordinator_epoch.to_string(),
        start_offset.to_string(),
    ]
}

/// One JSON document and a newline.
fn to_json<T: Serialize + ?Sized>(value: &T) -> String {
    // Serializing these plain structs (strings, integers, sequences) cannot fail.
    let mut out = serde_json::to_string(value).unwrap_or_else(|e| format!("\"{e}\""));
    out.push('\n');
    out
}

/// Renders rows as a table or JSON.
pub fn render_rows(rows: &[TxnRow], format: Format, detailed: bool) -> String {
    match format {
        Format::Json => to_json(rows),
        Format::Table => {
            let now = now_ms();
            let mut table: Vec<Vec<String>> = Vec::new();
            if detailed {
                table.push(DESCRIBE_COLUMNS.map(String::from).to_vec());
            } else {
                table.push(LIST_COLUMNS.map(String::from).to_vec());
            }
            for r in rows {
                if detailed {
                    // As Kafka's tool: "None" when the transaction has no start time.
                    let (start, dur) = if r.start_ms >= 0 {
                        (r.start_ms.to_string(), (now - r.start_ms).to_string())
                    } else {
                        ("None".to_owned(), "None".to_owned())
                    };
                    table.push(vec![
                        r.coordinator_id.to_string(),
                        r.transactional_id.clone(),
                        r.producer_id.to_string(),
                        r.producer_epoch.to_string(),
                        r.state.clone(),
                        r.timeout_ms.to_string(),
                        start,
                        dur,
                        r.partitions.join(","),
                    ]);
                } else {
                    table.push(vec![
                        r.transactional_id.clone(),
                        r.coordinator_id.to_string(),
                        r.producer_id.to_string(),
                        r.state.clone(),
                    ]);
                }
            }
            render_table(table)
        }
    }
}

/// The columns of `list`, in order: those of Kafka's `kafka-transactions.sh list`.
pub const LIST_COLUMNS: [&str; 4] = [
    "TransactionalId",
    "Coordinator",
    "ProducerId",
    "TransactionState",
];

/// The columns of `describe` (also `find-hanging`, `force-terminate`, `abort
/// --transactional-id`), in order: those of Kafka's `kafka-transactions.sh describe`.
pub const DESCRIBE_COLUMNS: [&str; 9] = [
    "CoordinatorId",
    "TransactionalId",
    "ProducerId",
    "ProducerEpoch",
    "TransactionState",
    "TransactionTimeoutMs",
    "CurrentTransactionStartTimeMs",
    "TransactionDurationMs",
    "TopicPartitions",
];

/// Aligned columns, two spaces apart, the header first.
fn render_table(table: Vec<Vec<String>>) -> String {
    let cols = table.first().map_or(0, Vec::len);
    let widths: Vec<usize> = (0..cols)
        .map(|c| {
            table
                .iter()
                .map(|row| row[c].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in &table {
        let line: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    out
}

/// Kafka's dump format of one record (the `TransactionLog` formatter of `kafka-dump-log.sh
/// --transaction-log-decoder`).
pub fn dump_value(r: &TxnRecord) -> String {
    let parts: Vec<String> = r.partitions.iter().map(ToString::to_string).collect();
    format!(
        "producerId:{},producerEpoch:{},state={},partitions=[{}],txnLastUpdateTimestamp={},txnTimeoutMs={}",
        r.producer_id.0,
        r.producer_epoch.0,
        r.state.name(),
        parts.join(","),
        r.txn_last_update_ms,
        r.timeout_ms
    )
}

/// Decodes the sled log in `dir` offline (the daemon must be stopped: sled locks the
/// directory) and renders every live record of partitions `0..partitions`.
pub async fn dump_log(dir: &Path, partitions: u32, format: Format) -> anyhow::Result<String> {
    anyhow::ensure!(
        dir.join("db").exists(),
        "{} holds no transaction log",
        dir.display()
    );
    let d = dir.to_path_buf();
    let log = tokio::task::spawn_blocking(move || SledTxnLog::open(SledConfig::new(d)))
        .await?
        .with_context(|| format!("opening {} (is the daemon still running?)", dir.display()))?;
    let log = Arc::new(log);
    let out = dump_partitions(log.as_ref(), partitions, format).await;
    let l2 = log.clone();
    tokio::task::spawn_blocking(move || l2.shutdown()).await?;
    out
}

/// Reads the log in etcd (`etcd.endpoints`, `etcd.key.prefix`; the daemons may run) and
/// renders every live record of partitions `0..transaction.state.log.num.partitions`.
#[cfg(feature = "etcd")]
pub async fn dump_etcd(settings: &super::Settings, format: Format) -> anyhow::Result<String> {
    let config = txn_log::EtcdConfig {
        prefix: settings.etcd_key_prefix.clone(),
        ..txn_log::EtcdConfig::new(settings.etcd_endpoints.clone())
    };
    let log = txn_log::EtcdTxnLog::connect(config).await?;
    dump_partitions(
        &log,
        settings.engine.transaction_state_log_num_partitions,
        format,
    )
    .await
}

/// Without the `etcd` feature there is no log in etcd to read.
#[cfg(not(feature = "etcd"))]
pub async fn dump_etcd(_settings: &super::Settings, _format: Format) -> anyhow::Result<String> {
    anyhow::bail!("this txn-coordinator was built without the `etcd` feature")
}

/// Renders every live record of partitions `0..partitions` of `log` (any backend: the sled
/// log offline, or the log in etcd while the daemons run).
pub async fn dump_partitions(
    log: &dyn TxnLog,
    partitions: u32,
    format: Format,
) -> anyhow::Result<String> {
    let mut out = String::new();
    let mut json = Vec::new();
    for p in 0..partitions {
        let loaded = log.load(LogPartition(p)).await?;
        if loaded.records.is_empty() && loaded.coordinator_epoch.is_none() {
            continue;
        }
        match format {
            Format::Table => {
                out.push_str(&format!(
                    "# __transaction_state-{p} coordinatorEpoch={} records={}\n",
                    loaded.coordinator_epoch.map_or(-1, |e| e.0),
                    loaded.records.len()
                ));
                for (id, r) in &loaded.records {
                    out.push_str(&format!(
                        "key: transaction_metadata::transactionalId={id} payload: {}\n",
                        dump_value(r)
                    ));
                }
            }
            Format::Json => {
                let coordinator_epoch = loaded.coordinator_epoch.map_or(-1, |e| e.0);
                json.extend(loaded.records.iter().map(|(id, r)| DumpedRecord {
                    partition: p,
                    coordinator_epoch,
                    transactional_id: id.as_str().to_owned(),
                    producer_id: r.producer_id.0,
                    producer_epoch: r.producer_epoch.0,
                    last_producer_epoch: r.last_producer_epoch.0,
                    session_producer_id: r.session_producer_id.0,
                    session_producer_epoch: r.session_producer_epoch.0,
                    two_phase_commit: r.two_phase_commit,
                    prev_producer_id: r.prev_producer_id.0,
                    next_producer_id: r.next_producer_id.0,
                    state: r.state.name(),
                    partitions: r.partitions.iter().map(ToString::to_string).collect(),
                    txn_start_timestamp: r.txn_start_ms,
                    txn_last_update_timestamp: r.txn_last_update_ms,
                    txn_timeout_ms: r.timeout_ms,
                    client_transaction_version: r.client_txn_version.0,
                }));
            }
        }
    }
    Ok(match format {
        Format::Table => out,
        Format::Json => to_json(&json),
    })
}

/// One record as `dump-log --json` prints it: every persisted field, Kafka's names.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct DumpedRecord {
    partition: u32,
    coordinator_epoch: i32,
    transactional_id: String,
    producer_id: i64,
    producer_epoch: i16,
    last_producer_epoch: i16,
    session_producer_id: i64,
    session_producer_epoch: i16,
    two_phase_commit: bool,
    prev_producer_id: i64,
    next_producer_id: i64,
    state: &'static str,
    partitions: Vec<String>,
    txn_start_timestamp: i64,
    txn_last_update_timestamp: i64,
    txn_timeout_ms: i32,
    client_transaction_version: i8,
}

#[cfg(test)]
mod tests {
    use super::*;
    use txn_log::{
        CoordinatorEpoch, LogEntry, MemTxnLog, ProducerEpoch, ProducerId, TopicPartition,
        TransactionalId, TxnState,
    };

    #[test]
    fn properties_parse_as_java_reads_them() {
        let text = "# comment\n! also a comment\n\n  security.protocol = SASL_SSL\n\
                    ssl.truststore.location:C\\:\\\\certs\\\\ca.pem\n\
                    sasl.jaas.config=org.Module required \\\n    username=\"a\" password=\"b\";\n\
                    client.id admin tool\n\
                    empty=\n";
        let p = parse_properties(text);
        assert_eq!(
            p.get("security.protocol").map(String::as_str),
            Some("SASL_SSL")
        );
        assert_eq!(
            p.get("ssl.truststore.location").map(String::as_str),
            Some("C:\\certs\\ca.pem")
        );
        assert_eq!(
            p.get("sasl.jaas.config").map(String::as_str),
            Some("org.Module required username=\"a\" password=\"b\";")
        );
        assert_eq!(p.get("client.id").map(String::as_str), Some("admin tool"));
        assert_eq!(p.get("empty").map(String::as_str), Some(""));
        assert_eq!(p.len(), 5, "{p:?}");
    }

    #[tokio::test]
    async fn dump_json_has_every_persisted_field() {
        let log = MemTxnLog::new();
        let p = LogPartition(0);
        log.claim(p, CoordinatorEpoch(3)).await.expect("claim");
        let r = TxnRecord {
            producer_id: ProducerId(5),
            prev_producer_id: ProducerId(4),
            next_producer_id: ProducerId(6),
            producer_epoch: ProducerEpoch(2),
            last_producer_epoch: ProducerEpoch(1),
            session_producer_epoch: ProducerEpoch(9),
            session_producer_id: ProducerId(5),
            two_phase_commit: true,
            timeout_ms: 60_000,
            state: TxnState::Ongoing,
            partitions: [TopicPartition::new("t", 0)].into_iter().collect(),
            txn_start_ms: 10,
            txn_last_update_ms: 11,
            client_txn_version: txn_log::TxnVersion::V2,
        };
        let id = TransactionalId::new("x").expect("id");
        log.append(p, CoordinatorEpoch(3), vec![LogEntry::upsert(id, r)])
            .await
            .expect("append");
        let out = dump_partitions(&log, 1, Format::Json).await.expect("dump");
        // One key per TxnRecord field (14), plus partition, coordinator epoch and id.
        for field in [
            "\"partition\":0",
            "\"coordinatorEpoch\":3",
            "\"transactionalId\":\"x\"",
            "\"producerId\":5",
            "\"prevProducerId\":4",
            "\"nextProducerId\":6",
            "\"producerEpoch\":2",
            "\"lastProducerEpoch\":1",
            "\"sessionProducerId\":5",
            "\"sessionProducerEpoch\":9",
            "\"twoPhaseCommit\":true",
            "\"txnTimeoutMs\":60000",
            "\"state\":\"Ongoing\"",
            "\"partitions\":[\"t-0\"]",
            "\"txnStartTimestamp\":10",
            "\"txnLastUpdateTimestamp\":11",
            "\"clientTransactionVersion\":2",
        ] {
            assert!(out.contains(field), "{field} missing: {out}");
        }
        assert_eq!(out.matches(':').count(), 17, "{out}");
    }

    #[test]
    fn find_hanging_asks_only_for_states_a_record_can_hold() {
        for s in OPEN_STATES {
            let state = TxnState::from_name(s).expect("a state");
            assert!(
                state == TxnState::Ongoing || state.is_prepare(),
                "{s} is not an open transaction"
            );
        }
        assert!(!OPEN_STATES.contains(&TxnState::PrepareEpochFence.name()));
    }

    #[test]
    fn open_transactions_render_in_kafkas_find_hanging_columns() {
        let rows = vec![OpenTxnRow {
            topic: "kt".into(),
            partition: 1,
            producer_id: 9,
            producer_epoch: 2,
            coordinator_epoch: -1,
            start_offset: 40,
            last_timestamp_ms: now_ms() - 20 * 60_000,
        }];
        let t = render_open_txns(&rows, Format::Table);
        let cells = |l: &str| l.split_whitespace().map(str::to_owned).collect::<Vec<_>>();
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(cells(lines[0]), HANGING_COLUMNS.map(String::from), "{t}");
        let row = cells(lines[1]);
        assert_eq!(row[..6], ["kt", "1", "9", "2", "-1", "40"], "{t}");
        assert!(matches!(row[7].as_str(), "19" | "20"), "minutes: {t}");
        let j = render_open_txns(&rows, Format::Json);
        assert!(
            j.contains("\"startOffset\":40") && j.contains("\"topic\":\"kt\""),
            "{j}"
        );
        assert_eq!(render_open_txns(&[], Format::Table).lines().count(), 1);
    }

    #[test]
    fn table_and_json_render_every_row() {
        let rows = vec![TxnRow {
            coordinator_id: 3,
            transactional_id: "a\"b".into(),
            producer_id: 7,
            producer_epoch: 1,
            state: "Ongoing".into(),
            timeout_ms: 1000,
            start_ms: 5,
            partitions: vec!["t-0".into()],
        }];
        let t = render_rows(&rows, Format::Table, true);
        let cells = |l: &str| l.split_whitespace().map(str::to_owned).collect::<Vec<_>>();
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(cells(lines[0]), DESCRIBE_COLUMNS.map(String::from), "{t}");
        let row = cells(lines[1]);
        assert_eq!(
            [&row[..6], &row[6..7], &row[8..]].concat(),
            ["3", "a\"b", "7", "1", "Ongoing", "1000", "5", "t-0"],
            "{t}"
        );
        // list: Kafka's columns and order
        let t = render_rows(&rows, Format::Table, false);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(cells(lines[0]), LIST_COLUMNS.map(String::from), "{t}");
        assert_eq!(cells(lines[1]), ["a\"b", "3", "7", "Ongoing"], "{t}");
        // no start time: None, as Kafka's describe
        let none = TxnRow {
            start_ms: -1,
            ..rows[0].clone()
        };
        let t = render_rows(&[none], Format::Table, true);
        assert_eq!(
            cells(t.lines().nth(1).unwrap_or(""))[6..8],
            ["None", "None"],
            "{t}"
        );
        let j = render_rows(&rows, Format::Json, true);
        assert!(
            j.contains("\"transactionalId\":\"a\\\"b\"") && j.contains("\"partitions\":[\"t-0\"]"),
            "{j}"
        );
    }
}
