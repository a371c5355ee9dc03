//! [`EtcdTxnLog`]: the transaction log in etcd (v3 API), replicated by etcd's Raft, so that
//! several coordinators can share the log partitions and take them over from each other.
//!
//! # Keys (under a prefix, default `/txn-coordinator`)
//!
//! ```text
//! {prefix}/ ++ codec::epoch_key(p)         -> coordinator epoch envelope of partition p
//! {prefix}/ ++ codec::record_key(p, id)    -> transaction record envelope
//! {prefix}/ ++ codec::PRODUCER_ID_KEY      -> producer-id counter envelope
//! {prefix}/security/acl/...                -> ACL binding envelope (crate::security)
//! {prefix}/security/scram/MECHANISM/USER   -> SCRAM credential envelope
//! ```
//!
//! The values are the envelopes of [`crate::codec`] (the same checksummed, versioned encoding as
//! the sled log, the checksum over the codec key without the prefix), so one decoder reads both
//! backends.
//!
//! # Fencing and atomicity
//!
//! - `claim(p, e)` reads the epoch key and raises it with a compare-and-swap on its
//!   modification revision; it never lowers it.
//! - `append(p, e, batch)` is one etcd transaction: `If(epoch key == encode(e)) Then(puts and
//!   deletes) Else(get epoch key)`. A claim that resolved before changes the epoch key, so the
//!   compare fails and nothing of the batch lands: fenced in the store, whatever the caller's
//!   clock or pauses.
//! - Group commit across partitions: one writer task per log merges the queued appends of
//!   *many* partitions into one etcd transaction, `If(every involved epoch key == its appends'
//!   epoch) Then(all puts and deletes) Else(get every involved epoch key)`, within etcd's limits
//!   ([`EtcdConfig::max_txn_ops`] counting compares and writes, [`EtcdConfig::max_txn_bytes`]);
//!   several writes to one key are merged first, since etcd refuses a key twice in a
//!   transaction. One transaction is in flight at a time, so the appends of a partition are
//!   applied in call order, each acknowledged once its transaction committed.
//! - Fence detection: when the compares fail, nothing of the transaction landed, and the else
//!   branch returns every involved epoch key as it was when the compares were evaluated. The
//!   partitions whose stored epoch differs from the expected one fail their appends (`Fenced`
//!   or `NotClaimed`, as a lone append would); the appends of the other partitions go into the
//!   next transaction. Only then is an append sent again: its first attempt provably did not
//!   apply (the `Writer` type has the details).
//! - `load(p)` reads the epoch key, then the records in pages, all at the epoch read's
//!   revision (one consistent snapshot).
//! - `allocate_block` raises a counter key with a compare-and-swap, so producer ids are unique
//!   across every coordinator sharing the prefix.
//!
//! # Errors
//!
//! etcd unreachable, no quorum or a timeout: [`LogError::Unavailable`], naming the endpoints.
//! The outcome of such a write is unknown; the coordinator gives the partition up and loads it
//! again (with a new epoch, which fences the unknown write if it lands late). Nothing is
//! acknowledged before etcd acknowledged it, and etcd acknowledges a write once a quorum of
//! members has it in its fsync'd write-ahead log.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::time::Duration;

use async_trait::async_trait;
use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, GetOptions, KvClient, Txn, TxnOp, TxnOpResponse,
};
use tokio::sync::{mpsc, oneshot};

use crate::codec;
use crate::log::next_epoch;
use crate::sync::{Arc, AtomicU64, Mutex, Ordering};
use crate::{
    Appending, CoordinatorEpoch, LoadedPartition, LogEntry, LogError, LogOp, LogPartition,
    ProducerId, ProducerIdBlock, TxnLog, append_failed,
};

/// Settings of an [`EtcdTxnLog`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdConfig {
    /// Client URLs of the etcd members (`http://host:port`).
    pub endpoints: Vec<String>,
    /// Prefix of every key (`etcd.key.prefix`); several clusters may share one etcd.
    pub prefix: String,
    /// Bound on one etcd request (and on connecting).
    pub request_timeout: Duration,
    /// Most operations in one transaction (etcd's `--max-txn-ops`, default 128).
    pub max_txn_ops: usize,
    /// Most value and key bytes in one transaction (below etcd's `--max-request-bytes`,
    /// default 1.5 MiB).
    pub max_txn_bytes: usize,
    /// Records per page when a partition is loaded.
    pub load_page: i64,
}

impl EtcdConfig {
    /// Defaults for `endpoints`: prefix `/txn-coordinator`, 5 s requests, etcd's default
    /// limits.
    pub fn new(endpoints: Vec<String>) -> Self {
        Self {
            endpoints,
            prefix: "/txn-coordinator".into(),
            request_timeout: Duration::from_secs(5),
            max_txn_ops: 128,
            max_txn_bytes: 1024 * 1024,
            load_page: 1000,
        }
    }
}

/// The transaction log in etcd. Cheap to share (`Arc`); every method needs a tokio runtime.
pub struct EtcdTxnLog {
    config: EtcdConfig,
    kv: KvClient,
    /// The queue of the log's [`Writer`] (started on the first append).
    writer: Mutex<Option<mpsc::UnboundedSender<AppendCall>>>,
    counters: Arc<Counters>,
}

