//! One test per participant rule (Kafka's `ProducerAppendInfo` / `ProducerStateManager`
//! behaviour, as Kafka's `ProducerStateManager` and `UnifiedLog` apply it; scenario S102). Each test names the rule it guards.

use bytes::{Bytes, BytesMut};
use kafka_protocol::records::RecordBatchDecoder;
use txn_log::{CoordinatorEpoch, ErrorCode, ProducerEpoch, ProducerId, TxnResult};

use crate::participant::*;

const PID: ProducerId = ProducerId(1000);

fn state() -> PartitionState {
    PartitionState::new(ParticipantConfig::default(), 0)
}

/// Checks, appends at the log end, records, and advances the high watermark.
fn append(p: &mut PartitionState, h: BatchHeader) -> AppendedBatch {
    let ProduceDecision::Append(pending) = p.check_batch(&h).expect("accepted") else {
        panic!("expected Append for {h:?}");
    };
    let at = p.next_offset();
    let done = p.complete_append(pending, at).expect("recorded");
    p.advance_high_watermark(p.next_offset());
    done
}

fn marker(epoch: i16, ce: i32, result: TxnResult, tv: TxnVersion) -> Marker {
    Marker {
        producer_id: PID,
        producer_epoch: ProducerEpoch(epoch),
        coordinator_epoch: CoordinatorEpoch(ce),
        result,
        txn_version: tv,
    }
}

fn apply(p: &mut PartitionState, m: Marker) -> Result<MarkerApplied, MarkerError> {
    let pending = p.check_marker(&m)?;
    let at = p.next_offset();
    let applied = p.complete_marker(pending, at, 0).expect("recorded");
    p.advance_high_watermark(p.next_offset());
    Ok(applied)
}

fn idem(epoch: i16, seq: i32, n: i32) -> BatchHeader {
    BatchHeader::idempotent(PID, ProducerEpoch(epoch), seq, n)
}

fn txn(epoch: i16, seq: i32, n: i32) -> BatchHeader {
    BatchHeader::transactional(PID, ProducerEpoch(epoch), seq, n)
}

fn err_code(p: &mut PartitionState, h: BatchHeader) -> ErrorCode {
    p.check_batch(&h).expect_err("rejected").code()
}

// ===== produce =====

#[test]
fn a_retried_batch_is_acknowledged_with_its_original_offset_and_not_appended() {
    let mut p = state();
    append(&mut p, BatchHeader::plain(7));
    let first = append(&mut p, idem(0, 0, 3));
    append(&mut p, idem(0, 3, 2));
    let end = p.next_offset();
    assert_eq!(
        p.check_batch(&idem(0, 0, 3)).unwrap(),
        ProduceDecision::Duplicate(DuplicateBatch {
            base_offset: first.base_offset,
            last_offset: first.last_offset,
            max_timestamp_ms: -1,
        })
    );
    assert_eq!(first.base_offset, 7);
    assert_eq!(p.next_offset(), end);
    assert_eq!(p.metrics().duplicates, 1);
}

#[test]
fn a_retry_older_than_the_last_five_batches_is_out_of_order() {
    let mut p = state();
    for i in 0..6 {
        append(&mut p, idem(0, i, 1));
    }
    assert_eq!(err_code(&mut p, idem(0, 0, 1)), 45);
    assert!(matches!(
        p.check_batch(&idem(0, 1, 1)),
        Ok(ProduceDecision::Duplicate(DuplicateBatch {
            base_offset: 1,
            ..
        }))
    ));
}

#[test]
fn a_sequence_gap_is_out_of_order_sequence_number() {
    let mut p = state();
    append(&mut p, idem(0, 0, 5));
    let e = p.check_batch(&idem(0, 6, 1)).unwrap_err();
    assert_eq!(
        e,
        ProduceError::OutOfOrderSequence {
            producer_id: PID,
            epoch: ProducerEpoch(0),
            base_sequence: 6,
            expected: 5
        }
    );
    assert_eq!(e.code(), 45);
    assert_eq!(p.metrics().out_of_order, 1);
    append(&mut p, idem(0, 5, 1));
}

#[test]
fn an_older_producer_epoch_is_invalid_producer_epoch() {
    let mut p = state();
    append(&mut p, txn(3, 0, 1));
    assert_eq!(err_code(&mut p, txn(2, 1, 1)), 47);
    assert_eq!(err_code(&mut p, idem(2, 0, 1)), 47);
    assert_eq!(p.metrics().produce_epoch_fenced, 2);
}

