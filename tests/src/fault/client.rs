//! Workload clients over the test kit's connection [`Pool`]: a transactional producer, a
//! read_committed fetcher that filters aborted transactions exactly as a Kafka client does,
//! and a consumer group's committed offsets as a read_committed consumer fetches them.
//!
//! Every call has a deadline; a connection that failed or timed out is dropped and reopened
//! (the pool's rules); every address is checked to be loopback first ([`loopback_pool`]).
//! Results distinguish a definite failure from an indeterminate one, because the checker
//! must not treat "no answer" as "did not happen".

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::txn_offset_commit_request::{
    TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
};
use kafka_protocol::messages::{
    AddOffsetsToTxnRequest, AddPartitionsToTxnRequest, BrokerId, EndTxnRequest, FetchRequest,
    FindCoordinatorRequest, GroupId, InitProducerIdRequest, MetadataRequest, OffsetFetchRequest,
    ProduceRequest, ProducerId, TopicName, TransactionalId, TxnOffsetCommitRequest,
};
use kafka_protocol::protocol::Request;
use kafka_protocol::records::RecordBatchDecoder;
use txn_log::{ErrorCode, TxnVersion};
use txn_testkit::pool::Pool;
use txn_testkit::wire::{record_batch, sb};

use super::proxy::check_loopback;

/// Why a client operation did not succeed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientError {
    /// The peer answered with a non-retriable error: the operation did not take effect.
    Definite {
        /// The API.
        api: &'static str,
        /// The Kafka error code.
        code: i16,
    },
    /// No answer (timeout, connection lost) or retries exhausted: it may have taken effect.
    Indeterminate {
        /// The API.
        api: &'static str,
        /// What happened.
        reason: String,
    },
}

impl ClientError {
    /// Whether the error is a definite rejection.
    pub fn is_definite(&self) -> bool {
        matches!(self, Self::Definite { .. })
    }

    /// The error code of a definite rejection.
    pub fn code(&self) -> Option<i16> {
        match self {
            Self::Definite { code, .. } => Some(*code),
            Self::Indeterminate { .. } => None,
        }
    }
}

impl std::fmt::Display for ClientError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Definite { api, code } => write!(f, "{api}: error {code}"),
            Self::Indeterminate { api, reason } => write!(f, "{api}: indeterminate ({reason})"),
        }
    }
}

impl std::error::Error for ClientError {}

/// The harness's pool: the kit's [`Pool`], refusing every address outside 127.0.0.0/8
/// ([`check_loopback`]) as the fault proxies do.
pub fn loopback_pool(client_id: &str, timeout: Duration) -> Pool {
    Pool::new(client_id, timeout).with_address_check(check_loopback)
}

/// Where things are: the coordinator and the leader of each partition of the topic.
#[derive(Debug, Clone)]
pub struct ClusterView {
    /// The topic the workload writes.
    pub topic: String,
    /// Partition -> leader address.
    pub leaders: BTreeMap<i32, SocketAddr>,
    /// The transaction coordinator (as FindCoordinator reports it for the probe id).
    pub coordinator: SocketAddr,
    /// Cluster mode (several daemons on etcd): where producers ask FindCoordinator for their
    /// own id, again after NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE /
    /// COORDINATOR_LOAD_IN_PROGRESS or a lost connection. Empty (the default, one daemon):
    /// producers keep `coordinator` for their life.
    pub find_coordinator_at: Vec<SocketAddr>,
}