/// What the [`Writer`] sent to etcd.
#[derive(Debug, Default)]
struct Counters {
    /// etcd transactions sent (an attempt resent after a connect failure counts once).
    txns: AtomicU64,
    /// Appends carried by those transactions (an append retried after another partition's
    /// fence counts again).
    appends: AtomicU64,
}

/// One queued `append`, encoded by the caller.
struct AppendCall {
    partition: LogPartition,
    epoch: CoordinatorEpoch,
    /// `{prefix}/` ++ the partition's epoch key, and the value it must hold (`epoch` encoded).
    guard: (Vec<u8>, Vec<u8>),
    /// The writes of the batch in order: `{prefix}/` ++ record key, and the value (`None`:
    /// delete).
    ops: Vec<KeyOp>,
    done: oneshot::Sender<Result<(), LogError>>,
}

/// One write of a transaction: a key under the prefix and its new value (`None`: delete).
type KeyOp = (Vec<u8>, Option<Vec<u8>>);

impl std::fmt::Debug for EtcdTxnLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdTxnLog")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl EtcdTxnLog {
    /// Connects to `config.endpoints` (bounded by the request timeout). Fails with
    /// [`LogError::Unavailable`] naming the endpoints when none answers.
    pub async fn connect(config: EtcdConfig) -> Result<Self, LogError> {
        if config.endpoints.is_empty() {
            return Err(LogError::InvalidArgument("etcd.endpoints is empty".into()));
        }
        let options = ConnectOptions::new()
            .with_connect_timeout(config.request_timeout)
            .with_timeout(config.request_timeout);
        let connect = Client::connect(config.endpoints.clone(), Some(options));
        let client = match tokio::time::timeout(config.request_timeout, connect).await {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => return Err(unavailable(&config, &e.to_string())),
            Err(_) => return Err(unavailable(&config, "connect timed out")),
        };
        let log = Self {
            kv: client.kv_client(),
            config,
            writer: Mutex::new(None),
            counters: Arc::default(),
        };
        // One read proves a quorum answers (a connect alone only opens a channel).
        log.get_one(codec::PRODUCER_ID_KEY).await?;
        Ok(log)
    }

    /// Another log on the same connection, under `prefix` (a separate key space: another
    /// cluster of coordinators, or a test's own).
    pub fn with_prefix(&self, prefix: &str) -> Self {
        Self {
            config: EtcdConfig {
                prefix: prefix.to_owned(),
                ..self.config.clone()
            },
            kv: self.kv.clone(),
            writer: Mutex::new(None),
            counters: Arc::default(),
        }
    }

    /// The settings it runs with.
    pub fn config(&self) -> &EtcdConfig {
        &self.config
    }

    /// `{prefix}/` ++ `codec_key`.
    fn key(&self, codec_key: &[u8]) -> Vec<u8> {
        key_under(&self.config.prefix, codec_key)
    }

    /// The value and modification revision of one key, and the store's revision.
    async fn get_one(&self, codec_key: &[u8]) -> Result<(Option<(Vec<u8>, i64)>, i64), LogError> {
        let key = self.key(codec_key);
        let resp = with_resend(&self.config, &self.kv, Resend::IfUnavailable, |mut kv| {
            let key = key.clone();
            async move { kv.get(key, None).await }
        })
        .await?;
        let revision = resp.header().map_or(0, |h| h.revision());
        let found = resp
            .kvs()
            .first()
            .map(|kv| (kv.value().to_vec(), kv.mod_revision()));
        Ok((found, revision))
    }

    /// Runs the compare-and-swap `txn` of a read-then-write loop (sent again while etcd is
    /// unavailable: the loop reads again before it decides); whether it was applied.
    async fn swap(&self, txn: Txn) -> Result<bool, LogError> {
        let resp = with_resend(&self.config, &self.kv, Resend::IfUnavailable, |mut kv| {
            let txn = txn.clone();
            async move { kv.txn(txn).await }
        })
        .await?;
        Ok(resp.succeeded())
    }

    /// Sets `partition`'s epoch to what `choose` makes of the stored one (nothing is written
    /// when that is the stored one), with a compare-and-swap against the value read, so a
    /// concurrent claim makes the swap fail and `choose` decides again on the new value.
    /// Returns the epoch then stored.
    async fn raise_epoch(
        &self,
        partition: LogPartition,
        choose: impl Fn(Option<CoordinatorEpoch>) -> Result<CoordinatorEpoch, LogError>,
    ) -> Result<CoordinatorEpoch, LogError> {
        let codec_key = codec::epoch_key(partition);
        let key = self.key(&codec_key);
        for _ in 0..64 {
            let (found, _) = self.get_one(&codec_key).await?;
            let current = stored_epoch(partition, found.as_ref().map(|(v, _)| v.as_slice()))?;
            let epoch = choose(current)?;
            if current == Some(epoch) {
                return Ok(epoch);
            }
            let guard = unchanged_since_read(&key, found.as_ref());
            let txn = Txn::new().when(vec![guard]).and_then(vec![TxnOp::put(
                key.clone(),
                codec::encode_epoch(&codec_key, epoch)?,
                None,
            )]);
            if self.swap(txn).await? {
                return Ok(epoch);
            }
        }
        Err(LogError::Unavailable {
            reason: format!("claim of log partition {partition}: the epoch kept changing"),
        })
    }

    /// The queue of the log's writer (its task is started on first use).
    fn writer(&self) -> mpsc::UnboundedSender<AppendCall> {
        self.writer
            .lock()
            .get_or_insert_with(|| {
                let (tx, rx) = mpsc::unbounded_channel();
                let writer = Writer {
                    config: self.config.clone(),
                    kv: self.kv.clone(),
                    counters: Arc::clone(&self.counters),
                    fenced: HashMap::new(),
                };
                tokio::spawn(writer.run(rx));
                tx
            })
            .clone()
    }

    /// An append of `batch` to `partition` with `epoch`, encoded for the writer.
    fn encode(
        &self,
        partition: LogPartition,
        epoch: CoordinatorEpoch,
        batch: &[LogEntry],
        done: oneshot::Sender<Result<(), LogError>>,
    ) -> Result<AppendCall, LogError> {
        let epoch_key = codec::epoch_key(partition);
        let guard = (
            self.key(&epoch_key),
            codec::encode_epoch(&epoch_key, epoch)?,
        );
        let ops = batch
            .iter()
            .map(|e| {
                let key = codec::record_key(partition, &e.id);
                let value = match &e.op {
                    LogOp::Upsert(r) => Some(codec::encode_record(&key, r)?),
                    LogOp::Tombstone => None,
                };
                Ok((self.key(&key), value))
            })
            .collect::<Result<_, LogError>>()?;
        Ok(AppendCall {
            partition,
            epoch,
            guard,
            ops,
            done,
        })
    }

    /// etcd transactions sent by the writer, and the appends they carried.
    #[cfg(test)]
    fn counters(&self) -> (u64, u64) {
        (
            self.counters.txns.load(Ordering::Relaxed),
            self.counters.appends.load(Ordering::Relaxed),
        )
    }
}