#[test]
fn a_new_epoch_must_start_at_sequence_zero_and_resets_the_sequences() {
    let mut p = state();
    append(&mut p, idem(0, 0, 10));
    assert_eq!(err_code(&mut p, idem(1, 10, 1)), 45);
    append(&mut p, idem(1, 0, 2));
    // the old epoch's batches are forgotten: not duplicates, and the old epoch is fenced
    assert_eq!(err_code(&mut p, idem(0, 0, 10)), 47);
    assert_eq!(p.producer(PID).unwrap().last_sequence(), 1);
}

#[test]
fn a_non_transactional_batch_inside_an_open_transaction_is_invalid_txn_state() {
    let mut p = state();
    let t = append(&mut p, txn(0, 0, 2));
    let e = p.check_batch(&idem(0, 2, 1)).unwrap_err();
    assert_eq!(
        e,
        ProduceError::InvalidTxnState {
            producer_id: PID,
            txn_first_offset: t.base_offset
        }
    );
    assert_eq!(e.code(), 48);
}

#[test]
fn an_unknown_producer_may_start_anywhere_by_default_as_kafka_2_5() {
    let mut p = state();
    append(&mut p, idem(4, 77, 3));
    append(&mut p, idem(4, 80, 1));
    assert_eq!(err_code(&mut p, idem(4, 82, 1)), 45);
}

#[test]
fn an_unknown_producer_must_start_at_zero_when_configured_strict() {
    let mut p = PartitionState::new(
        ParticipantConfig {
            unknown_producer: UnknownProducerPolicy::RequireSequenceZero,
            ..ParticipantConfig::default()
        },
        0,
    );
    assert_eq!(err_code(&mut p, idem(0, 5, 1)), 59);
    append(&mut p, idem(0, 0, 1));
}

#[test]
fn sequences_wrap_from_i32_max_to_zero() {
    let mut p = state();
    append(&mut p, idem(0, i32::MAX - 2, 3));
    assert_eq!(p.producer(PID).unwrap().last_sequence(), i32::MAX);
    append(&mut p, idem(0, 0, 2));
    // a batch spanning the wrap
    let mut q = state();
    let spanning = idem(0, i32::MAX - 1, 4);
    assert_eq!(spanning.last_sequence(), 1);
    append(&mut q, spanning);
    assert!(matches!(
        q.check_batch(&spanning),
        Ok(ProduceDecision::Duplicate(_))
    ));
    append(&mut q, idem(0, 2, 1));
}

#[test]
fn malformed_batches_are_invalid_record() {
    let mut p = state();
    let mut control = txn(0, 0, 1);
    control.is_control = true;
    let cases = [
        control,
        BatchHeader::transactional(ProducerId::NONE, ProducerEpoch::NONE, -1, 1),
        idem(0, -1, 1),
        idem(-1, 0, 1),
        idem(0, 0, 0),
        BatchHeader {
            last_offset_delta: 5,
            ..idem(0, 0, 2)
        },
    ];
    for c in cases {
        assert_eq!(err_code(&mut p, c), 87, "{c:?}");
    }
    assert_eq!(p.metrics().invalid_records, 6);
    assert_eq!(p.next_offset(), 0);
}

#[test]
fn plain_producers_are_appended_without_state() {
    let mut p = state();
    let a = append(&mut p, BatchHeader::plain(4));
    assert_eq!((a.base_offset, a.last_offset), (0, 3));
    assert_eq!(p.producers().count(), 0);
}

#[test]
fn a_decision_that_went_stale_is_refused() {
    let mut p = state();
    let h = idem(0, 0, 1);
    let ProduceDecision::Append(first) = p.check_batch(&h).unwrap() else {
        panic!()
    };
    let ProduceDecision::Append(second) = p.check_batch(&h).unwrap() else {
        panic!()
    };
    p.complete_append(first, 0).unwrap();
    assert_eq!(
        p.complete_append(second, 1),
        Err(AppendError::StaleDuplicate { base_offset: 0 })
    );
    let ProduceDecision::Append(behind) = p.check_batch(&idem(0, 1, 1)).unwrap() else {
        panic!()
    };
    assert_eq!(
        p.complete_append(behind, 0),
        Err(AppendError::OffsetBehindLog {
            base_offset: 0,
            next_offset: 1
        })
    );
    assert_eq!(p.next_offset(), 1);
}

