//! One led partition: its log and the participant state derived from it.
//!
//! Every append follows the participant's call sequence (see [`markers::participant`]): parse
//! the batch header, `check_batch` / `check_marker`, append to the log at its end offset,
//! `complete_append` / `complete_marker`, then `advance_high_watermark` (one replica: the
//! durable log end). The caller holds the partition's lock for that. The append is only
//! written to the OS, through the broker's journal; [`PendingSyncs::wait`] then waits (without
//! the lock) for the group commit that puts it on disk and advances the high watermark over
//! it, so nothing a reader can see (the high watermark, the last stable offset) covers data
//! that is not durable.
//! `__consumer_offsets` partitions are the exception: their offset store is read without the
//! high watermark, so their writers keep the lock until the append is durable. On open the
//! state is rebuilt by replaying the batches the journal held for the partition.

use std::collections::BTreeMap;
use std::sync::Arc;

use anyhow::Context;
use bytes::Bytes;
use kafka_protocol::ResponseError;
use markers::participant::{
    ActiveProducer, BatchHeader, LogBatch, Marker, ParticipantConfig, PartitionState,
    ProduceDecision, TxnVersion, VerificationGuard, increment_sequence,
};
use tokio::sync::Mutex;
use txn_log::{CoordinatorEpoch, ProducerEpoch, ProducerId, TxnResult};

use super::journal::Journal;
use super::log::PartitionLog;
use super::offsets::{OffsetKey, OffsetStore, OffsetValue, encode_batch};
use super::server::Tp;

/// Records and aborted transactions read for a Fetch.
#[derive(Debug)]
pub(crate) struct FetchRead {
    pub(crate) records: Bytes,
    /// `(producer_id, first_offset)` per aborted transaction (read_committed only).
    pub(crate) aborted: Option<Vec<(i64, i64)>>,
}

/// A partition this node leads.
#[derive(Debug)]
pub(crate) struct Partition {
    log: PartitionLog,
    state: PartitionState,
    /// Only on `__consumer_offsets` partitions.
    offsets: Option<OffsetStore>,
}

impl Partition {
    /// Opens the partition `tp` from the batches the journal held for it, replaying them into
    /// the producer state (and, for an offsets partition, the committed and staged offsets).
    /// `config` says whether transactional batches need a verification guard (KIP-890).
    pub(crate) fn open(
        journal: Arc<Journal>,
        (topic, partition): (&str, i32),
        batches: Vec<Bytes>,
        is_offsets: bool,
        config: ParticipantConfig,
    ) -> anyhow::Result<Self> {
        let log = PartitionLog::recover(journal, (topic, partition), batches)?;
        let mut state = PartitionState::new(config, log.log_start_offset());
        let mut offsets = is_offsets.then(OffsetStore::default);
        for bytes in log.batches() {
            let (batch, _) = LogBatch::read_one(&bytes)
                .with_context(|| format!("replaying {topic}-{partition}"))?;
            state
                .replay_batch(&batch)
                .with_context(|| format!("replaying {topic}-{partition}"))?;
            if let Some(store) = offsets.as_mut() {
                apply_to_offsets(store, &batch, &bytes);
            }
        }
        state.advance_high_watermark(log.next_offset());
        Ok(Self {
            log,
            state,
            offsets,
        })
    }

    /// Advances the high watermark over what is durable.
    pub(crate) fn advance_high_watermark(&mut self) {
        let durable = self.log.durable_end();
        self.state.advance_high_watermark(durable);
    }

    /// Makes the log durable through `end` while the caller keeps the partition locked (for
    /// `__consumer_offsets`, whose offset store is read without the high watermark), then
    /// advances the high watermark.
    pub(crate) async fn make_durable_locked(&mut self, end: i64) -> std::io::Result<()> {
        if let Some(position) = self.log.sync_position(end)? {
            Arc::clone(self.log.journal())
                .sync_through(position)
                .await?;
        }
        self.advance_high_watermark();
        Ok(())
    }

    /// High watermark (one replica: the durable log end offset).
    pub(crate) fn high_watermark(&self) -> i64 {
        self.state.high_watermark()
    }