fn key_under(prefix: &str, codec_key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(prefix.len() + 1 + codec_key.len());
    k.extend_from_slice(prefix.as_bytes());
    k.push(b'/');
    k.extend_from_slice(codec_key);
    k
}

fn unavailable(config: &EtcdConfig, reason: &str) -> LogError {
    LogError::Unavailable {
        reason: format!("etcd at {}: {reason}", config.endpoints.join(",")),
    }
}

/// Which failed requests may be sent again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Resend {
    /// Only a request that never reached a member (a connect failure): a write whose
    /// outcome is unknown is not sent again, since an earlier attempt may still commit after
    /// a later write.
    IfNotSent,
    /// Any unavailability, and an attempt without an answer within a third of the timeout
    /// (reads, and compare-and-swap loops that read again first: a late duplicate of their
    /// write fails its compare).
    IfUnavailable,
}

/// Whether the request never reached a member.
fn not_sent(e: &etcd_client::Error) -> bool {
    match e {
        etcd_client::Error::TransportError(_) => true,
        etcd_client::Error::GRpcStatus(s) => {
            s.code() == tonic::Code::Unavailable && s.message().contains("connect")
        }
        _ => false,
    }
}

fn unavailable_status(e: &etcd_client::Error) -> bool {
    matches!(e, etcd_client::Error::GRpcStatus(s)
        if matches!(s.code(), tonic::Code::Unavailable | tonic::Code::DeadlineExceeded))
}

/// Runs `call` until it succeeds, fails in a way `resend` does not cover, or the request
/// timeout has passed (then [`LogError::Unavailable`]). The client spreads requests over the
/// endpoints, so a request that met a dead member goes to another one the next time.
async fn with_resend<T, F, Fut>(
    config: &EtcdConfig,
    kv: &KvClient,
    resend: Resend,
    mut call: F,
) -> Result<T, LogError>
where
    F: FnMut(KvClient) -> Fut,
    Fut: Future<Output = Result<T, etcd_client::Error>>,
{
    let deadline = tokio::time::Instant::now() + config.request_timeout;
    // A read or a compare-and-swap gets a third of the timeout per attempt, so one attempt
    // stuck on a member that is not serving yet leaves time to ask another one.
    let attempt = match resend {
        Resend::IfNotSent => config.request_timeout,
        Resend::IfUnavailable => config.request_timeout / 3,
    };
    let mut backoff = Duration::from_millis(20);
    loop {
        let (again, reason) = match tokio::time::timeout(attempt, call(kv.clone())).await {
            Ok(Ok(v)) => return Ok(v),
            Ok(Err(e)) => {
                let again = match resend {
                    Resend::IfNotSent => not_sent(&e),
                    Resend::IfUnavailable => not_sent(&e) || unavailable_status(&e),
                };
                (again, e.to_string())
            }
            Err(_) => (
                resend == Resend::IfUnavailable,
                format!("no answer within {attempt:?}"),
            ),
        };
        if !again || tokio::time::Instant::now() + backoff >= deadline {
            return Err(unavailable(config, &reason));
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_millis(400));
    }
}