// ===== markers =====

#[test]
fn tv0_markers_need_an_epoch_at_least_the_current_one() {
    let mut p = state();
    append(&mut p, txn(5, 0, 1));
    let e = apply(&mut p, marker(4, 0, TxnResult::Commit, TxnVersion::V0)).unwrap_err();
    assert_eq!(e.code(), 47);
    let done = apply(&mut p, marker(5, 0, TxnResult::Commit, TxnVersion::V1)).unwrap();
    assert_eq!(done.completed.map(|t| t.result), Some(TxnResult::Commit));
    // same epoch, no transaction open: accepted, closes nothing
    let again = apply(&mut p, marker(5, 0, TxnResult::Commit, TxnVersion::V0)).unwrap();
    assert_eq!(again.completed, None);
    // TV0 keeps sequences across transactions
    append(&mut p, txn(5, 1, 1));
    // a higher-epoch TV0 marker (fencing abort) bumps the epoch and resets sequences
    let fenced = apply(&mut p, marker(6, 0, TxnResult::Abort, TxnVersion::V0)).unwrap();
    assert_eq!(fenced.completed.map(|t| t.result), Some(TxnResult::Abort));
    assert_eq!(err_code(&mut p, txn(5, 2, 1)), 47);
    assert_eq!(err_code(&mut p, txn(6, 2, 1)), 45);
    append(&mut p, txn(6, 0, 1));
}

/// KIP-1228: the `TransactionVersion` a `WriteTxnMarkers` v2 request carries selects the
/// epoch rule. Data of an open transaction at epoch 5: a TV2 marker must come with a bumped
/// epoch (5 refused with INVALID_PRODUCER_EPOCH, 6 accepted); a TV1 marker at 5 is accepted.
/// Decoded from v1 (no field), the same request is TV0/TV1's rule.
#[test]
fn the_wire_transaction_version_selects_the_marker_epoch_rule() {
    use kafka_protocol::messages::write_txn_markers_request::{
        WritableTxnMarker, WritableTxnMarkerTopic,
    };
    use kafka_protocol::messages::{TopicName, WriteTxnMarkersRequest};
    use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

    // Through the wire at `version`, then the library's conversion (no side channel).
    let on_the_wire = |epoch: i16, tv: i8, version: i16| -> Marker {
        let request = WriteTxnMarkersRequest::default().with_markers(vec![
            WritableTxnMarker::default()
                .with_producer_id(kafka_protocol::messages::ProducerId(PID.0))
                .with_producer_epoch(epoch)
                .with_coordinator_epoch(0)
                .with_transaction_result(true)
                .with_transaction_version(tv)
                .with_topics(vec![
                    WritableTxnMarkerTopic::default()
                        .with_name(TopicName(StrBytes::from_static_str("t")))
                        .with_partition_indexes(vec![0]),
                ]),
        ]);
        let mut buf = BytesMut::new();
        request.encode(&mut buf, version).expect("encode");
        let decoded = WriteTxnMarkersRequest::decode(&mut buf.freeze(), version).expect("decode");
        let entries = crate::apply::markers_of(&decoded, &[]);
        assert_eq!(entries.len(), 1);
        entries[0].1
    };
    let open = || {
        let mut p = state();
        append(&mut p, txn(5, 0, 1));
        p
    };

    // TV2 at the data's epoch: refused, nothing written.
    let mut p = open();
    let m = on_the_wire(5, 2, 2);
    assert_eq!(m.txn_version, TxnVersion::V2);
    let e = p.check_marker(&m).unwrap_err();
    assert!(matches!(
        e,
        MarkerError::InvalidProducerEpoch {
            txn_version: TxnVersion::V2,
            txn_open: true,
            ..
        }
    ));
    assert_eq!(e.code(), ErrorCode::INVALID_PRODUCER_EPOCH);
    // TV2 at epoch + 1: accepted, the transaction ends.
    let done = apply(&mut p, on_the_wire(6, 2, 2)).unwrap();
    assert_eq!(done.completed.map(|t| t.result), Some(TxnResult::Commit));

    // TV1 at the data's epoch: accepted.
    let mut p = open();
    let m = on_the_wire(5, 1, 2);
    assert_eq!(m.txn_version, TxnVersion::V1);
    let done = apply(&mut p, m).unwrap();
    assert_eq!(done.completed.map(|t| t.result), Some(TxnResult::Commit));

    // The same TV2 marker sent at v1 loses its version: TV0, accepted at the data's epoch.
    let mut p = open();
    let m = on_the_wire(5, 2, 1);
    assert_eq!(m.txn_version, TxnVersion::V0);
    assert!(apply(&mut p, m).is_ok());
}

