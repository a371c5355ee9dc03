//! [`EtcdTxnLog`]: the transaction log in etcd (v3 API), replicated by etcd's Raft, so that
//! several coordinators can share the log partitions and take them over from each other.
//!
//! # Keys (under a prefix, default `/txn-coordinator`)
//!
//! ```text
//! {prefix}/ ++ codec::epoch_key(p)         -> coordinator epoch envelope of partition p
//! {prefix}/ ++ codec::record_key(p, id)    -> transaction record envelope
//! {prefix}/ ++ codec::PRODUCER_ID_KEY      -> producer-id counter envelope
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
//! - Group commit: each partition has a writer task; appends are queued in call order and the
//!   task merges consecutive appends of one epoch into one transaction (several writes to one
//!   id merged first, since etcd refuses a key twice in a transaction), within etcd's limits
//!   ([`EtcdConfig::max_txn_ops`], [`EtcdConfig::max_txn_bytes`]).
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

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::time::Duration;

use async_trait::async_trait;
use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, GetOptions, KvClient, Txn, TxnOp, TxnOpResponse,
};
use tokio::sync::{mpsc, oneshot};

use crate::codec;
use crate::sync::Mutex;
use crate::{
    CoordinatorEpoch, LoadedPartition, LogEntry, LogError, LogOp, LogPartition, ProducerId,
    ProducerIdBlock, TxnLog,
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
    writers: Mutex<HashMap<LogPartition, mpsc::UnboundedSender<AppendCall>>>,
}