#[async_trait]
impl crate::SecurityStore for EtcdTxnLog {
    /// One range read of `{prefix}/security/` (a consistent snapshot).
    async fn load_security(&self) -> Result<crate::SecuritySnapshot, LogError> {
        let from = self.key(crate::security::SECURITY_KEY_PREFIX);
        let options = GetOptions::new().with_range(prefix_end(&from));
        let resp = with_resend(&self.config, &self.kv, Resend::IfUnavailable, |mut kv| {
            let (from, options) = (from.clone(), options.clone());
            async move { kv.get(from, Some(options)).await }
        })
        .await?;
        let strip = self.config.prefix.len() + 1;
        crate::security::decode_snapshot(
            resp.kvs()
                .iter()
                .map(|kv| Ok((kv.key()[strip..].to_vec(), kv.value().to_vec()))),
        )
    }

    /// One etcd transaction per [`EtcdConfig::max_txn_ops`] changes (a key written twice in
    /// one list is written once, with its last value: etcd refuses a key twice in a
    /// transaction). A write whose outcome is unknown is not sent again.
    async fn apply_security(&self, changes: &[crate::SecurityChange]) -> Result<(), LogError> {
        let mut writes: Vec<(Vec<u8>, Option<Vec<u8>>)> = Vec::new();
        for change in changes {
            let (k, v) = crate::security::encode_change(change)?;
            let k = self.key(&k);
            writes.retain(|(k2, _)| *k2 != k);
            writes.push((k, v));
        }
        for chunk in writes.chunks(self.config.max_txn_ops.max(1)) {
            let ops: Vec<TxnOp> = chunk
                .iter()
                .map(|(k, v)| match v {
                    Some(v) => TxnOp::put(k.clone(), v.clone(), None),
                    None => TxnOp::delete(k.clone(), None),
                })
                .collect();
            let txn = Txn::new().and_then(ops);
            with_resend(&self.config, &self.kv, Resend::IfNotSent, |mut kv| {
                let txn = txn.clone();
                async move { kv.txn(txn).await }
            })
            .await?;
        }
        Ok(())
    }
}

/// The first key after every key starting with `prefix` (etcd's range end for a prefix).
fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// The compare of a compare-and-swap: `key` is as it was read (`found`: its value and
/// modification revision; `None`: it did not exist).
fn unchanged_since_read(key: &[u8], found: Option<&(Vec<u8>, i64)>) -> Compare {
    match found {
        Some((_, rev)) => Compare::mod_revision(key.to_vec(), CompareOp::Equal, *rev),
        None => Compare::create_revision(key.to_vec(), CompareOp::Equal, 0),
    }
}

/// Decodes the epoch stored under `partition`'s epoch key, if any.
fn stored_epoch(
    partition: LogPartition,
    value: Option<&[u8]>,
) -> Result<Option<CoordinatorEpoch>, LogError> {
    value
        .map(|v| codec::decode_epoch(partition, &codec::epoch_key(partition), v))
        .transpose()
}

#[async_trait]
impl TxnLog for EtcdTxnLog {
    async fn claim(
        &self,
        partition: LogPartition,
        epoch: CoordinatorEpoch,
    ) -> Result<(), LogError> {
        self.raise_epoch(partition, |current| match current {
            Some(current) if current > epoch => Err(LogError::Fenced { partition, current }),
            _ => Ok(epoch),
        })
        .await
        .map(|_| ())
    }

    async fn claim_next(&self, partition: LogPartition) -> Result<CoordinatorEpoch, LogError> {
        self.raise_epoch(partition, |current| next_epoch(partition, current))
            .await
    }

    fn append(
        &self,
        partition: LogPartition,
        epoch: CoordinatorEpoch,
        batch: Vec<LogEntry>,
    ) -> Appending {
        let (done, rx) = oneshot::channel();
        let call = match self.encode(partition, epoch, &batch, done) {
            Ok(call) => call,
            Err(e) => return append_failed(e),
        };
        if !Round::default().fits(&self.config, &call) {
            return append_failed(LogError::InvalidArgument(format!(
                "an append of {} entries exceeds one etcd transaction ({} operations, {} bytes)",
                batch.len(),
                self.config.max_txn_ops,
                self.config.max_txn_bytes
            )));
        }
        if self.writer().send(call).is_err() {
            return append_failed(LogError::Closed);
        }
        Box::pin(async move { rx.await.unwrap_or(Err(LogError::Closed)) })
    }