    /// Last stable offset.
    pub(crate) fn last_stable_offset(&self) -> i64 {
        self.state.last_stable_offset()
    }

    /// The producers with state here, for DescribeProducers.
    pub(crate) fn active_producers(&self) -> Vec<ActiveProducer> {
        self.state.active_producers()
    }

    /// Log start offset.
    pub(crate) fn log_start_offset(&self) -> i64 {
        self.log.log_start_offset()
    }

    /// The offsets of a `__consumer_offsets` partition.
    pub(crate) fn offsets(&self) -> Option<&OffsetStore> {
        self.offsets.as_ref()
    }

    /// Appends the record batch of a produce request (exactly one v2 batch, as Kafka requires
    /// from Produce v3 on), written to the OS but not synced: returns its base offset (the
    /// original one for a duplicate) and the log end offset that must be durable before it is
    /// acknowledged with acks=all (see [`PendingSyncs`]). `guard`: the verification guard of
    /// [`Partition::start_verification`] once the coordinator said yes (KIP-890).
    pub(crate) fn append_produce(
        &mut self,
        records: &Bytes,
        guard: Option<VerificationGuard>,
    ) -> Result<(i64, i64), ResponseError> {
        let (header, len) = BatchHeader::parse(records).map_err(|e| e.response_error())?;
        if len != records.len() {
            return Err(ResponseError::InvalidRecord);
        }
        let pending = match self.state.check_batch_verified(&header, guard) {
            Err(e) => {
                tracing::debug!(error = %e, "produce batch rejected");
                return Err(e.response_error());
            }
            // The original may still be on its way to disk: durable ends fall on batch
            // boundaries, so covering its first offset covers it.
            Ok(ProduceDecision::Duplicate(d)) => return Ok((d.base_offset, d.base_offset + 1)),
            Ok(ProduceDecision::Append(p)) => p,
        };
        let base = self.log.next_offset();
        self.log
            .append(records, &header, base)
            .map_err(|_| ResponseError::KafkaStorageError)?;
        if let Err(e) = self.state.complete_append(pending, base) {
            // Cannot happen under the partition lock; the log is the truth, so say so loudly.
            tracing::error!(error = %e, "participant refused an appended batch");
            return Err(e.response_error());
        }
        self.advance_high_watermark();
        if let Some(store) = self.offsets.as_mut() {
            let mut stored = records.to_vec();
            stored[..8].copy_from_slice(&base.to_be_bytes());
            store.apply_batch(&Bytes::from(stored), base);
        }
        Ok((base, self.log.next_offset()))
    }

    /// KIP-890 part 1: whether the produce batch in `records` must be verified with the
    /// coordinator before it is appended (`Some((producer id, epoch, guard))`), or not
    /// (`None`: not transactional, verification off, the producer's transaction is open here
    /// already, or bytes [`Partition::append_produce`] will refuse anyway). A zombie epoch is
    /// refused at once (INVALID_PRODUCER_EPOCH).
    ///
    /// `add` (KIP-890 part 2, a TV2 client's Produce v12+): the coordinator is asked to add
    /// the partition whenever the batch opens the producer's transaction here, also with
    /// verification switched off (then without a guard: `Some((pid, epoch, None))`).
    pub(crate) fn start_verification(
        &mut self,
        records: &Bytes,
        now_ms: i64,
        add: bool,
    ) -> Result<Option<(ProducerId, ProducerEpoch, Option<VerificationGuard>)>, ResponseError> {
        let Ok((header, _)) = BatchHeader::parse(records) else {
            return Ok(None);
        };
        let (pid, epoch) = (header.producer_id, header.producer_epoch);
        match self.state.start_verification(&header, now_ms) {
            Ok(Some(g)) => Ok(Some((pid, epoch, Some(g)))),
            Ok(None) if add && self.opens_transaction(&header) => Ok(Some((pid, epoch, None))),
            Ok(None) => Ok(None),
            Err(e) => Err(e.response_error()),
        }
    }

