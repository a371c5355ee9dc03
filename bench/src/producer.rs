//! One transactional producer: FindCoordinator, InitProducerId once, then
//! AddPartitionsToTxn -> Produce -> EndTxn in a loop until the deadline.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use bytes::Bytes;
use kafka_protocol::messages::{
    AddPartitionsToTxnRequest, ApiKey, EndTxnRequest, InitProducerIdRequest, ProduceRequest,
    ProducerId, TopicName, TransactionalId,
    add_partitions_to_txn_request::AddPartitionsToTxnTopic,
    produce_request::{PartitionProduceData, TopicProduceData},
};
use kafka_protocol::protocol::StrBytes;
use markers::participant::{DataBatch, RecordTimestamps};
use tokio::time::Instant;
use txn_log::ErrorCode;
use txn_log::rng::Rng;

use crate::stats::Lat;
use txn_testkit::client::{Conn, TopicLayout, find_coordinator};

/// What every producer of a run shares.
#[derive(Debug)]
pub(crate) struct Params {
    pub(crate) bootstrap: String,
    pub(crate) layout: TopicLayout,
    pub(crate) txn_id_prefix: String,
    pub(crate) txn_version: u8,
    pub(crate) partitions_per_txn: usize,
    pub(crate) records_per_txn: usize,
    pub(crate) record_size: usize,
    pub(crate) abort_fraction: f64,
    /// Pacing interval of one producer (from `--rate`), if any.
    pub(crate) interval: Option<Duration>,
    pub(crate) transaction_timeout_ms: i32,
    /// Opens the connections to the transaction coordinator (`--coordinator-security`).
    pub(crate) coordinator_connector: Arc<dyn markers::wire::Connector>,
}

/// Results count only for operations that finish inside `[from, to]`; loops stop at `to`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Window {
    pub(crate) from: Instant,
    pub(crate) to: Instant,
}

/// What one producer measured inside the window.
#[derive(Debug, Default, Clone)]
pub(crate) struct ProducerStats {
    pub(crate) add: Lat,
    pub(crate) produce: Lat,
    pub(crate) end: Lat,
    pub(crate) txn: Lat,
    pub(crate) committed: u64,
    pub(crate) aborted: u64,
    pub(crate) records: u64,
    /// Retries after a retriable error code (CONCURRENT_TRANSACTIONS, ...), whole run.
    pub(crate) retries: u64,
    /// Non-retriable errors answered by the server, whole run.
    pub(crate) errors: u64,
    /// InitProducerId calls after the first (recoveries), whole run.
    pub(crate) reinits: u64,
    pub(crate) first_error: Option<String>,
    /// The producer stopped early on this error.
    pub(crate) fatal: Option<String>,
}

impl ProducerStats {
    /// Adds `o` into `self` (errors: the first one wins).
    pub(crate) fn merge(&mut self, o: &Self) {
        self.add.merge(&o.add);
        self.produce.merge(&o.produce);
        self.end.merge(&o.end);
        self.txn.merge(&o.txn);
        self.committed += o.committed;
        self.aborted += o.aborted;
        self.records += o.records;
        self.retries += o.retries;
        self.errors += o.errors;
        self.reinits += o.reinits;
        if self.first_error.is_none() {
            self.first_error.clone_from(&o.first_error);
        }
        if self.fatal.is_none() {
            self.fatal.clone_from(&o.fatal);
        }
    }
}

/// Negotiated versions of one producer.
#[derive(Debug, Clone, Copy)]
struct Vers {
    init: i16,
    add: i16,
    produce: i16,
    end: i16,
}

/// A producer that finished its setup (connections, InitProducerId).
pub(crate) struct Producer {
    idx: usize,
    w: Window,
    p: Arc<Params>,
    txn_id: String,
    conns: HashMap<String, Conn>,
    coordinator: String,
    vers: Vers,
    pid: i64,
    epoch: i16,
    seqs: HashMap<i32, i32>,
    payload: Bytes,
}

