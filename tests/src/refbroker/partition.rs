//! One led partition: its log and the participant state derived from it.
//!
//! Every append follows the participant's call sequence (see [`markers::participant`]): parse
//! the batch header, `check_batch` / `check_marker`, append to the log at its end offset,
//! `complete_append` / `complete_marker`, then `advance_high_watermark` (one replica: the log
//! end). The caller holds the partition's lock throughout. On open the state is rebuilt by
//! replaying the log.

use std::path::Path;

use anyhow::Context;
use bytes::Bytes;
use kafka_protocol::ResponseError;
use markers::participant::{
    BatchHeader, LogBatch, Marker, ParticipantConfig, PartitionState, ProduceDecision, TxnVersion,
    increment_sequence,
};
use txn_log::{CoordinatorEpoch, ProducerEpoch, ProducerId, TxnResult};

use super::log::PartitionLog;
use super::offsets::{OffsetKey, OffsetStore, OffsetValue, encode_batch};

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
    /// Opens the partition in `dir`, replaying its log into the producer state (and, for an
    /// offsets partition, the committed and staged offsets).
    pub(crate) fn open(dir: &Path, is_offsets: bool) -> anyhow::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let log = PartitionLog::open(&dir.join("00000000000000000000.log"))?;
        let mut state = PartitionState::new(ParticipantConfig::default(), log.log_start_offset());
        let mut offsets = is_offsets.then(OffsetStore::default);
        for bytes in log.batches() {
            let (batch, _) = LogBatch::read_one(&bytes)
                .with_context(|| format!("replaying {}", log.path().display()))?;
            state
                .replay_batch(&batch)
                .with_context(|| format!("replaying {}", log.path().display()))?;
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

    /// High watermark (one replica: the log end offset).
    pub(crate) fn high_watermark(&self) -> i64 {
        self.state.high_watermark()
    }

    /// Last stable offset.
    pub(crate) fn last_stable_offset(&self) -> i64 {
        self.state.last_stable_offset()
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
    /// from Produce v3 on) and returns its base offset (the original one for a duplicate).
    pub(crate) fn append_produce(
        &mut self,
        records: &Bytes,
        sync: bool,
    ) -> Result<i64, ResponseError> {
        let (header, len) = BatchHeader::parse(records).map_err(|e| e.response_error())?;
        if len != records.len() {
            return Err(ResponseError::InvalidRecord);
        }
        let pending = match self.state.check_batch(&header) {
            Err(e) => {
                tracing::debug!(error = %e, "produce batch rejected");
                return Err(e.response_error());
            }
            Ok(ProduceDecision::Duplicate(d)) => return Ok(d.base_offset),
            Ok(ProduceDecision::Append(p)) => p,
        };
        let base = self.log.next_offset();
        self.log
            .append(records, &header, base, sync)
            .map_err(|_| ResponseError::KafkaStorageError)?;
        if let Err(e) = self.state.complete_append(pending, base) {
            // Cannot happen under the partition lock; the log is the truth, so say so loudly.
            tracing::error!(error = %e, "participant refused an appended batch");
            return Err(e.response_error());
        }
        self.state.advance_high_watermark(self.log.next_offset());
        if let Some(store) = self.offsets.as_mut() {
            let mut stored = records.to_vec();
            stored[..8].copy_from_slice(&base.to_be_bytes());
            store.apply_batch(&Bytes::from(stored), base);
        }
        Ok(base)
    }

    /// Writes offset commits to this (`__consumer_offsets`) partition: plain, or staged for
    /// `producer`'s transaction (TxnOffsetCommit), through the same produce checks, so a fenced
    /// producer epoch is refused with INVALID_PRODUCER_EPOCH.
    pub(crate) fn append_offsets(
        &mut self,
        entries: &[(OffsetKey, OffsetValue)],
        producer: Option<(ProducerId, ProducerEpoch)>,
        now_ms: i64,
    ) -> Result<(), ResponseError> {
        if self.offsets.is_none() {
            return Err(ResponseError::NotCoordinator);
        }
        let producer = producer.map(|(pid, epoch)| {
            let seq = match self.state.producer(pid) {
                Some(e) if e.producer_epoch() == epoch && e.last_sequence() >= 0 => {
                    increment_sequence(e.last_sequence(), 1)
                }
                _ => 0,
            };
            (pid, epoch, seq)
        });
        let batch = encode_batch(entries, producer, now_ms)
            .map_err(|_| ResponseError::UnknownServerError)?;
        self.append_produce(&batch, true).map(|_| ())
    }

    /// Applies one transaction marker: a control batch at the log end (synced).
    pub(crate) fn write_marker(
        &mut self,
        producer_id: ProducerId,
        producer_epoch: ProducerEpoch,
        coordinator_epoch: CoordinatorEpoch,
        result: TxnResult,
        txn_version: u8,
        now_ms: i64,
    ) -> Result<(), ResponseError> {
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
            .append(&bytes, &header, base, true)
            .map_err(|_| ResponseError::KafkaStorageError)?;
        if let Err(e) = self.state.complete_marker(pending, base, now_ms) {
            tracing::error!(error = %e, "participant refused an appended marker");
            return Err(e.response_error());
        }
        self.state.advance_high_watermark(self.log.next_offset());
        if let Some(store) = self.offsets.as_mut() {
            store.complete(producer_id, result);
        }
        Ok(())
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