    /// Whether `header` is a transactional batch of a producer with no transaction open here
    /// at its epoch (what `start_verification` asks when verification is on).
    fn opens_transaction(&self, header: &BatchHeader) -> bool {
        header.is_transactional
            && !header.is_control
            && header.has_producer_id()
            && !self
                .state
                .has_ongoing_transaction(header.producer_id, header.producer_epoch)
    }

    /// As [`Partition::start_verification`] for the transactional batch of `records` offset
    /// commits that [`Partition::append_offsets`] would write for `producer` now: `None`
    /// nothing to ask, `Some(guard)` ask (`add`: a TxnOffsetCommit v5+, asked whenever the
    /// batch opens the transaction here; the guard is `None` with verification off).
    pub(crate) fn start_offsets_verification(
        &mut self,
        producer: (ProducerId, ProducerEpoch),
        records: usize,
        now_ms: i64,
        add: bool,
    ) -> Result<Option<Option<VerificationGuard>>, ResponseError> {
        let (pid, epoch) = producer;
        let seq = self.next_offsets_sequence(pid, epoch);
        let header = BatchHeader {
            max_timestamp_ms: now_ms,
            ..BatchHeader::transactional(pid, epoch, seq, i32::try_from(records).unwrap_or(1))
        };
        match self.state.start_verification(&header, now_ms) {
            Ok(Some(g)) => Ok(Some(Some(g))),
            Ok(None) if add && self.opens_transaction(&header) => Ok(Some(None)),
            Ok(None) => Ok(None),
            Err(e) => Err(e.response_error()),
        }
    }

    /// The sequence refbroker gives the next offsets batch of `pid` (the group coordinator's
    /// own appends carry no client sequence; see `docs/broker-integration.md`).
    fn next_offsets_sequence(&self, pid: ProducerId, epoch: ProducerEpoch) -> i32 {
        match self.state.producer(pid) {
            Some(e) if e.producer_epoch() == epoch && e.last_sequence() >= 0 => {
                increment_sequence(e.last_sequence(), 1)
            }
            _ => 0,
        }
    }

    /// Writes offset commits to this (`__consumer_offsets`) partition: plain, or staged for
    /// `producer`'s transaction (TxnOffsetCommit), through the same produce checks, so a fenced
    /// producer epoch is refused with INVALID_PRODUCER_EPOCH. Returns the log end offset to
    /// make durable, which the caller does before it lets go of the lock (the offset store
    /// already shows the commit).
    pub(crate) fn append_offsets(
        &mut self,
        entries: &[(OffsetKey, OffsetValue)],
        producer: Option<(ProducerId, ProducerEpoch)>,
        now_ms: i64,
        guard: Option<VerificationGuard>,
    ) -> Result<i64, ResponseError> {
        if self.offsets.is_none() {
            return Err(ResponseError::NotCoordinator);
        }
        let producer =
            producer.map(|(pid, epoch)| (pid, epoch, self.next_offsets_sequence(pid, epoch)));
        let batch = encode_batch(entries, producer, now_ms)
            .map_err(|_| ResponseError::UnknownServerError)?;
        let (_, end) = self.append_produce(&batch, guard)?;
        Ok(end)
    }

    /// Applies one transaction marker: a control batch at the log end, written but not synced;
    /// returns the log end offset to make durable before the marker is acknowledged.
    pub(crate) fn write_marker(
        &mut self,
        producer_id: ProducerId,
        producer_epoch: ProducerEpoch,
        coordinator_epoch: CoordinatorEpoch,
        result: TxnResult,
        txn_version: u8,
        now_ms: i64,
    ) -> Result<i64, ResponseError> {
        let marker = Marker {
            producer_id,
            producer_epoch,
            coordinator_epoch,
            result,
            txn_version: TxnVersion(i8::try_from(txn_version).unwrap_or(i8::MAX)),
        };
        let pending = match self.state.check_marker(&marker) {
            Ok(p) => p,
            Err(e) => {
                tracing::info!(error = %e, "marker rejected");
                return Err(e.response_error());
            }
        };
        let base = self.log.next_offset();
        let bytes = pending
            .control_batch(base, 0, now_ms)
            .encode()
            .map_err(|_| ResponseError::UnknownServerError)?;
        let (header, _) =
            BatchHeader::parse(&bytes).map_err(|_| ResponseError::UnknownServerError)?;
        self.log
            .append(&bytes, &header, base)
            .map_err(|_| ResponseError::KafkaStorageError)?;
        if let Err(e) = self.state.complete_marker(pending, base, now_ms) {
            tracing::error!(error = %e, "participant refused an appended marker");
            return Err(e.response_error());
        }
        self.advance_high_watermark();
        if let Some(store) = self.offsets.as_mut() {
            store.complete(producer_id, result);
        }
        Ok(self.log.next_offset())
    }