/// S102: entry epoch 5, coordinator epoch 3.
#[test]
fn s102_participant_fencing() {
    let setup = || {
        let mut p = state();
        append(&mut p, txn(5, 0, 1));
        let done = apply(&mut p, marker(5, 3, TxnResult::Commit, TxnVersion::V0)).unwrap();
        assert!(done.completed.is_some());
        append(&mut p, txn(5, 1, 1));
        p
    };
    let mut p = setup();
    let e = apply(&mut p, marker(4, 3, TxnResult::Commit, TxnVersion::V0)).unwrap_err();
    assert_eq!(e.code(), 47);
    let e = apply(&mut p, marker(5, 2, TxnResult::Commit, TxnVersion::V0)).unwrap_err();
    assert_eq!(
        e,
        MarkerError::CoordinatorFenced {
            producer_id: PID,
            marker_coordinator_epoch: CoordinatorEpoch(2),
            current_coordinator_epoch: CoordinatorEpoch(3),
        }
    );
    assert_eq!(e.code(), 52);
    // TV2: epoch 5 with a transaction open is rejected
    let e = apply(&mut p, marker(5, 3, TxnResult::Commit, TxnVersion::V2)).unwrap_err();
    assert!(matches!(
        e,
        MarkerError::InvalidProducerEpoch { txn_open: true, .. }
    ));
    assert_eq!(e.code(), 47);
    // TV2: epoch 6 completes it
    let done = apply(&mut p, marker(6, 3, TxnResult::Commit, TxnVersion::V2)).unwrap();
    assert_eq!(done.completed.map(|t| t.first_offset), Some(2));
    // TV2: epoch 6 again, nothing open: an idempotent retry, accepted and closing nothing
    let retry = apply(&mut p, marker(6, 3, TxnResult::Commit, TxnVersion::V2)).unwrap();
    assert_eq!(retry.completed, None);
    // TV2 with nothing open but an older epoch is still rejected
    assert_eq!(
        apply(&mut p, marker(5, 3, TxnResult::Commit, TxnVersion::V2))
            .unwrap_err()
            .code(),
        47
    );
    assert_eq!(p.metrics().markers_epoch_fenced, 3);
    assert_eq!(p.metrics().markers_coordinator_fenced, 1);
    assert_eq!(p.metrics().markers_applied, 3);
}

#[test]
fn a_newer_coordinator_epoch_is_accepted_and_remembered() {
    let mut p = state();
    apply(&mut p, marker(0, 7, TxnResult::Abort, TxnVersion::V0)).unwrap();
    assert_eq!(
        p.producer(PID).unwrap().coordinator_epoch(),
        CoordinatorEpoch(7)
    );
    assert_eq!(
        apply(&mut p, marker(0, 6, TxnResult::Abort, TxnVersion::V0))
            .unwrap_err()
            .code(),
        52
    );
}

#[test]
fn a_marker_without_producer_id_or_epoch_is_invalid_request() {
    let mut p = state();
    let mut m = marker(0, 0, TxnResult::Commit, TxnVersion::V0);
    m.producer_id = ProducerId::NONE;
    assert_eq!(p.check_marker(&m).unwrap_err().code(), 42);
    let mut m = marker(-1, 0, TxnResult::Commit, TxnVersion::V0);
    m.producer_id = PID;
    assert_eq!(p.check_marker(&m).unwrap_err().code(), 42);
}

#[test]
fn a_tv2_marker_bump_requires_the_next_transaction_to_start_at_zero() {
    let mut p = state();
    append(&mut p, txn(0, 0, 3));
    apply(&mut p, marker(1, 0, TxnResult::Commit, TxnVersion::V2)).unwrap();
    assert_eq!(err_code(&mut p, txn(1, 3, 1)), 45);
    append(&mut p, txn(1, 0, 1));
}

// ===== LSO and read_committed =====