    async fn load(&self, partition: LogPartition) -> Result<LoadedPartition, LogError> {
        let (found, revision) = self.get_one(&codec::epoch_key(partition)).await?;
        let prefix = self.key(&codec::record_prefix(partition));
        let end = prefix_end(&prefix);
        let strip = self.config.prefix.len() + 1;
        let mut records: Vec<Result<(Vec<u8>, Vec<u8>), LogError>> = Vec::new();
        let mut from = prefix;
        loop {
            let options = GetOptions::new()
                .with_range(end.clone())
                .with_revision(revision)
                .with_limit(self.config.load_page);
            let resp = with_resend(&self.config, &self.kv, Resend::IfUnavailable, |mut kv| {
                let (from, options) = (from.clone(), options.clone());
                async move { kv.get(from, Some(options)).await }
            })
            .await?;
            for kv in resp.kvs() {
                records.push(Ok((kv.key()[strip..].to_vec(), kv.value().to_vec())));
            }
            let Some(last) = resp.kvs().last() else {
                break;
            };
            if !resp.more() {
                break;
            }
            from = last.key().to_vec();
            from.push(0);
        }
        codec::decode_partition(
            partition,
            found.as_ref().map(|(v, _)| v.as_slice()),
            records,
        )
    }

    async fn allocate_block(
        &self,
        len: u32,
        floor: ProducerId,
    ) -> Result<ProducerIdBlock, LogError> {
        if len == 0 {
            return Err(LogError::InvalidArgument(
                "a producer id block needs at least one id".into(),
            ));
        }
        let key = self.key(codec::PRODUCER_ID_KEY);
        for _ in 0..64 {
            let (found, _) = self.get_one(codec::PRODUCER_ID_KEY).await?;
            let next = match &found {
                Some((v, _)) => codec::decode_next_producer_id(v)?,
                None => 0,
            }
            .max(floor.0);
            let after = next
                .checked_add(i64::from(len))
                .ok_or_else(|| LogError::InvalidArgument("producer ids are exhausted".into()))?;
            let guard = unchanged_since_read(&key, found.as_ref());
            let txn = Txn::new().when(vec![guard]).and_then(vec![TxnOp::put(
                key.clone(),
                codec::encode_next_producer_id(after)?,
                None,
            )]);
            if self.swap(txn).await? {
                return Ok(ProducerIdBlock {
                    first: ProducerId(next),
                    len,
                });
            }
        }
        Err(LogError::Unavailable {
            reason: "producer id allocation: the counter kept changing".into(),
        })
    }
}

/// The writer task of one [`EtcdTxnLog`]: group commit of the appends of every partition.
///
/// Each round puts into one etcd transaction, in call order, every queued append that
/// - has the epoch of the round's other appends of its partition (one compare per partition),
/// - fits ([`Round::fits`]),
/// - and whose partition has no earlier queued append left out of the round.
///
/// So a round holds a prefix of each partition's queue, and what it leaves waits, in order,
/// for the next round. One transaction is in flight at a time, so a partition's appends apply
/// in call order. The outcome of a round's transaction:
/// - committed: every append in it is acknowledged;
/// - no answer in time, or an error: every append in it fails ([`LogError::Unavailable`]). Its
///   outcome is unknown, so it is never sent again ([`Resend::IfNotSent`]: only a request
///   that never reached a member is resent);
/// - compares failed: nothing landed. The else branch read every involved epoch key as the
///   compares saw it: the appends of each partition whose key differs from the expected value
///   fail (`Fenced` when a higher epoch is stored, else `NotClaimed`, as a lone append would);
///   the others go back to the head of the queue for the next round. Sending those again is
///   safe because the failed compares prove that their first attempt did not apply.
///
/// A claim never lowers an epoch, so once a partition is found fenced, later appends with an
/// epoch below the stored one fail at once instead of failing another round's compares.
struct Writer {
    config: EtcdConfig,
    kv: KvClient,
    counters: Arc<Counters>,
    /// The highest epoch found stored, for each partition found fenced.
    fenced: HashMap<LogPartition, CoordinatorEpoch>,
}