    /// Whether this is a `__consumer_offsets` partition (its writers keep the lock until
    /// their append is durable).
    pub(crate) fn is_offsets(&self) -> bool {
        self.offsets.is_some()
    }

    /// Reads for a Fetch: up to the high watermark, or for read_committed up to the last
    /// stable offset with the aborted transactions of the served range.
    pub(crate) fn read(&self, from: i64, read_committed: bool, max_bytes: usize) -> FetchRead {
        let upto = if read_committed {
            self.last_stable_offset()
        } else {
            self.high_watermark()
        };
        let (records, end) = self.log.read(from, upto, max_bytes);
        let aborted = read_committed.then(|| {
            self.state
                .read_committed(from, end)
                .aborted
                .into_iter()
                .map(|t| (t.producer_id.0, t.first_offset))
                .collect()
        });
        FetchRead { records, aborted }
    }

    /// `(offset, timestamp)` of the first batch at or after `ts`.
    pub(crate) fn offset_for_timestamp(&self, ts: i64) -> Option<(i64, i64)> {
        self.log.offset_for_timestamp(ts)
    }
}

/// The partitions of one request that await durability, with the largest end offset of each.
#[derive(Default)]
pub(crate) struct PendingSyncs {
    by_partition: BTreeMap<Tp, (Arc<Mutex<Partition>>, i64)>,
}

impl PendingSyncs {
    /// Adds `end` for the partition `tp`.
    pub(crate) fn add(&mut self, tp: Tp, part: &Arc<Mutex<Partition>>, end: i64) {
        let e = self
            .by_partition
            .entry(tp)
            .or_insert_with(|| (Arc::clone(part), end));
        e.1 = e.1.max(end);
    }

    /// Makes every partition durable through its end with one group commit of the journal
    /// (shared with concurrent requests; no partition lock is held meanwhile), then advances
    /// their high watermarks. Returns the partitions that are not durable: all of them if the
    /// write or fsync failed (the journal is then poisoned).
    pub(crate) async fn wait(self) -> Vec<Tp> {
        match self.sync().await {
            Ok(()) => Vec::new(),
            Err(e) => {
                tracing::error!(error = %e, "partitions not made durable");
                self.by_partition.into_keys().collect()
            }
        }
    }

    async fn sync(&self) -> std::io::Result<()> {
        let mut through: Option<(Arc<Journal>, u64)> = None;
        for (part, end) in self.by_partition.values() {
            let part = part.lock().await;
            if let Some(position) = part.log.sync_position(*end)? {
                let at = through.get_or_insert_with(|| (Arc::clone(part.log.journal()), 0));
                at.1 = at.1.max(position);
            }
        }
        if let Some((journal, position)) = through {
            journal.sync_through(position).await?;
        }
        for (part, _) in self.by_partition.values() {
            part.lock().await.advance_high_watermark();
        }
        Ok(())
    }
}

fn apply_to_offsets(store: &mut OffsetStore, batch: &LogBatch, bytes: &Bytes) {
    match batch {
        LogBatch::Data(h) => store.apply_batch(bytes, h.base_offset),
        LogBatch::Control {
            header,
            record: markers::participant::ControlRecord::EndTxn { result, .. },
        } => store.complete(header.producer_id, *result),
        LogBatch::Control { .. } => {}
    }
}