#[test]
fn the_lso_is_the_first_offset_of_the_oldest_open_transaction_else_the_high_watermark() {
    let mut p = state();
    let other = ProducerId(2000);
    append(&mut p, BatchHeader::plain(2)); // 0..=1
    append(&mut p, txn(0, 0, 2)); // 2..=3, PID
    append(
        &mut p,
        BatchHeader::transactional(other, ProducerEpoch(0), 0, 1),
    ); // 4
    append(&mut p, BatchHeader::plain(1)); // 5
    assert_eq!(p.last_stable_offset(), 2);
    assert_eq!(p.open_transaction_count(), 2);
    apply(&mut p, marker(0, 0, TxnResult::Commit, TxnVersion::V0)).unwrap(); // 6
    assert_eq!(p.last_stable_offset(), 4);
    let m = Marker {
        producer_id: other,
        ..marker(0, 0, TxnResult::Abort, TxnVersion::V0)
    };
    apply(&mut p, m).unwrap(); // 7
    assert_eq!(p.last_stable_offset(), 8);
    assert_eq!(p.high_watermark(), 8);
}

#[test]
fn the_lso_waits_until_the_marker_is_below_the_high_watermark() {
    let mut p = state();
    append(&mut p, txn(0, 0, 1)); // 0
    let pending = p
        .check_marker(&marker(0, 0, TxnResult::Commit, TxnVersion::V0))
        .unwrap();
    p.complete_marker(pending, 1, 0).unwrap();
    assert_eq!(p.high_watermark(), 1);
    assert_eq!(p.last_stable_offset(), 0);
    p.advance_high_watermark(2);
    assert_eq!(p.last_stable_offset(), 2);
    // the high watermark never passes the log end
    p.advance_high_watermark(50);
    assert_eq!(p.high_watermark(), 2);
}

#[test]
fn read_committed_returns_the_aborted_transactions_overlapping_the_range() {
    let mut p = state();
    let b = ProducerId(2000);
    append(&mut p, txn(0, 0, 2)); // 0..=1 PID
    append(
        &mut p,
        BatchHeader::transactional(b, ProducerEpoch(0), 0, 2),
    ); // 2..=3 b
    apply(&mut p, marker(0, 0, TxnResult::Abort, TxnVersion::V0)).unwrap(); // 4
    append(&mut p, BatchHeader::plain(3)); // 5..=7
    let mb = Marker {
        producer_id: b,
        ..marker(0, 0, TxnResult::Abort, TxnVersion::V0)
    };
    apply(&mut p, mb).unwrap(); // 8
    append(&mut p, txn(0, 2, 1)); // 9 open
    let r = p.read_committed(0, 100);
    assert_eq!(r.last_stable_offset, 9);
    assert_eq!(
        r.aborted,
        vec![
            AbortedTxn {
                producer_id: PID,
                first_offset: 0,
                last_offset: 4
            },
            AbortedTxn {
                producer_id: b,
                first_offset: 2,
                last_offset: 8
            },
        ]
    );
    let pids = |r: ReadCommitted| r.aborted.iter().map(|t| t.producer_id).collect::<Vec<_>>();
    assert_eq!(pids(p.read_committed(5, 100)), vec![b]);
    assert_eq!(pids(p.read_committed(0, 2)), vec![PID]);
    assert_eq!(pids(p.read_committed(9, 100)), vec![]);
    p.advance_log_start_offset(5);
    assert_eq!(p.aborted_index_len(), 1);
}

// ===== control batches =====