impl Writer {
    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<AppendCall>) {
        // The queued appends in call order (a partition's appends retried from the last round
        // come before its later ones, which were left out of that round).
        let mut queue: Vec<AppendCall> = Vec::new();
        loop {
            if queue.is_empty() {
                match rx.recv().await {
                    Some(call) => queue.push(call),
                    None => return,
                }
            }
            while let Ok(call) = rx.try_recv() {
                queue.push(call);
            }
            let (round, rest) = self.gather(queue);
            queue = self.commit(round).await;
            queue.extend(rest);
        }
    }

    /// Splits `queue` into the next round and the appends left for later (in their order);
    /// answers at once the appends of an epoch already known to be fenced.
    fn gather(&self, queue: Vec<AppendCall>) -> (Round, Vec<AppendCall>) {
        let mut round = Round::default();
        let mut rest = Vec::new();
        let mut waiting = HashSet::new();
        for call in queue {
            if let Some(&current) = self.fenced.get(&call.partition)
                && call.epoch < current
            {
                let partition = call.partition;
                let _ = call.done.send(Err(LogError::Fenced { partition, current }));
                continue;
            }
            if waiting.contains(&call.partition) {
                rest.push(call);
                continue;
            }
            if let Err(call) = round.add(&self.config, call) {
                waiting.insert(call.partition);
                rest.push(call);
            }
        }
        (round, rest)
    }

    /// Sends `round` as one etcd transaction and answers its appends; returns the appends to
    /// send again (those of partitions whose compare held when another partition's failed).
    async fn commit(&mut self, round: Round) -> Vec<AppendCall> {
        if round.calls.is_empty() {
            return Vec::new();
        }
        let txn = round.txn();
        self.counters.txns.fetch_add(1, Ordering::Relaxed);
        let carried = u64::try_from(round.calls.len()).unwrap_or(u64::MAX);
        self.counters.appends.fetch_add(carried, Ordering::Relaxed);
        let sent = with_resend(&self.config, &self.kv, Resend::IfNotSent, |mut kv| {
            let txn = txn.clone();
            async move { kv.txn(txn).await }
        })
        .await;
        let resp = match sent {
            Ok(resp) if resp.succeeded() => {
                answer_all(round.calls, &Ok(()));
                return Vec::new();
            }
            Ok(resp) => resp,
            Err(e) => {
                answer_all(round.calls, &Err(e));
                return Vec::new();
            }
        };
        // The compares failed: the else branch's reads (one per guard, in order) tell which.
        let stored: Vec<Option<Vec<u8>>> = resp
            .op_responses()
            .into_iter()
            .filter_map(|r| match r {
                TxnOpResponse::Get(g) => Some(g.kvs().first().map(|kv| kv.value().to_vec())),
                _ => None,
            })
            .collect();
        let mut failed: HashMap<LogPartition, LogError> = HashMap::new();
        if stored.len() == round.guards.len() {
            for (guard, value) in round.guards.iter().zip(&stored) {
                if value.as_ref() == Some(&guard.expected) {
                    continue;
                }
                let err = match stored_epoch(guard.partition, value.as_deref()) {
                    Ok(Some(current)) if current > guard.epoch => {
                        let known = self.fenced.entry(guard.partition).or_insert(current);
                        *known = (*known).max(current);
                        LogError::Fenced {
                            partition: guard.partition,
                            current,
                        }
                    }
                    Ok(_) => LogError::NotClaimed {
                        partition: guard.partition,
                        epoch: guard.epoch,
                    },
                    Err(e) => e,
                };
                failed.insert(guard.partition, err);
            }
        }
        if failed.is_empty() {
            // Only an inconsistent answer gets here; failing beats resending forever.
            let reason = "the compares failed, yet the epoch keys read back as expected";
            answer_all(round.calls, &Err(unavailable(&self.config, reason)));
            return Vec::new();
        }
        let mut retry = Vec::new();
        for call in round.calls {
            match failed.get(&call.partition) {
                Some(err) => {
                    let _ = call.done.send(Err(err.clone()));
                }
                None => retry.push(call),
            }
        }
        retry
    }
}

fn answer_all(calls: Vec<AppendCall>, result: &Result<(), LogError>) {
    for call in calls {
        let _ = call.done.send(result.clone());
    }
}

/// The compare of one partition in a round.
struct Guard {
    partition: LogPartition,
    epoch: CoordinatorEpoch,
    /// `{prefix}/` ++ the partition's epoch key.
    key: Vec<u8>,
    /// `epoch` encoded, the value the key must hold.
    expected: Vec<u8>,
}

/// The appends of one etcd transaction.
#[derive(Default)]
struct Round {
    /// One per involved partition, in the order of their first append.
    guards: Vec<Guard>,
    /// The writes of `calls`, counted before duplicate keys are merged.
    writes: usize,
    /// Key and value bytes of the compares, the else branch's reads and the writes.
    bytes: usize,
    calls: Vec<AppendCall>,
}

impl Round {
    /// Whether `call` fits in the round: compares plus writes below
    /// [`EtcdConfig::max_txn_ops`] (one below etcd's limit as a margin), bytes within
    /// [`EtcdConfig::max_txn_bytes`] (below etcd's request limit). Every append is checked
    /// against an empty round before it is queued, so the first append of a round fits.
    fn fits(&self, config: &EtcdConfig, call: &AppendCall) -> bool {
        let new_guard = self.guards.iter().all(|g| g.partition != call.partition);
        let (guards, guard_bytes) = if new_guard {
            (1, 2 * call.guard.0.len() + call.guard.1.len())
        } else {
            (0, 0)
        };
        self.guards.len() + guards + self.writes + call.ops.len() < config.max_txn_ops
            && self.bytes + guard_bytes + write_bytes(call) <= config.max_txn_bytes
    }

    /// Adds `call` if its partition's epoch matches and it fits; else hands it back.
    fn add(&mut self, config: &EtcdConfig, call: AppendCall) -> Result<(), AppendCall> {
        let guard = self.guards.iter().find(|g| g.partition == call.partition);
        if guard.is_some_and(|g| g.epoch != call.epoch) || !self.fits(config, &call) {
            return Err(call);
        }
        if guard.is_none() {
            self.bytes += 2 * call.guard.0.len() + call.guard.1.len();
            self.guards.push(Guard {
                partition: call.partition,
                epoch: call.epoch,
                key: call.guard.0.clone(),
                expected: call.guard.1.clone(),
            });
        }
        self.writes += call.ops.len();
        self.bytes += write_bytes(&call);
        self.calls.push(call);
        Ok(())
    }

