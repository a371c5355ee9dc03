//! The `record_batch` harness: produce record batches and partition logs through the
//! participant's decoders and state.

use bytes::Bytes;
use kafka_protocol::records::RecordBatchDecoder;
use markers::participant::{
    BatchHeader, ControlBatch, LogBatch, Marker, ParticipantConfig, PartitionState,
    ProduceDecision, TxnVersion,
};

/// `record_batch` input: `[flags] [batches...]`. Flag bit 0: the harness recomputes the CRC
/// of every batch it walks (so that mutations reach the record decoder instead of failing the
/// checksum); bit 1: the bytes are also offered as a single Produce batch first.
pub fn record_batch(data: &[u8]) {
    let (&flags, rest) = data.split_first().unwrap_or((&0, &[]));
    let mut bytes = rest.to_vec();
    if flags & 1 == 1 {
        fix_crcs(&mut bytes);
    }
    let bytes = Bytes::from(bytes);

    // The decoders on their own.
    let _ = BatchHeader::parse(&bytes);
    let _ = ControlBatch::decode(&bytes);
    for b in LogBatch::read_all(bytes.clone()).take(256) {
        if b.is_err() {
            break;
        }
    }
    let _ = RecordBatchDecoder::decode_batch_info(&mut bytes.clone());
    let _ = RecordBatchDecoder::decode(&mut bytes.clone());
    let _ = RecordBatchDecoder::decode_all(&mut bytes.clone());

    // Restart: producer-state recovery from the log bytes.
    if let Ok(state) = PartitionState::replay_log(ParticipantConfig::default(), 0, bytes.clone()) {
        let mut state = state;
        let end = state.next_offset();
        state.advance_high_watermark(end);
        let _ = state.read_committed(0, end);
        let _ = state.last_stable_offset();
        let _ = state.aborted_transactions(0..end);
        let _ = state.expire_producers(i64::MAX, 1);
    }

    // Produce: each batch through the participant's call sequence, as the reference broker's
    // `append_produce` does (parse, check_batch, append at the log end, complete_append);
    // control batches as markers (check_marker, complete_marker).
    let mut state = PartitionState::new(ParticipantConfig::default(), 0);
    let mut rest = bytes;
    for _ in 0..256 {
        if rest.is_empty() {
            break;
        }
        let Ok((batch, len)) = LogBatch::read_one(&rest) else {
            break;
        };
        match &batch {
            LogBatch::Data(header) => {
                if let Ok(ProduceDecision::Append(pending)) = state.check_batch(header) {
                    let base = state.next_offset();
                    let _ = state.complete_append(pending, base);
                }
            }
            LogBatch::Control { header, record } => {
                if let markers::participant::ControlRecord::EndTxn {
                    result,
                    coordinator_epoch,
                } = record
                {
                    let marker = Marker {
                        producer_id: header.producer_id,
                        producer_epoch: header.producer_epoch,
                        coordinator_epoch: *coordinator_epoch,
                        result: *result,
                        txn_version: TxnVersion(i8::from(header.is_transactional)),
                    };
                    if let Ok(pending) = state.check_marker(&marker) {
                        let at = state.next_offset();
                        let _ = pending
                            .control_batch(at, 0, header.max_timestamp_ms)
                            .encode();
                        let _ = state.complete_marker(pending, at, header.max_timestamp_ms);
                    }
                }
            }
        }
        let end = state.next_offset();
        state.advance_high_watermark(end);
        let _ = state.read_committed(0, end);
        let _ = rest.split_to(len);
    }
    let _ = state.last_stable_offset();
    let _ = state.expire_producers(0, 0);
}

/// Recomputes the v2 CRC (crc32c of the batch from byte 21, stored at 17..21) of every batch
/// in `buf` whose length field stays within `buf`.
pub fn fix_crcs(buf: &mut [u8]) {
    let mut at = 0usize;
    while buf.len() >= at + 61 {
        let len = i32::from_be_bytes([buf[at + 8], buf[at + 9], buf[at + 10], buf[at + 11]]);
        let Ok(len) = usize::try_from(len) else {
            return;
        };
        let end = (at + 12).saturating_add(len).min(buf.len());
        if end < at + 21 {
            return;
        }
        let crc = crc32c::crc32c(&buf[at + 21..end]);
        buf[at + 17..at + 21].copy_from_slice(&crc.to_be_bytes());
        at = end;
    }
}