/// One queued `append`.
struct AppendCall {
    epoch: CoordinatorEpoch,
    batch: Vec<LogEntry>,
    done: oneshot::Sender<Result<(), LogError>>,
}

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
            writers: Mutex::new(HashMap::new()),
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
            writers: Mutex::new(HashMap::new()),
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

    /// The writer queue of `partition` (its task is started on first use).
    fn writer(&self, partition: LogPartition) -> mpsc::UnboundedSender<AppendCall> {
        let mut writers = self.writers.lock();
        writers
            .entry(partition)
            .or_insert_with(|| {
                let (tx, rx) = mpsc::unbounded_channel();
                let writer = PartitionWriter {
                    partition,
                    prefix: self.config.prefix.clone(),
                    config: self.config.clone(),
                    kv: self.kv.clone(),
                };
                tokio::spawn(writer.run(rx));
                tx
            })
            .clone()
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
        let codec_key = codec::epoch_key(partition);
        let key = self.key(&codec_key);
        let new_value = codec::encode_epoch(&codec_key, epoch)?;
        // A concurrent claim makes the compare fail; read again and decide again.
        for _ in 0..64 {
            let (found, _) = self.get_one(&codec_key).await?;
            let current = stored_epoch(partition, found.as_ref().map(|(v, _)| v.as_slice()))?;
            if let Some(current) = current {
                if current > epoch {
                    return Err(LogError::Fenced { partition, current });
                }
                if current == epoch {
                    return Ok(());
                }
            }
            let guard = unchanged_since_read(&key, found.as_ref());
            let txn = Txn::new().when(vec![guard]).and_then(vec![TxnOp::put(
                key.clone(),
                new_value.clone(),
                None,
            )]);
            if self.swap(txn).await? {
                return Ok(());
            }
        }
        Err(LogError::Unavailable {
            reason: format!("claim of log partition {partition}: the epoch kept changing"),
        })
    }

    async fn append(
        &self,
        partition: LogPartition,
        epoch: CoordinatorEpoch,
        batch: Vec<LogEntry>,
    ) -> Result<(), LogError> {
        let (done, rx) = oneshot::channel();
        self.writer(partition)
            .send(AppendCall { epoch, batch, done })
            .map_err(|_| LogError::Closed)?;
        rx.await.unwrap_or(Err(LogError::Closed))
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

    async fn allocate_block(&self, len: u32) -> Result<ProducerIdBlock, LogError> {
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
            };
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

/// The writer task of one partition: group commit of its appends, in call order.
struct PartitionWriter {
    partition: LogPartition,
    prefix: String,
    config: EtcdConfig,
    kv: KvClient,
}

/// One write of a transaction: a codec key and its new value (`None`: delete).
type KeyOp = (Vec<u8>, Option<Vec<u8>>);

/// Appends merged into one etcd transaction.
struct Group {
    epoch: CoordinatorEpoch,
    /// The last operation per codec key, in first-write order of the keys.
    ops: BTreeMap<Vec<u8>, (usize, Option<Vec<u8>>)>,
    bytes: usize,
    callers: Vec<oneshot::Sender<Result<(), LogError>>>,
}

impl PartitionWriter {
    async fn run(self, mut rx: mpsc::UnboundedReceiver<AppendCall>) {
        let mut carried: Option<AppendCall> = None;
        loop {
            let first = match carried.take() {
                Some(c) => c,
                None => match rx.recv().await {
                    Some(c) => c,
                    None => return,
                },
            };
            let Ok(mut group) = self.start_group(first) else {
                continue;
            };
            while let Ok(next) = rx.try_recv() {
                if let Err(next) = self.try_merge(&mut group, next) {
                    carried = Some(next);
                    break;
                }
            }
            let result = self.commit(&group).await;
            for done in group.callers {
                let _ = done.send(result.clone());
            }
        }
    }

    /// The entries of `call` as (codec key, value or delete), or the error to answer it with.
    fn encode(&self, call: &AppendCall) -> Result<Vec<KeyOp>, LogError> {
        call.batch
            .iter()
            .map(|e| {
                let key = codec::record_key(self.partition, &e.id);
                let value = match &e.op {
                    LogOp::Upsert(r) => Some(codec::encode_record(&key, r)?),
                    LogOp::Tombstone => None,
                };
                Ok((key, value))
            })
            .collect()
    }

    /// A group of `call` alone; a call that cannot be encoded or exceeds the limits on its own
    /// is answered at once (`Err(())`).
    fn start_group(&self, call: AppendCall) -> Result<Group, ()> {
        let mut group = Group {
            epoch: call.epoch,
            ops: BTreeMap::new(),
            bytes: 0,
            callers: Vec::new(),
        };
        match self.encode(&call) {
            Ok(ops) if self.fits(&group, &ops) => {
                add(&mut group, ops);
                group.callers.push(call.done);
                Ok(group)
            }
            Ok(ops) => {
                let _ = call.done.send(Err(LogError::InvalidArgument(format!(
                    "an append of {} entries exceeds one etcd transaction ({} operations, {} \
                     bytes)",
                    ops.len(),
                    self.config.max_txn_ops,
                    self.config.max_txn_bytes
                ))));
                Err(())
            }
            Err(e) => {
                let _ = call.done.send(Err(e));
                Err(())
            }
        }
    }

    /// Adds `call` to `group` if it has the group's epoch and fits; else hands it back.
    fn try_merge(&self, group: &mut Group, call: AppendCall) -> Result<(), AppendCall> {
        if call.epoch != group.epoch {
            return Err(call);
        }
        let Ok(ops) = self.encode(&call) else {
            return Err(call);
        };
        if !self.fits(group, &ops) {
            return Err(call);
        }
        add(group, ops);
        group.callers.push(call.done);
        Ok(())
    }

    /// Whether `group` plus `ops` stays within one transaction (one operation is the compare).
    fn fits(&self, group: &Group, ops: &[KeyOp]) -> bool {
        let new_keys = ops
            .iter()
            .filter(|(k, _)| !group.ops.contains_key(k))
            .count();
        let bytes: usize = ops
            .iter()
            .map(|(k, v)| self.prefix.len() + 1 + k.len() + v.as_ref().map_or(0, Vec::len))
            .sum();
        group.ops.len() + new_keys < self.config.max_txn_ops
            && group.bytes + bytes <= self.config.max_txn_bytes
    }

    async fn commit(&self, group: &Group) -> Result<(), LogError> {
        let epoch_codec_key = codec::epoch_key(self.partition);
        let epoch_key = key_under(&self.prefix, &epoch_codec_key);
        let expected = codec::encode_epoch(&epoch_codec_key, group.epoch)?;
        let mut ordered: Vec<_> = group.ops.iter().collect();
        ordered.sort_by_key(|(_, (order, _))| *order);
        let ops: Vec<TxnOp> = ordered
            .into_iter()
            .map(|(k, (_, v))| {
                let key = key_under(&self.prefix, k);
                match v {
                    Some(v) => TxnOp::put(key, v.clone(), None),
                    None => TxnOp::delete(key, None),
                }
            })
            .collect();
        let txn = Txn::new()
            .when(vec![Compare::value(
                epoch_key.clone(),
                CompareOp::Equal,
                expected,
            )])
            .and_then(ops)
            .or_else(vec![TxnOp::get(epoch_key, None)]);
        let resp = with_resend(&self.config, &self.kv, Resend::IfNotSent, |mut kv| {
            let txn = txn.clone();
            async move { kv.txn(txn).await }
        })
        .await?;
        if resp.succeeded() {
            return Ok(());
        }
        let stored = resp.op_responses().into_iter().find_map(|r| match r {
            TxnOpResponse::Get(g) => Some(g.kvs().first().map(|kv| kv.value().to_vec())),
            _ => None,
        });
        let current = stored_epoch(self.partition, stored.flatten().as_deref())?;
        Err(match current {
            Some(current) if current > group.epoch => LogError::Fenced {
                partition: self.partition,
                current,
            },
            _ => LogError::NotClaimed {
                partition: self.partition,
                epoch: group.epoch,
            },
        })
    }
}

/// Adds `ops` to `group`; a later write to a key replaces an earlier one (etcd refuses a key
/// twice in one transaction).
fn add(group: &mut Group, ops: Vec<KeyOp>) {
    for (k, v) in ops {
        let size = k.len() + v.as_ref().map_or(0, Vec::len);
        let next = group.ops.len();
        match group.ops.get_mut(&k) {
            Some(slot) => slot.1 = v,
            None => {
                group.ops.insert(k, (next, v));
            }
        }
        group.bytes += size;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