#[test]
fn control_batches_have_kafkas_exact_layout() {
    let batch = ControlBatch {
        producer_id: ProducerId(0x0102_0304_0506_0708),
        producer_epoch: ProducerEpoch(9),
        coordinator_epoch: CoordinatorEpoch(7),
        result: TxnResult::Commit,
        base_offset: 42,
        partition_leader_epoch: 3,
        timestamp_ms: 1_700_000_000_000,
    };
    let b = batch.encode().unwrap();
    assert_eq!(b.len(), 78, "61-byte header + one 17-byte record");
    assert_eq!(&b[0..8], &42i64.to_be_bytes());
    assert_eq!(&b[8..12], &66i32.to_be_bytes(), "batch length");
    assert_eq!(&b[12..16], &3i32.to_be_bytes(), "partition leader epoch");
    assert_eq!(b[16], 2, "magic");
    assert_eq!(
        &b[21..23],
        &[0x00, 0x30],
        "attributes: transactional | control"
    );
    assert_eq!(&b[23..27], &0i32.to_be_bytes(), "last offset delta");
    assert_eq!(&b[27..35], &1_700_000_000_000i64.to_be_bytes());
    assert_eq!(&b[35..43], &1_700_000_000_000i64.to_be_bytes());
    assert_eq!(&b[43..51], &0x0102_0304_0506_0708i64.to_be_bytes());
    assert_eq!(&b[51..53], &9i16.to_be_bytes());
    assert_eq!(&b[53..57], &(-1i32).to_be_bytes(), "base sequence");
    assert_eq!(&b[57..61], &1i32.to_be_bytes(), "record count");
    // length 16 (zigzag 0x20), attributes, ts delta, offset delta, key len 4 (0x08),
    // key (v0, COMMIT), value len 6 (0x0c), value (v0, epoch 7), 0 headers
    assert_eq!(
        &b[61..],
        &[0x20, 0, 0, 0, 0x08, 0, 0, 0, 1, 0x0c, 0, 0, 0, 0, 0, 7, 0]
    );

    let mut buf = b.clone();
    let set = RecordBatchDecoder::decode(&mut buf).unwrap();
    let [r] = set.records.as_slice() else {
        panic!("one record")
    };
    assert!(r.control && r.transactional);
    assert_eq!(
        (r.producer_id, r.producer_epoch, r.offset),
        (batch.producer_id.0, 9, 42)
    );
    assert_eq!(r.key.as_deref(), Some(&[0u8, 0, 0, 1][..]));
    assert_eq!(r.value.as_deref(), Some(&[0u8, 0, 0, 0, 0, 7][..]));
    assert_eq!(ControlBatch::decode(&b).unwrap(), batch);

    let abort = ControlBatch {
        result: TxnResult::Abort,
        ..batch
    };
    let ab = encode_control_batch(&abort).unwrap();
    assert_eq!(&ab[61 + 5..61 + 9], &[0, 0, 0, 0]);
    assert_eq!(ControlBatch::decode(&ab).unwrap(), abort);
}

#[test]
fn a_corrupted_control_batch_fails_its_checksum() {
    let batch = ControlBatch {
        producer_id: PID,
        producer_epoch: ProducerEpoch(0),
        coordinator_epoch: CoordinatorEpoch(1),
        result: TxnResult::Abort,
        base_offset: 0,
        partition_leader_epoch: 0,
        timestamp_ms: 0,
    };
    let mut raw = BytesMut::from(&batch.encode().unwrap()[..]);
    raw[72] ^= 0x01; // inside the value
    assert!(matches!(
        ControlBatch::decode(&raw.freeze()),
        Err(BatchParseError::Corrupt { .. })
    ));
    let short = batch.encode().unwrap().slice(..40);
    assert!(matches!(
        BatchHeader::parse(&short),
        Err(BatchParseError::Truncated { .. })
    ));
}

#[test]
fn control_records_that_are_not_markers_are_recognised_and_malformed_ones_rejected() {
    assert_eq!(
        parse_control_key_value(Some(&[0, 0, 0, 2]), None),
        Ok(ControlRecord::Other { control_type: 2 })
    );
    assert_eq!(
        parse_control_key_value(Some(&[0, 0, 0, 0]), Some(&[0, 0, 0, 0, 1, 0])),
        Ok(ControlRecord::EndTxn {
            result: TxnResult::Abort,
            coordinator_epoch: CoordinatorEpoch(256)
        })
    );
    assert!(parse_control_key_value(Some(&[0, 0]), None).is_err());
    assert!(parse_control_key_value(Some(&[0, 0, 0, 1]), Some(&[0, 0, 0])).is_err());
    assert!(parse_control_key_value(None, None).is_err());
}

// ===== replay =====

/// Encodes a data batch as a client would, via kafka-protocol.
fn data_bytes(h: &BatchHeader, base_offset: i64) -> Bytes {
    DataBatch {
        producer_id: h.producer_id,
        producer_epoch: h.producer_epoch,
        base_sequence: h.base_sequence,
        transactional: h.is_transactional,
        base_offset,
        partition_leader_epoch: 0,
        timestamps: RecordTimestamps::Ascending(1000),
    }
    .encode((0..h.record_count).map(|_| (None, Some(Bytes::from_static(b"v")))))
    .unwrap()
}