    /// `If(each epoch key == expected) Then(the writes) Else(get each epoch key)`. A later
    /// write to a key replaces an earlier one (etcd refuses a key twice in one transaction);
    /// keys keep the order of their first write.
    fn txn(&self) -> Txn {
        let mut index: HashMap<&[u8], usize> = HashMap::new();
        let mut writes: Vec<(&[u8], Option<&[u8]>)> = Vec::new();
        for (key, value) in self.calls.iter().flat_map(|c| &c.ops) {
            match index.get(key.as_slice()) {
                Some(&i) => writes[i].1 = value.as_deref(),
                None => {
                    index.insert(key, writes.len());
                    writes.push((key, value.as_deref()));
                }
            }
        }
        let compares: Vec<Compare> = self
            .guards
            .iter()
            .map(|g| Compare::value(g.key.clone(), CompareOp::Equal, g.expected.clone()))
            .collect();
        let ops: Vec<TxnOp> = writes
            .into_iter()
            .map(|(key, value)| match value {
                Some(v) => TxnOp::put(key, v, None),
                None => TxnOp::delete(key, None),
            })
            .collect();
        let reads: Vec<TxnOp> = self
            .guards
            .iter()
            .map(|g| TxnOp::get(g.key.clone(), None))
            .collect();
        Txn::new().when(compares).and_then(ops).or_else(reads)
    }
}