/// Connects, finds the coordinator and runs InitProducerId for producer `idx`.
pub(crate) async fn setup(idx: usize, params: Arc<Params>) -> anyhow::Result<Producer> {
    let txn_id = format!("{}-{idx}", params.txn_id_prefix);
    let mut boot = Conn::connect(&params.bootstrap, &txn_id).await?;
    let setup_deadline = Instant::now() + Duration::from_secs(90);
    let (_, coordinator) = find_coordinator(&mut boot, &txn_id, setup_deadline).await?;
    let mut conns = HashMap::new();
    conns.insert(boot.addr.clone(), boot);
    if !conns.contains_key(&coordinator) {
        conns.insert(
            coordinator.clone(),
            Conn::connect_with(params.coordinator_connector.as_ref(), &coordinator, &txn_id)
                .await?,
        );
    }
    for addr in params.layout.brokers.values() {
        if !conns.contains_key(addr) {
            conns.insert(addr.clone(), Conn::connect(addr, &txn_id).await?);
        }
    }
    let cv = &conns[&coordinator].versions;
    let tv2 = params.txn_version >= 2;
    let vers = Vers {
        init: cv.pick(ApiKey::InitProducerId, 0, if tv2 { 6 } else { 4 })?,
        add: cv.pick(ApiKey::AddPartitionsToTxn, 0, 3)?,
        end: if tv2 {
            cv.pick(ApiKey::EndTxn, 5, 5)
                .context("--txn-version 2 needs EndTxn v5")?
        } else {
            cv.pick(ApiKey::EndTxn, 0, 4)?
        },
        produce: {
            let mut v = i16::MAX;
            for a in params.layout.brokers.values() {
                v = v.min(
                    conns[a]
                        .versions
                        .pick(ApiKey::Produce, 3, if tv2 { 12 } else { 11 })?,
                );
            }
            v
        },
    };
    let payload = Bytes::from(vec![b'x'; params.record_size]);
    let now = Instant::now();
    let mut pr = Producer {
        idx,
        w: Window { from: now, to: now },
        p: params,
        txn_id,
        conns,
        coordinator,
        vers,
        pid: -1,
        epoch: -1,
        seqs: HashMap::new(),
        payload,
    };
    pr.init(setup_deadline).await?;
    Ok(pr)
}

impl Producer {
    /// Loops transactions until `w.to`; never panics, reports a fatal error in the stats.
    pub(crate) async fn run(mut self, w: Window) -> ProducerStats {
        self.w = w;
        let mut stats = ProducerStats::default();
        if let Err(e) = self.run_loop(&mut stats).await {
            stats.fatal = Some(format!("{e:#}"));
        }
        stats
    }

    async fn run_loop(&mut self, stats: &mut ProducerStats) -> anyhow::Result<()> {
        let idx = self.idx;
        // seeded per producer: a run replays its commit/abort choices
        let mut rng = Rng::new(0x5EED_0000 + idx as u64);
        let k = self.p.partitions_per_txn;
        let nparts = self.p.layout.leaders.len();
        let interval = self.p.interval;
        let abort_fraction = self.p.abort_fraction;
        let mut next_start = Instant::now();
        let mut j: usize = 0;
        while Instant::now() < self.w.to {
            if let Some(iv) = interval {
                let now = Instant::now();
                if next_start > now {
                    tokio::time::sleep_until(next_start).await;
                } else if now - next_start > Duration::from_secs(1) {
                    next_start = now;
                }
                next_start += iv;
            }
            let parts: Vec<i32> = (0..k)
                .map(|x| i32::try_from((idx * k + j * k + x) % nparts).unwrap_or(0))
                .collect();
            j = j.wrapping_add(1);
            let commit = !rng.chance(abort_fraction);
            match self.one_txn(&parts, commit, stats).await {
                Ok(()) => {}
                Err(TxnError::Server(msg)) => {
                    stats.errors += 1;
                    if stats.first_error.is_none() {
                        stats.first_error = Some(msg);
                    }
                    if stats.errors > 1000 {
                        bail!(
                            "too many errors: {}",
                            stats.first_error.clone().unwrap_or_default()
                        );
                    }
                    // Recover like a client would: abort (best effort), then re-init
                    // (which bumps the epoch).
                    let _ = self.end_txn(false).await;
                    stats.reinits += 1;
                    self.init(Instant::now() + Duration::from_secs(30)).await?;
                }
                Err(TxnError::Fatal(e)) => return Err(e),
            }
        }
        Ok(())
    }
}

/// How long one request is retried on retriable error codes before it counts as an error.
const RETRY_FOR: Duration = Duration::from_secs(15);

fn in_window(w: &Window, t: Instant) -> bool {
    t >= w.from && t <= w.to
}