#[test]
fn replaying_the_log_rebuilds_the_live_state() {
    let mut live = state();
    let mut log = BytesMut::new();
    let b = ProducerId(2000);
    let produce = |live: &mut PartitionState, log: &mut BytesMut, h: BatchHeader| {
        let at = live.next_offset();
        let bytes = data_bytes(&h, at);
        let (parsed, _) = BatchHeader::parse(&bytes).unwrap();
        assert_eq!(parsed.last_sequence(), h.last_sequence());
        append(live, parsed);
        log.extend_from_slice(&bytes);
    };
    let mark = |live: &mut PartitionState, log: &mut BytesMut, m: Marker| {
        let pending = live.check_marker(&m).unwrap();
        let at = live.next_offset();
        log.extend_from_slice(&pending.control_batch(at, 0, 5000).encode().unwrap());
        live.complete_marker(pending, at, 5000).unwrap();
        live.advance_high_watermark(live.next_offset());
    };
    produce(&mut live, &mut log, txn(0, 0, 3));
    produce(&mut live, &mut log, BatchHeader::plain(1));
    produce(
        &mut live,
        &mut log,
        BatchHeader::transactional(b, ProducerEpoch(4), 0, 1),
    );
    mark(
        &mut live,
        &mut log,
        marker(0, 1, TxnResult::Abort, TxnVersion::V0),
    );
    produce(
        &mut live,
        &mut log,
        BatchHeader::idempotent(ProducerId(3000), ProducerEpoch(0), 0, 2),
    );
    produce(&mut live, &mut log, txn(0, 3, 1));
    mark(
        &mut live,
        &mut log,
        Marker {
            producer_id: b,
            ..marker(5, 1, TxnResult::Commit, TxnVersion::V2)
        },
    );

    let mut replayed =
        PartitionState::replay_log(ParticipantConfig::default(), 0, log.clone().freeze()).unwrap();
    replayed.advance_high_watermark(replayed.next_offset());
    assert_eq!(replayed.next_offset(), live.next_offset());
    assert_eq!(replayed.last_stable_offset(), live.last_stable_offset());
    assert_eq!(replayed.last_stable_offset(), 8);
    assert_eq!(replayed.read_committed(0, 100), live.read_committed(0, 100));
    for (pid, e) in live.producers() {
        assert_eq!(replayed.producer(pid), Some(e), "{pid}");
    }
    // duplicates are still recognised after a restart
    assert!(matches!(
        replayed.check_batch(&txn(0, 3, 1)),
        Ok(ProduceDecision::Duplicate(DuplicateBatch {
            base_offset: 8,
            ..
        }))
    ));
    // a snapshot (clone) resumes with replay_batch
    let snapshot = replayed.clone();
    let mut resumed = snapshot;
    let next = ControlBatch {
        producer_id: PID,
        producer_epoch: ProducerEpoch(0),
        coordinator_epoch: CoordinatorEpoch(1),
        result: TxnResult::Commit,
        base_offset: resumed.next_offset(),
        partition_leader_epoch: 0,
        timestamp_ms: 0,
    }
    .encode()
    .unwrap();
    let (batch, _) = LogBatch::read_one(&next).unwrap();
    resumed.replay_batch(&batch).unwrap();
    resumed.advance_high_watermark(resumed.next_offset());
    assert_eq!(resumed.last_stable_offset(), resumed.next_offset());
    // going back is refused
    assert!(matches!(
        resumed.replay_batch(&batch),
        Err(AppendError::OffsetBehindLog { .. })
    ));
}

#[test]
fn replay_stops_at_corrupt_bytes() {
    let good = data_bytes(&idem(0, 0, 1), 0);
    let mut log = BytesMut::from(&good[..]);
    log.extend_from_slice(&good[..30]);
    assert!(matches!(
        PartitionState::replay_log(ParticipantConfig::default(), 0, log.freeze()),
        Err(ReplayError::Parse(BatchParseError::Truncated { .. }))
    ));
}

// ===== housekeeping =====

#[test]
fn idle_producers_expire_but_not_those_with_an_open_transaction() {
    let mut p = state();
    append(&mut p, idem(0, 0, 1).with_max_timestamp_ms(1_000));
    append(
        &mut p,
        BatchHeader::transactional(ProducerId(2), ProducerEpoch(0), 0, 1)
            .with_max_timestamp_ms(1_000),
    );
    assert_eq!(p.expire_producers(1_500, 1_000), 0);
    assert_eq!(p.expire_producers(2_000, 1_000), 1);
    assert!(p.producer(PID).is_none());
    assert!(p.producer(ProducerId(2)).is_some());
    assert_eq!(p.metrics().producers_expired, 1);
}