/// Key and value bytes of the writes of `call`.
fn write_bytes(call: &AppendCall) -> usize {
    call.ops
        .iter()
        .map(|(k, v)| k.len() + v.as_ref().map_or(0, Vec::len))
        .sum()
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::process::{Child, Command, Stdio};

    use super::*;
    use crate::TxnState;
    use crate::suite::{record, tid};

    const E1: CoordinatorEpoch = CoordinatorEpoch(1);
    const E2: CoordinatorEpoch = CoordinatorEpoch(2);

    /// One etcd member (`TXN_ETCD_BIN`, else `etcd` on the PATH) on free loopback ports, with
    /// a temporary data directory; killed on drop.
    struct Etcd {
        child: Child,
        endpoint: String,
        _dir: tempfile::TempDir,
    }

    impl Etcd {
        async fn start() -> Self {
            let bin = std::env::var_os("TXN_ETCD_BIN").map_or_else(|| "etcd".into(), PathBuf::from);
            let port = || {
                let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
                l.local_addr().expect("addr").port()
            };
            let client = format!("http://127.0.0.1:{}", port());
            let peer = format!("http://127.0.0.1:{}", port());
            let dir = tempfile::tempdir().expect("tempdir");
            let child = Command::new(&bin)
                .args(["--name", "m0", "--data-dir"])
                .arg(dir.path().join("m0"))
                .args([
                    "--listen-client-urls",
                    &client,
                    "--advertise-client-urls",
                    &client,
                ])
                .args([
                    "--listen-peer-urls",
                    &peer,
                    "--initial-advertise-peer-urls",
                    &peer,
                ])
                .args(["--initial-cluster", &format!("m0={peer}")])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap_or_else(|e| {
                    panic!(
                        "starting {} ({e}): install Debian's etcd-server or set TXN_ETCD_BIN",
                        bin.display()
                    )
                });
            let etcd = Self {
                child,
                endpoint: client,
                _dir: dir,
            };
            let deadline = std::time::Instant::now() + Duration::from_secs(30);
            while EtcdTxnLog::connect(etcd.config("/ready")).await.is_err() {
                assert!(
                    std::time::Instant::now() < deadline,
                    "etcd not ready in 30 s"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            etcd
        }

        fn config(&self, prefix: &str) -> EtcdConfig {
            EtcdConfig {
                prefix: prefix.to_owned(),
                request_timeout: Duration::from_secs(2),
                ..EtcdConfig::new(vec![self.endpoint.clone()])
            }
        }
    }

    impl Drop for Etcd {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    fn upsert(id: &str, pid: i64) -> Vec<LogEntry> {
        vec![LogEntry::upsert(tid(id), record(pid, TxnState::Ongoing, 1))]
    }

    // The tests on etcd run on tokio's current-thread runtime: appends started together with
    // `join!` are all queued before the writer task runs, so they share its first round.

    /// Two partitions' appends share one transaction, one partition was claimed by a higher
    /// epoch meanwhile: its append fails `Fenced`, the other lands (in a second transaction).
    #[tokio::test]
    async fn a_fenced_partition_fails_alone_in_a_shared_transaction() {
        let etcd = Etcd::start().await;
        let log = EtcdTxnLog::connect(etcd.config("/shared"))
            .await
            .expect("log");
        let rival = EtcdTxnLog::connect(etcd.config("/shared"))
            .await
            .expect("rival");
        let (p1, p2) = (LogPartition(1), LogPartition(2));
        log.claim(p1, E1).await.expect("claim p1");
        log.claim(p2, E1).await.expect("claim p2");
        rival.claim(p2, E2).await.expect("rival claims p2");

        let (a, b) = tokio::join!(
            log.append(p1, E1, upsert("a", 1)),
            log.append(p2, E1, upsert("b", 2)),
        );
        a.expect("the append of the partition still owned lands");
        assert!(
            matches!(b, Err(LogError::Fenced { partition, current }) if partition == p2 && current == E2),
            "{b:?}"
        );
        assert_eq!(
            log.counters(),
            (2, 3),
            "one shared transaction whose compares failed, then p1's append alone"
        );
        let loaded = rival.load(p1).await.expect("load p1");
        assert_eq!(
            loaded.records,
            vec![(tid("a"), record(1, TxnState::Ongoing, 1))]
        );
        assert!(rival.load(p2).await.expect("load p2").records.is_empty());

        // p2 is known fenced: a later append of epoch 1 fails without an etcd transaction,
        // and p1 goes on.
        let again = log.append(p2, E1, upsert("b", 3)).await;
        assert!(matches!(again, Err(LogError::Fenced { .. })), "{again:?}");
        assert_eq!(log.counters(), (2, 3));
        log.append(p1, E1, upsert("c", 4)).await.expect("p1 again");
        assert_eq!(log.counters(), (3, 4));
    }

    /// Appends of several partitions go in one transaction, a key written twice keeps the last
    /// write, and a partition's append with another epoch waits for the next transaction.
    #[tokio::test]
    async fn appends_of_many_partitions_share_a_transaction_in_call_order() {
        let etcd = Etcd::start().await;
        let log = EtcdTxnLog::connect(etcd.config("/many"))
            .await
            .expect("log");
        let (p1, p2, p3) = (LogPartition(1), LogPartition(2), LogPartition(3));
        for p in [p1, p2, p3] {
            log.claim(p, E1).await.expect("claim");
        }
        let (a, b, c, d) = tokio::join!(
            log.append(p1, E1, upsert("x", 1)),
            log.append(p2, E1, upsert("y", 2)),
            log.append(p1, E1, upsert("x", 3)),
            log.append(p3, E1, Vec::new()),
        );
        for r in [a, b, c, d] {
            r.expect("append");
        }
        assert_eq!(log.counters(), (1, 4), "one transaction");
        let loaded = log.load(p1).await.expect("load");
        assert_eq!(
            loaded.records,
            vec![(tid("x"), record(3, TxnState::Ongoing, 1))]
        );

        // p3 claimed again with epoch 2 in between: the epoch-2 append waits for the next
        // transaction and the epoch-1 ones after it fail.
        log.claim(p3, E2).await.expect("claim 2");
        let (a, b, c) = tokio::join!(
            log.append(p2, E1, upsert("y", 4)),
            log.append(p3, E2, upsert("z", 5)),
            log.append(p3, E1, upsert("z", 6)),
        );
        a.expect("p2");
        b.expect("p3 at epoch 2");
        assert!(matches!(c, Err(LogError::Fenced { .. })), "{c:?}");
        let loaded = log.load(p3).await.expect("load");
        assert_eq!(
            loaded.records,
            vec![(tid("z"), record(5, TxnState::Ongoing, 1))]
        );
    }

    /// The limits count the compares: with room for 5 operations (4 below etcd's), two
    /// partitions with one write each fit, a third write of a third partition does not.
    #[test]
    fn a_round_counts_compares_and_writes_against_the_limits() {
        let config = EtcdConfig {
            max_txn_ops: 5,
            ..EtcdConfig::new(vec!["http://127.0.0.1:1".into()])
        };
        let call = |p: u32, epoch: i32| AppendCall {
            partition: LogPartition(p),
            epoch: CoordinatorEpoch(epoch),
            guard: (format!("/e{p}").into_bytes(), vec![1]),
            ops: vec![(format!("/r{p}").into_bytes(), Some(vec![0; 10]))],
            done: oneshot::channel().0,
        };
        let mut round = Round::default();
        assert!(round.add(&config, call(1, 1)).is_ok());
        assert!(
            round.add(&config, call(1, 2)).is_err(),
            "another epoch of p1"
        );
        assert!(round.add(&config, call(2, 1)).is_ok());
        assert!(round.add(&config, call(3, 1)).is_err(), "6 operations");
        assert_eq!((round.guards.len(), round.writes), (2, 2));
        let small = EtcdConfig {
            max_txn_bytes: 2 * 3 + 1 + 3 + 10 - 1,
            ..config
        };
        assert!(!Round::default().fits(&small, &call(1, 1)), "bytes");
    }

    #[test]
    fn prefix_end_is_the_first_key_after_the_prefix() {
        assert_eq!(prefix_end(b"/a/r\x00"), b"/a/r\x01");
        assert_eq!(prefix_end(b"ab\xff"), b"ac");
        assert_eq!(prefix_end(b"\xff\xff"), vec![0]);
    }

    #[test]
    fn keys_are_the_codec_keys_under_the_prefix() {
        let p = LogPartition(3);
        let k = key_under("/t", &codec::epoch_key(p));
        assert_eq!(k, b"/t/e\x00\x00\x00\x03");
    }
}