enum TxnError {
    /// The server answered with a non-retriable error: recover and go on.
    Server(String),
    /// Connection or codec failure: stop this producer.
    Fatal(anyhow::Error),
}

impl From<anyhow::Error> for TxnError {
    fn from(e: anyhow::Error) -> Self {
        Self::Fatal(e)
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Back-off between retries of a retriable error: 1 ms for the first five attempts, then
/// doubling to at most 8 ms (Kafka's Java producer waits 20 ms before retrying a
/// CONCURRENT_TRANSACTIONS AddPartitionsToTxn; a short poll keeps our latency honest).
fn backoff(attempt: u32) -> Duration {
    Duration::from_millis(1 << attempt.saturating_sub(4).min(3))
}

/// The retries of one request: an answer with a code the producer retries is retried after
/// [`backoff`] until [`RETRY_FOR`] has passed since `since`.
struct Retry {
    since: Instant,
    attempt: u32,
}

impl Retry {
    fn since(since: Instant) -> Self {
        Self { since, attempt: 0 }
    }

    /// After `api` answered `code`: `Ok(true)` it succeeded, `Ok(false)` send it again (the
    /// backoff was waited and the retry counted in `stats`), `Err` a code not retried or no
    /// time left.
    async fn after(
        &mut self,
        api: &str,
        code: i16,
        stats: &mut ProducerStats,
    ) -> Result<bool, TxnError> {
        if code == ErrorCode::NONE.code() {
            return Ok(true);
        }
        if ErrorCode(code).is_retried_by_producer() && self.since.elapsed() < RETRY_FOR {
            stats.retries += 1;
            tokio::time::sleep(backoff(self.attempt)).await;
            self.attempt += 1;
            return Ok(false);
        }
        Err(TxnError::Server(format!("{api}: error {code}")))
    }
}

/// The last non-zero code of `codes` (a response's per-partition codes), 0 if none.
fn worst_code(codes: impl IntoIterator<Item = i16>) -> i16 {
    codes
        .into_iter()
        .filter(|&c| c != ErrorCode::NONE.code())
        .last()
        .unwrap_or(ErrorCode::NONE.code())
}

impl Producer {
    fn coord(&mut self) -> &mut Conn {
        self.conns
            .get_mut(&self.coordinator)
            .expect("coordinator connection exists")
    }

    fn txn_id(&self) -> TransactionalId {
        TransactionalId(StrBytes::from_string(self.txn_id.clone()))
    }

    async fn init(&mut self, deadline: Instant) -> anyhow::Result<()> {
        let mut attempt = 0;
        loop {
            let req = InitProducerIdRequest::default()
                .with_transactional_id(Some(self.txn_id()))
                .with_transaction_timeout_ms(self.p.transaction_timeout_ms)
                .with_producer_id(ProducerId(if self.vers.init >= 3 { self.pid } else { -1 }))
                .with_producer_epoch(if self.vers.init >= 3 { self.epoch } else { -1 });
            let v = self.vers.init;
            let resp = self.coord().call(&req, v).await?;
            if resp.error_code == ErrorCode::NONE.code() {
                self.pid = resp.producer_id.0;
                self.epoch = resp.producer_epoch;
                self.seqs.clear();
                return Ok(());
            }
            if !ErrorCode(resp.error_code).is_retried_by_producer() || Instant::now() > deadline {
                bail!("InitProducerId {}: error {}", self.txn_id, resp.error_code);
            }
            tokio::time::sleep(backoff(attempt)).await;
            attempt += 1;
        }
    }

    async fn one_txn(
        &mut self,
        parts: &[i32],
        commit: bool,
        stats: &mut ProducerStats,
    ) -> Result<(), TxnError> {
        let t0 = Instant::now();

        // AddPartitionsToTxn, retried on retriable codes (CONCURRENT_TRANSACTIONS while the
        // previous transaction's markers are in flight).
        let topic = TopicName(StrBytes::from_string(self.p.layout.topic.clone()));
        let mut retry = Retry::since(t0);
        loop {
            let req = AddPartitionsToTxnRequest::default()
                .with_v3_and_below_transactional_id(self.txn_id())
                .with_v3_and_below_producer_id(ProducerId(self.pid))
                .with_v3_and_below_producer_epoch(self.epoch)
                .with_v3_and_below_topics(vec![
                    AddPartitionsToTxnTopic::default()
                        .with_name(topic.clone())
                        .with_partitions(parts.to_vec()),
                ]);
            let v = self.vers.add;
            let resp = self.coord().call(&req, v).await?;
            let worst = worst_code(
                resp.results_by_topic_v3_and_below
                    .iter()
                    .flat_map(|t| &t.results_by_partition)
                    .map(|r| r.partition_error_code),
            );
            if retry.after("AddPartitionsToTxn", worst, stats).await? {
                break;
            }
        }
        let t1 = Instant::now();

        // Produce: one request per leader, one batch per partition.
        let mut by_leader: HashMap<String, Vec<i32>> = HashMap::new();
        for &p in parts {
            let leader = self.p.layout.leaders[usize::try_from(p).unwrap_or(0)];
            let addr = self.p.layout.brokers[&leader].clone();
            by_leader.entry(addr).or_default().push(p);
        }
        let n = self.p.records_per_txn;
        let n_i32 = i32::try_from(n).unwrap_or(i32::MAX);
        for (addr, ps) in by_leader {
            let mut pdata = Vec::with_capacity(ps.len());
            for &p in &ps {
                let base = *self.seqs.get(&p).unwrap_or(&0);
                let batch = DataBatch {
                    producer_id: txn_log::ProducerId(self.pid),
                    producer_epoch: txn_log::ProducerEpoch(self.epoch),
                    base_sequence: base,
                    transactional: true,
                    timestamps: RecordTimestamps::Same(now_ms()),
                    ..DataBatch::default()
                }
                .encode((0..n).map(|_| (None, Some(self.payload.clone()))))
                .map_err(|e| TxnError::Fatal(anyhow::anyhow!("encode batch: {e}")))?;
                pdata.push(
                    PartitionProduceData::default()
                        .with_index(p)
                        .with_records(Some(batch)),
                );
            }
            let req = ProduceRequest::default()
                .with_transactional_id(Some(self.txn_id()))
                .with_acks(-1)
                .with_timeout_ms(30_000)
                .with_topic_data(vec![
                    TopicProduceData::default()
                        .with_name(topic.clone())
                        .with_partition_data(pdata),
                ]);
            let v = self.vers.produce;
            let mut retry = Retry::since(t1);
            loop {
                let conn = self.conns.get_mut(&addr).expect("leader connection exists");
                let resp = conn.call(&req, v).await?;
                let worst = worst_code(
                    resp.responses
                        .iter()
                        .flat_map(|t| &t.partition_responses)
                        .map(|r| r.error_code),
                );
                if retry.after("Produce", worst, stats).await? {
                    break;
                }
            }
            for &p in &ps {
                let e = self.seqs.entry(p).or_insert(0);
                *e = e.wrapping_add(n_i32);
            }
        }
        let t2 = Instant::now();

        self.end_txn_retrying(commit, stats).await?;
        let t3 = Instant::now();
        if in_window(&self.w, t3) {
            stats.add.record(t1 - t0);
            stats.produce.record(t2 - t1);
            stats.end.record(t3 - t2);
            stats.txn.record(t3 - t0);
            if commit {
                stats.committed += 1;
                stats.records += (n * parts.len()) as u64;
            } else {
                stats.aborted += 1;
            }
        }
        Ok(())
    }

    async fn end_txn_retrying(
        &mut self,
        commit: bool,
        stats: &mut ProducerStats,
    ) -> Result<(), TxnError> {
        let mut retry = Retry::since(Instant::now());
        loop {
            let c = self.end_txn(commit).await?;
            if retry.after("EndTxn", c, stats).await? {
                return Ok(());
            }
        }
    }

    /// One EndTxn; returns its error code. With v5 adopts the returned producer id and epoch.
    async fn end_txn(&mut self, commit: bool) -> anyhow::Result<i16> {
        let req = EndTxnRequest::default()
            .with_transactional_id(self.txn_id())
            .with_producer_id(ProducerId(self.pid))
            .with_producer_epoch(self.epoch)
            .with_committed(commit);
        let v = self.vers.end;
        let resp = self.coord().call(&req, v).await?;
        if resp.error_code == ErrorCode::NONE.code() && v >= 5 {
            let (pid, epoch) = (resp.producer_id.0, resp.producer_epoch);
            if pid >= 0 && (pid != self.pid || epoch != self.epoch) {
                self.pid = pid;
                self.epoch = epoch;
                self.seqs.clear();
            }
        }
        Ok(resp.error_code)
    }
}