impl ClusterView {
    /// Asks `bootstrap` for metadata of `topic` and the coordinator of `probe_tid`, retrying
    /// until `deadline`.
    pub async fn discover(
        bootstrap: SocketAddr,
        topic: &str,
        probe_tid: &str,
        within: Duration,
    ) -> anyhow::Result<Self> {
        let mut pool = loopback_pool("fault-discover", Duration::from_secs(2));
        let end = Instant::now() + within;
        let mut last = String::new();
        while Instant::now() < end {
            match Self::discover_once(&mut pool, bootstrap, topic, probe_tid).await {
                Ok(v) => return Ok(v),
                Err(e) => last = e,
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        anyhow::bail!("cluster discovery via {bootstrap} failed: {last}")
    }

    async fn discover_once(
        pool: &mut Pool,
        bootstrap: SocketAddr,
        topic: &str,
        probe_tid: &str,
    ) -> Result<Self, String> {
        use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
        let md = pool
            .call(
                bootstrap,
                &MetadataRequest::default().with_topics(Some(vec![
                    MetadataRequestTopic::default().with_name(Some(TopicName(sb(topic)))),
                ])),
                9,
            )
            .await?;
        let mut brokers = HashMap::new();
        for b in &md.brokers {
            let addr: SocketAddr = format!("{}:{}", b.host, b.port)
                .parse()
                .map_err(|e| format!("broker address: {e}"))?;
            brokers.insert(b.node_id.0, addr);
        }
        let t = md.topics.first().ok_or("no topic in metadata")?;
        if t.error_code != 0 {
            return Err(format!("metadata error {}", t.error_code));
        }
        let mut leaders = BTreeMap::new();
        for p in &t.partitions {
            let a = brokers
                .get(&p.leader_id.0)
                .ok_or_else(|| format!("unknown leader {}", p.leader_id.0))?;
            leaders.insert(p.partition_index, *a);
        }
        let fc = pool
            .call(
                bootstrap,
                &FindCoordinatorRequest::default()
                    .with_key_type(1)
                    .with_key(sb(probe_tid)),
                2,
            )
            .await?;
        if fc.error_code != 0 {
            return Err(format!("FindCoordinator error {}", fc.error_code));
        }
        let coordinator = format!("{}:{}", fc.host, fc.port)
            .parse()
            .map_err(|e| format!("coordinator address: {e}"))?;
        Ok(Self {
            topic: topic.to_owned(),
            leaders,
            coordinator,
            find_coordinator_at: Vec::new(),
        })
    }

    /// This view with producers following the coordinator: they ask `at` (in turn) for the
    /// coordinator of their id and ask again whenever it moves (cluster mode).
    pub fn following(mut self, at: Vec<SocketAddr>) -> Self {
        self.find_coordinator_at = at;
        self
    }
}

/// Where a producer sends a request.
#[derive(Debug, Clone, Copy)]
enum Target {
    /// The transaction coordinator of the producer's id (followed in cluster mode).
    Coordinator,
    /// A fixed address (the group coordinator).
    Fixed(SocketAddr),
}

/// A transactional producer.
#[derive(Debug)]
pub struct TxnProducer {
    view: ClusterView,
    tid: String,
    txn_timeout_ms: i32,
    tv: TxnVersion,
    pool: Pool,
    pid: i64,
    epoch: i16,
    seqs: HashMap<i32, i32>,
    added: HashSet<i32>,
    /// The coordinator requests go to; `None` until FindCoordinator named one (cluster mode).
    coordinator: Option<SocketAddr>,
    /// Which of `view.find_coordinator_at` to ask next.
    ask_next: usize,
    /// How long one logical operation may retry before it is indeterminate.
    pub op_budget: Duration,
}

impl TxnProducer {
    /// A producer for `tid` (no request sent yet).
    pub fn new(view: ClusterView, tid: &str, txn_timeout_ms: i32, tv: TxnVersion) -> Self {
        let following = !view.find_coordinator_at.is_empty();
        // Spread the first lookups of many producers over the nodes.
        let ask_next = tid.bytes().map(usize::from).sum::<usize>();
        Self {
            coordinator: (!following).then_some(view.coordinator),
            ask_next,
            view,
            tid: tid.to_owned(),
            txn_timeout_ms,
            tv,
            pool: loopback_pool(tid, Duration::from_millis(1500)),
            pid: -1,
            epoch: -1,
            seqs: HashMap::new(),
            added: HashSet::new(),
            op_budget: Duration::from_secs(6),
        }
    }

    /// The transactional id.
    pub fn tid(&self) -> &str {
        &self.tid
    }

    /// Current producer id and epoch.
    pub fn pid_epoch(&self) -> (i64, i16) {
        (self.pid, self.epoch)
    }

    /// Forgets the current transaction's client state (after an error that needs re-init).
    pub fn forget_txn(&mut self) {
        self.added.clear();
    }

    /// Overrides the producer id and epoch (to act as a zombie of an older epoch).
    pub fn set_pid_epoch(&mut self, pid: i64, epoch: i16) {
        self.pid = pid;
        self.epoch = epoch;
        self.seqs.clear();
    }

    /// Drops every connection (a client crash without the process exiting).
    pub fn drop_connections(&mut self) {
        self.pool.reset();
    }

    /// Whether this producer follows the coordinator (cluster mode).
    fn following(&self) -> bool {
        !self.view.find_coordinator_at.is_empty()
    }

    /// The coordinator of this producer's id as FindCoordinator(TRANSACTION) names it, asked
    /// of the nodes of `view.find_coordinator_at` in turn (the next one after a failure), as a
    /// Kafka client asks a node it knows; `Err` with the last failure.
    async fn find_coordinator(&mut self) -> Result<SocketAddr, String> {
        let at = &self.view.find_coordinator_at;
        let node = at[self.ask_next % at.len()];
        let req = FindCoordinatorRequest::default()
            .with_key_type(1)
            .with_key(sb(&self.tid));
        let answer = match self.pool.call(node, &req, 2).await {
            Ok(r) if r.error_code == 0 => format!("{}:{}", r.host, r.port)
                .parse()
                .map_err(|e| format!("coordinator address: {e}")),
            Ok(r) => Err(format!("FindCoordinator at {node}: error {}", r.error_code)),
            Err(e) => Err(format!("FindCoordinator at {node}: {e}")),
        };
        if answer.is_err() {
            self.ask_next = self.ask_next.wrapping_add(1);
        }
        answer
    }

    /// Sends `req` until it gets a non-retriable answer or the budget is spent. To the
    /// coordinator in cluster mode: looked up with FindCoordinator first, and again after
    /// NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS or a lost
    /// connection, all within the one budget. An answer after an attempt that may have taken
    /// effect is indeterminate unless it succeeded: an unanswered attempt (to any coordinator),
    /// or one answered NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE, Kafka's answers when the
    /// coordinator's log append failed, which it gives whether or not the write landed (a
    /// PrepareCommit that reached etcd before the connection to it broke is completed by the
    /// next load; the retry then meets whatever came after it, a newer epoch's fence).
    async fn retry<R: Request>(
        &mut self,
        api: &'static str,
        target: Target,
        req: &R,
        version: i16,
        code_of: impl Fn(&R::Response) -> i16,
    ) -> Result<R::Response, ClientError> {
        let end = Instant::now() + self.op_budget;
        // Why an earlier attempt may have taken effect, if one may have.
        let mut ambiguous: Option<String> = None;
        let mut last = String::new();
        while Instant::now() < end {
            let addr = match target {
                Target::Fixed(a) => a,
                Target::Coordinator => match self.coordinator {
                    Some(a) => a,
                    None => match self.find_coordinator().await {
                        Ok(a) => {
                            self.coordinator = Some(a);
                            a
                        }
                        Err(e) => {
                            last = e;
                            tokio::time::sleep(Duration::from_millis(100)).await;
                            continue;
                        }
                    },
                },
            };
            let follow = self.following() && matches!(target, Target::Coordinator);
            match self.pool.call(addr, req, version).await {
                Ok(r) => {
                    let c = code_of(&r);
                    if c == 0 {
                        return Ok(r);
                    }
                    if !ErrorCode(c).is_retried_by_producer() {
                        if let Some(earlier) = ambiguous {
                            return Err(ClientError::Indeterminate {
                                api,
                                reason: format!("error {c} after {earlier}"),
                            });
                        }
                        return Err(ClientError::Definite { api, code: c });
                    }
                    if matches!(
                        ErrorCode(c),
                        ErrorCode::NOT_COORDINATOR | ErrorCode::COORDINATOR_NOT_AVAILABLE
                    ) {
                        ambiguous = Some(format!("an attempt answered error {c}"));
                    }
                    if follow
                        && matches!(
                            ErrorCode(c),
                            ErrorCode::NOT_COORDINATOR
                                | ErrorCode::COORDINATOR_NOT_AVAILABLE
                                | ErrorCode::COORDINATOR_LOAD_IN_PROGRESS
                        )
                    {
                        self.coordinator = None;
                    }
                    last = if follow {
                        format!("retriable error {c} from {addr}")
                    } else {
                        format!("retriable error {c}")
                    };
                }
                Err(e) => {
                    ambiguous = Some("an unanswered attempt".to_owned());
                    last = if follow {
                        self.coordinator = None;
                        format!("{e} ({addr})")
                    } else {
                        e
                    };
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Err(ClientError::Indeterminate { api, reason: last })
    }

    /// InitProducerId (v4, KIP-360: passes the current pid/epoch when it has one). Resets the
    /// sequences. Returns the new (pid, epoch).
    pub async fn init(&mut self) -> Result<(i64, i16), ClientError> {
        let req = InitProducerIdRequest::default()
            .with_transactional_id(Some(TransactionalId(sb(&self.tid))))
            .with_transaction_timeout_ms(self.txn_timeout_ms)
            .with_producer_id(ProducerId(self.pid))
            .with_producer_epoch(self.epoch);
        let r = match self
            .retry("InitProducerId", Target::Coordinator, &req, 4, |r| {
                r.error_code
            })
            .await
        {
            // KIP-360: a stale (pid, epoch) is refused; start over without it.
            Err(ClientError::Definite { code, .. })
                if code == ErrorCode::PRODUCER_FENCED.code()
                    || code == ErrorCode::INVALID_PRODUCER_EPOCH.code()
                    || code == ErrorCode::INVALID_TXN_STATE.code() =>
            {
                let req = req.with_producer_id(ProducerId(-1)).with_producer_epoch(-1);
                self.retry("InitProducerId", Target::Coordinator, &req, 4, |r| {
                    r.error_code
                })
                .await?
            }
            other => other?,
        };
        self.pid = r.producer_id.0;
        self.epoch = r.producer_epoch;
        self.seqs.clear();
        self.added.clear();
        Ok((self.pid, self.epoch))
    }

    /// AddPartitionsToTxn (v3) for the partitions not yet in the transaction.
    pub async fn add_partitions(&mut self, partitions: &[i32]) -> Result<(), ClientError> {
        let new: Vec<i32> = partitions
            .iter()
            .copied()
            .filter(|p| !self.added.contains(p))
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        if new.is_empty() {
            return Ok(());
        }
        let req = AddPartitionsToTxnRequest::default()
            .with_v3_and_below_transactional_id(TransactionalId(sb(&self.tid)))
            .with_v3_and_below_producer_id(ProducerId(self.pid))
            .with_v3_and_below_producer_epoch(self.epoch)
            .with_v3_and_below_topics(vec![
                AddPartitionsToTxnTopic::default()
                    .with_name(TopicName(sb(&self.view.topic)))
                    .with_partitions(new.clone()),
            ]);
        self.retry("AddPartitionsToTxn", Target::Coordinator, &req, 3, |r| {
            r.results_by_topic_v3_and_below
                .iter()
                .flat_map(|t| t.results_by_partition.iter())
                .map(|p| p.partition_error_code)
                .find(|c| *c != 0)
                .unwrap_or(0)
        })
        .await?;
        self.added.extend(new);
        Ok(())
    }

    /// Produces `values` as one batch to `partition` (v9, acks=all), retrying the same batch
    /// with the same sequence on lost connections. Returns the base offset (`-1` when the
    /// broker reported the batch as a duplicate of one it already has).
    pub async fn produce(
        &mut self,
        partition: i32,
        values: &[String],
        transactional: bool,
    ) -> Result<i64, ClientError> {
        let Some(addr) = self.view.leaders.get(&partition).copied() else {
            return Err(ClientError::Definite {
                api: "Produce",
                code: 3,
            });
        };
        let seq = self.seqs.get(&partition).copied().unwrap_or(0);
        let batch = record_batch(Some((self.pid, self.epoch, seq)), transactional, values);
        let req = ProduceRequest::default()
            .with_transactional_id(transactional.then(|| TransactionalId(sb(&self.tid))))
            .with_acks(-1)
            .with_timeout_ms(3000)
            .with_topic_data(vec![
                TopicProduceData::default()
                    .with_name(TopicName(sb(&self.view.topic)))
                    .with_partition_data(vec![
                        PartitionProduceData::default()
                            .with_index(partition)
                            .with_records(Some(batch)),
                    ]),
            ]);
        let code_of = |r: &kafka_protocol::messages::ProduceResponse| {
            r.responses
                .first()
                .and_then(|t| t.partition_responses.first())
                .map_or(-1, |p| p.error_code)
        };
        let end = Instant::now() + self.op_budget;
        let mut last = String::new();
        let mut ambiguous = false;
        while Instant::now() < end {
            match self.pool.call(addr, &req, 9).await {
                Ok(r) => {
                    let c = code_of(&r);
                    let base = r
                        .responses
                        .first()
                        .and_then(|t| t.partition_responses.first())
                        .map_or(-1, |p| p.base_offset);
                    if c == 0 || c == ErrorCode::DUPLICATE_SEQUENCE_NUMBER.code() {
                        let n = i32::try_from(values.len()).unwrap_or(i32::MAX);
                        self.seqs.insert(partition, seq.wrapping_add(n));
                        return Ok(if c == 0 { base } else { -1 });
                    }
                    if !ErrorCode(c).is_retried_by_producer() {
                        if ambiguous {
                            return Err(ClientError::Indeterminate {
                                api: "Produce",
                                reason: format!("error {c} after an unanswered attempt"),
                            });
                        }
                        return Err(ClientError::Definite {
                            api: "Produce",
                            code: c,
                        });
                    }
                    last = format!("retriable error {c}");
                }
                Err(e) => {
                    ambiguous = true;
                    last = e;
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Err(ClientError::Indeterminate {
            api: "Produce",
            reason: last,
        })
    }

    /// EndTxn (v3 for TV1, v5 for TV2; TV2 takes the returned epoch). Retries on lost
    /// connections.
    pub async fn end(&mut self, commit: bool) -> Result<(), ClientError> {
        let version = if self.tv.bumps_epoch_per_txn() { 5 } else { 3 };
        let req = EndTxnRequest::default()
            .with_transactional_id(TransactionalId(sb(&self.tid)))
            .with_producer_id(ProducerId(self.pid))
            .with_producer_epoch(self.epoch)
            .with_committed(commit);
        let r = self
            .retry("EndTxn", Target::Coordinator, &req, version, |r| {
                r.error_code
            })
            .await?;
        if self.tv.bumps_epoch_per_txn() && r.producer_id.0 >= 0 {
            if r.producer_id.0 != self.pid || r.producer_epoch != self.epoch {
                self.seqs.clear();
            }
            self.pid = r.producer_id.0;
            self.epoch = r.producer_epoch;
        }
        self.added.clear();
        Ok(())
    }

    /// AddOffsetsToTxn + TxnOffsetCommit of `offsets` (partition, next offset to consume) of
    /// the consumed `topic` to the group coordinator at `group_coordinator`.
    pub async fn send_offsets(
        &mut self,
        group_coordinator: SocketAddr,
        group: &str,
        topic: &str,
        offsets: &[(i32, i64)],
    ) -> Result<(), ClientError> {
        let req = AddOffsetsToTxnRequest::default()
            .with_transactional_id(TransactionalId(sb(&self.tid)))
            .with_producer_id(ProducerId(self.pid))
            .with_producer_epoch(self.epoch)
            .with_group_id(GroupId(sb(group)));
        self.retry("AddOffsetsToTxn", Target::Coordinator, &req, 3, |r| {
            r.error_code
        })
        .await?;
        let req = TxnOffsetCommitRequest::default()
            .with_transactional_id(TransactionalId(sb(&self.tid)))
            .with_group_id(GroupId(sb(group)))
            .with_producer_id(ProducerId(self.pid))
            .with_producer_epoch(self.epoch)
            .with_topics(vec![
                TxnOffsetCommitRequestTopic::default()
                    .with_name(TopicName(sb(topic)))
                    .with_partitions(
                        offsets
                            .iter()
                            .map(|&(p, o)| {
                                TxnOffsetCommitRequestPartition::default()
                                    .with_partition_index(p)
                                    .with_committed_offset(o)
                            })
                            .collect(),
                    ),
            ]);
        self.retry(
            "TxnOffsetCommit",
            Target::Fixed(group_coordinator),
            &req,
            3,
            |r| {
                r.topics
                    .iter()
                    .flat_map(|t| t.partitions.iter())
                    .map(|p| p.error_code)
                    .find(|c| *c != 0)
                    .unwrap_or(0)
            },
        )
        .await?;
        Ok(())
    }
}

/// A consumer group's committed offsets, read as a KIP-447 read_committed consumer reads them:
/// OffsetFetch v7 with `require_stable`, retried while a transactional commit is pending.
#[derive(Debug)]
pub struct GroupOffsets {
    pool: Pool,
    group: String,
    coordinator: SocketAddr,
    /// How long one fetch retries before it gives up.
    pub op_budget: Duration,
}

impl GroupOffsets {
    /// Asks `bootstrap` for the coordinator of `group` (FindCoordinator, key type 0), retrying
    /// until `within` has passed.
    pub async fn discover(
        bootstrap: SocketAddr,
        group: &str,
        client_id: &str,
        within: Duration,
    ) -> anyhow::Result<Self> {
        let mut pool = loopback_pool(client_id, Duration::from_millis(1500));
        let end = Instant::now() + within;
        let mut last = String::new();
        while Instant::now() < end {
            let req = FindCoordinatorRequest::default()
                .with_key_type(0)
                .with_key(sb(group));
            match pool.call(bootstrap, &req, 2).await {
                Ok(r) if r.error_code == 0 => {
                    let coordinator = format!("{}:{}", r.host, r.port).parse()?;
                    return Ok(Self {
                        pool,
                        group: group.to_owned(),
                        coordinator,
                        op_budget: Duration::from_secs(6),
                    });
                }
                Ok(r) => last = format!("FindCoordinator error {}", r.error_code),
                Err(e) => last = e,
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        anyhow::bail!("group coordinator discovery via {bootstrap} failed: {last}")
    }

    /// The group coordinator's address.
    pub fn coordinator(&self) -> SocketAddr {
        self.coordinator
    }

    /// The committed offset of `topic`/`partition` (`-1`: none), once no transactional
    /// commit of it is pending.
    pub async fn committed(&mut self, topic: &str, partition: i32) -> Result<i64, ClientError> {
        use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
        let req = OffsetFetchRequest::default()
            .with_group_id(GroupId(sb(&self.group)))
            .with_require_stable(true)
            .with_topics(Some(vec![
                OffsetFetchRequestTopic::default()
                    .with_name(TopicName(sb(topic)))
                    .with_partition_indexes(vec![partition]),
            ]));
        let end = Instant::now() + self.op_budget;
        let mut last = String::new();
        while Instant::now() < end {
            match self.pool.call(self.coordinator, &req, 7).await {
                Ok(r) => {
                    let p = r.topics.first().and_then(|t| t.partitions.first());
                    let code = if r.error_code != 0 {
                        r.error_code
                    } else {
                        p.map_or(-1, |p| p.error_code)
                    };
                    match p {
                        Some(p) if code == 0 => return Ok(p.committed_offset),
                        _ if ErrorCode(code).is_retried_by_producer() => {
                            last = format!("retriable error {code}");
                        }
                        _ => {
                            return Err(ClientError::Definite {
                                api: "OffsetFetch",
                                code,
                            });
                        }
                    }
                }
                Err(e) => last = e,
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Err(ClientError::Indeterminate {
            api: "OffsetFetch",
            reason: last,
        })
    }
}

/// One record a read_committed fetch delivered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivered {
    /// Offset.
    pub offset: i64,
    /// Value (UTF-8, lossy).
    pub value: String,
}

/// One read_committed fetch result.
#[derive(Debug, Clone, Default)]
pub struct FetchResult {
    /// Records delivered to the application (aborted ones and control batches filtered).
    pub records: Vec<Delivered>,
    /// Where the next fetch starts.
    pub next_offset: i64,
    /// Last stable offset reported.
    pub last_stable_offset: i64,
    /// High watermark reported.
    pub high_watermark: i64,
}

/// Applies Kafka's client-side read_committed filter to the batches of one fetch response:
/// aborted transactions (producer id, first offset) become active as the batches pass their
/// first offset, an ABORT control batch of an active producer ends it, control batches are
/// never delivered, and transactional batches of an active aborted producer are skipped.
/// Returns the delivered records and the offset after the last batch.
pub fn filter_read_committed(
    records: &Bytes,
    aborted: &[(i64, i64)],
    fetch_offset: i64,
) -> Result<(Vec<Delivered>, i64), String> {
    let mut buf = records.clone();
    let sets = RecordBatchDecoder::decode_all(&mut buf).map_err(|e| e.to_string())?;
    let mut aborted: Vec<(i64, i64)> = aborted.to_vec();
    aborted.sort_by_key(|a| a.1);
    let mut next_aborted = 0;
    let mut active: HashSet<i64> = HashSet::new();
    let mut out = Vec::new();
    let mut next = fetch_offset;
    for set in sets {
        let Some(last) = set.records.last() else {
            continue;
        };
        let last_offset = last.offset;
        let first = &set.records[0];
        while next_aborted < aborted.len() && aborted[next_aborted].1 <= last_offset {
            active.insert(aborted[next_aborted].0);
            next_aborted += 1;
        }
        next = next.max(last_offset + 1);
        if first.control {
            let kind = first
                .key
                .as_ref()
                .filter(|k| k.len() >= 4)
                .map(|k| i16::from_be_bytes([k[2], k[3]]));
            if kind == Some(0) {
                active.remove(&first.producer_id);
            }
            continue;
        }
        if first.transactional && active.contains(&first.producer_id) {
            continue;
        }
        for r in &set.records {
            if r.offset < fetch_offset {
                continue;
            }
            out.push(Delivered {
                offset: r.offset,
                value: String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned(),
            });
        }
    }
    Ok((out, next))
}

/// A read_committed fetcher of one topic.
#[derive(Debug)]
pub struct Fetcher {
    view: ClusterView,
    pool: Pool,
}

impl Fetcher {
    /// A fetcher.
    pub fn new(view: ClusterView, client_id: &str) -> Self {
        Self {
            view,
            pool: loopback_pool(client_id, Duration::from_millis(1500)),
        }
    }

    /// One Fetch v11 (isolation_level=1) of `partition` from `offset`.
    pub async fn fetch(&mut self, partition: i32, offset: i64) -> Result<FetchResult, String> {
        let addr = *self
            .view
            .leaders
            .get(&partition)
            .ok_or("unknown partition")?;
        let req = FetchRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_max_wait_ms(50)
            .with_min_bytes(1)
            .with_max_bytes(8 << 20)
            .with_isolation_level(1)
            .with_topics(vec![
                FetchTopic::default()
                    .with_topic(TopicName(sb(&self.view.topic)))
                    .with_partitions(vec![
                        FetchPartition::default()
                            .with_partition(partition)
                            .with_fetch_offset(offset)
                            .with_partition_max_bytes(8 << 20),
                    ]),
            ]);
        let resp = self.pool.call(addr, &req, 11).await?;
        let p = resp
            .responses
            .first()
            .and_then(|t| t.partitions.first())
            .ok_or("empty fetch response")?;
        if p.error_code != 0 {
            return Err(format!("fetch error {}", p.error_code));
        }
        let aborted: Vec<(i64, i64)> = p
            .aborted_transactions
            .iter()
            .flatten()
            .map(|a| (a.producer_id.0, a.first_offset))
            .collect();
        let (records, next) =
            filter_read_committed(&p.records.clone().unwrap_or_default(), &aborted, offset)?;
        Ok(FetchResult {
            records,
            next_offset: next,
            last_stable_offset: p.last_stable_offset,
            high_watermark: p.high_watermark,
        })
    }

    /// Reads `partition` from 0 until the fetch position reaches the last stable offset, once
    /// the LSO has reached the high watermark. `Err` with (lso, hw) if it does not within
    /// `within` (a hanging transaction).
    pub async fn read_all_stable(
        &mut self,
        partition: i32,
        within: Duration,
    ) -> Result<Vec<Delivered>, (i64, i64, String)> {
        let end = Instant::now() + within;
        let mut last = (-1, -1, String::new());
        loop {
            if Instant::now() >= end {
                return Err(last);
            }
            match self.fetch(partition, 0).await {
                Ok(r) if r.last_stable_offset == r.high_watermark => {
                    let mut all = r.records;
                    let mut pos = r.next_offset;
                    let hw = r.high_watermark;
                    let mut ok = true;
                    while pos < hw {
                        match self.fetch(partition, pos).await {
                            Ok(r2) if r2.next_offset > pos => {
                                all.extend(r2.records);
                                pos = r2.next_offset;
                            }
                            Ok(_) => break,
                            Err(e) => {
                                last.2 = e;
                                ok = false;
                                break;
                            }
                        }
                    }
                    if ok {
                        return Ok(all);
                    }
                }
                Ok(r) => last = (r.last_stable_offset, r.high_watermark, "LSO < HW".into()),
                Err(e) => last.2 = e,
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use markers::participant::{ControlBatch, DataBatch};
    use txn_log::{CoordinatorEpoch, ProducerEpoch, ProducerId, TxnResult};
    use txn_testkit::fake_broker::{FakeBroker, FakeBrokerConfig, Reply, Script};

    /// A transactional batch of `values` at `offset`, or the marker of `result`.
    fn batch(pid: i64, offset: i64, marker: Option<TxnResult>, values: &[&str]) -> Vec<u8> {
        let bytes = match marker {
            Some(result) => ControlBatch {
                producer_id: ProducerId(pid),
                producer_epoch: ProducerEpoch(0),
                coordinator_epoch: CoordinatorEpoch(0),
                result,
                base_offset: offset,
                partition_leader_epoch: -1,
                timestamp_ms: 0,
            }
            .encode(),
            None => DataBatch {
                producer_id: ProducerId(pid),
                producer_epoch: ProducerEpoch(0),
                base_sequence: 0,
                transactional: true,
                base_offset: offset,
                ..DataBatch::default()
            }
            .encode(
                values
                    .iter()
                    .map(|v| (None, Some(Bytes::from((*v).to_owned())))),
            ),
        };
        bytes.expect("encode").to_vec()
    }

    /// A coordinator whose EndTxn answers are `codes`, one per attempt, and the producer's view
    /// of it (one daemon, no lookup).
    async fn coordinator_answering(codes: Vec<ErrorCode>) -> (FakeBroker, ClusterView) {
        use kafka_protocol::messages::{ApiKey, EndTxnResponse, RequestKind, ResponseKind};
        let answers = txn_log::sync::Mutex::new(codes.into_iter());
        let script: Script = std::sync::Arc::new(move |body, _| match body {
            RequestKind::EndTxn(_) => {
                let code = answers.lock().next().expect("an answer for each attempt");
                Reply::Answer(Box::new(ResponseKind::EndTxn(
                    EndTxnResponse::default().with_error_code(code.code()),
                )))
            }
            _ => Reply::Default,
        });
        let broker = FakeBroker::start(
            "127.0.0.1:0",
            FakeBrokerConfig {
                apis: vec![(ApiKey::ApiVersions, 0, 3), (ApiKey::EndTxn, 0, 5)],
                script: Some(script),
                ..FakeBrokerConfig::default()
            },
        )
        .await
        .expect("fake coordinator");
        let view = ClusterView {
            topic: "t".to_owned(),
            leaders: BTreeMap::new(),
            coordinator: broker.addr(),
            find_coordinator_at: Vec::new(),
        };
        (broker, view)
    }

    /// The answer to EndTxn(commit) of a TV2 producer from `codes`.
    async fn end_after(codes: Vec<ErrorCode>) -> Result<(), ClientError> {
        let (_coordinator, view) = coordinator_answering(codes).await;
        let mut p = TxnProducer::new(view, "w", 6000, TxnVersion::V2);
        p.set_pid_epoch(1002, 1049);
        p.end(true).await
    }

    /// The fault run with seed 6234095816819823917 (fault_cluster): a daemon's PrepareCommit
    /// append failed with a broken connection to etcd after etcd had applied it; the daemon
    /// answered NOT_COORDINATOR, the next load completed the commit, the producer's retry met
    /// the epoch another process's InitProducerId had bumped meanwhile and was answered
    /// PRODUCER_FENCED. A rejection after such an answer says nothing about the first attempt.
    #[tokio::test]
    async fn a_rejection_after_not_coordinator_is_indeterminate() {
        for first in [
            ErrorCode::NOT_COORDINATOR,
            ErrorCode::COORDINATOR_NOT_AVAILABLE,
        ] {
            let r = end_after(vec![first, ErrorCode::PRODUCER_FENCED]).await;
            assert!(
                matches!(r, Err(ClientError::Indeterminate { .. })),
                "after {first:?}: {r:?}"
            );
        }
        // Answers that say the attempt was not applied keep the rejection definite.
        for first in [
            ErrorCode::CONCURRENT_TRANSACTIONS,
            ErrorCode::COORDINATOR_LOAD_IN_PROGRESS,
        ] {
            let r = end_after(vec![first, ErrorCode::PRODUCER_FENCED]).await;
            assert_eq!(
                r,
                Err(ClientError::Definite {
                    api: "EndTxn",
                    code: ErrorCode::PRODUCER_FENCED.code()
                }),
                "after {first:?}"
            );
        }
    }

    #[test]
    fn read_committed_filter_follows_the_aborted_index_and_markers() {
        let mut log = Vec::new();
        log.extend(batch(7, 0, None, &["a1", "a2"])); // aborted txn of pid 7
        log.extend(batch(8, 2, None, &["b1"])); // committed txn of pid 8
        log.extend(batch(7, 3, Some(TxnResult::Abort), &[])); // ABORT marker of pid 7
        log.extend(batch(8, 4, Some(TxnResult::Commit), &[])); // COMMIT marker of pid 8
        log.extend(batch(7, 5, None, &["c1"])); // a later, committed txn of pid 7
        log.extend(batch(7, 6, Some(TxnResult::Commit), &[]));
        let log = Bytes::from(log);
        let (out, next) = filter_read_committed(&log, &[(7, 0)], 0).expect("decodes");
        let values: Vec<&str> = out.iter().map(|d| d.value.as_str()).collect();
        assert_eq!(values, ["b1", "c1"]);
        assert_eq!(next, 7);
        // without the aborted index entry nothing is filtered (the broker's job)
        let (out, _) = filter_read_committed(&log, &[], 0).expect("decodes");
        assert_eq!(out.len(), 4);
        // fetching from the middle skips earlier records of the first batch
        let (out, _) = filter_read_committed(&log, &[], 1).expect("decodes");
        assert_eq!(out[0].value, "a2");
    }
}