// ===== DescribeProducers =====

#[test]
fn active_producers_reports_what_describe_producers_needs_in_kafkas_encoding() {
    let mut p = state();
    assert!(p.active_producers().is_empty());
    append(&mut p, BatchHeader::plain(2));
    // an idempotent producer: sequence and timestamp, no transaction, no marker yet
    append(&mut p, idem(3, 0, 4).with_max_timestamp_ms(5_000));
    // a transactional one with a transaction open at offset 6
    let other = ProducerId(7);
    append(
        &mut p,
        BatchHeader::transactional(other, ProducerEpoch(1), 0, 2).with_max_timestamp_ms(6_000),
    );
    let rows = p.active_producers();
    assert_eq!(
        rows,
        vec![
            ActiveProducer {
                producer_id: other,
                producer_epoch: ProducerEpoch(1),
                last_sequence: 1,
                last_timestamp_ms: 6_000,
                coordinator_epoch: CoordinatorEpoch(-1),
                current_txn_start_offset: 6,
            },
            ActiveProducer {
                producer_id: PID,
                producer_epoch: ProducerEpoch(3),
                last_sequence: 3,
                last_timestamp_ms: 5_000,
                coordinator_epoch: CoordinatorEpoch(-1),
                current_txn_start_offset: -1,
            },
        ],
        "ordered by producer id; -1 for none"
    );
    // the ABORT marker kafka-transactions.sh abort sends: epoch and coordinator epoch taken
    // from the row (coordinator epoch -1 becomes 0, as the tool does)
    let row = rows[0];
    let m = Marker {
        producer_id: row.producer_id,
        producer_epoch: row.producer_epoch,
        coordinator_epoch: CoordinatorEpoch(row.coordinator_epoch.0.max(0)),
        result: TxnResult::Abort,
        txn_version: TxnVersion::V0,
    };
    let pending = p.check_marker(&m).expect("accepted");
    let at = p.next_offset();
    p.complete_marker(pending, at, 9_000).expect("recorded");
    p.advance_high_watermark(p.next_offset());
    let after = p.active_producers();
    assert_eq!(after[0].current_txn_start_offset, -1);
    assert_eq!(after[0].coordinator_epoch, CoordinatorEpoch(0));
    assert_eq!(after[0].last_timestamp_ms, 9_000);
    assert_eq!(p.last_stable_offset(), p.next_offset());
    // expired producers are no longer reported
    p.expire_producers(100_000, 1_000);
    assert!(p.active_producers().is_empty());
}

#[test]
fn last_timestamp_is_the_last_batchs_even_when_older_than_a_marker() {
    // Kafka's ProducerStateEntry.lastTimestamp is that of the last batch or marker, not the
    // largest seen: a transaction opened after an ABORT marker by a batch carrying an older
    // timestamp (a late Produce, a client clock behind) reports that older timestamp, which is
    // what `kafka-transactions.sh find-hanging` compares with its maximum transaction timeout.
    let mut p = state();
    let other = ProducerId(7);
    append(
        &mut p,
        BatchHeader::transactional(other, ProducerEpoch(1), 0, 1).with_max_timestamp_ms(2_000),
    );
    let m = Marker {
        producer_id: other,
        producer_epoch: ProducerEpoch(1),
        coordinator_epoch: CoordinatorEpoch(0),
        result: TxnResult::Abort,
        txn_version: TxnVersion::V0,
    };
    let pending = p.check_marker(&m).expect("accepted");
    let at = p.next_offset();
    p.complete_marker(pending, at, 50_000).expect("recorded");
    assert_eq!(p.active_producers()[0].last_timestamp_ms, 50_000);
    // the late batch of the same epoch, timestamped before the marker
    let late_at = p.next_offset();
    append(
        &mut p,
        BatchHeader::transactional(other, ProducerEpoch(1), 1, 1).with_max_timestamp_ms(3_000),
    );
    let row = p.active_producers()[0];
    assert_eq!(row.last_timestamp_ms, 3_000);
    assert_eq!(row.current_txn_start_offset, late_at);
}
