//! The on-disk encoding of the log: keys and checksummed, versioned value envelopes.
//!
//! This is the only module that touches bincode, so the payload codec can be swapped without
//! touching anything else. The format is described in `docs/txn-log-format.md`.
//!
//! # Envelope
//!
//! ```text
//! offset  size  field
//! 0       1     kind      b'R' txn record, b'E' coordinator epoch, b'P' producer-id counter
//! 1       1     version   payload schema version of that kind (records 2, the others 1)
//! 2       4     len       payload length, u32 big-endian, <= MAX_PAYLOAD_LEN
//! 6       len   payload   bincode 2 (serde, config::standard(): varint integers)
//! 6+len   4     crc       CRC32C, big-endian, over key bytes ++ bytes [0, 6+len)
//! ```
//!
//! The CRC covers the key as well, so a value stored under the wrong key is detected.
//!
//! # Keys (one sled tree, order-preserving)
//!
//! ```text
//! b'r' ++ partition u32 BE ++ transactional id (UTF-8)   -> txn record envelope
//! b'e' ++ partition u32 BE                               -> coordinator epoch envelope
//! b"m:next_producer_id"                                  -> producer-id counter envelope
//! ```
//!
//! Every decoder returns [`LogError::Corrupt`] naming the partition and key on any bad input;
//! none panics (the checksum is verified before bincode runs, and bincode runs with an
//! allocation limit). A record that decodes but is no persistable state
//! ([`TxnRecord::check_persistable`]) is corrupt as well: the engine would refuse to replay it.

use std::collections::BTreeSet;

use crate::{
    CoordinatorEpoch, LoadedPartition, LogError, LogPartition, ProducerEpoch, ProducerId,
    TopicPartition, TransactionalId, TxnRecord, TxnState, TxnVersion,
};

/// Largest payload an envelope may carry (1 MiB, Kafka's default `max.message.bytes`).
pub const MAX_PAYLOAD_LEN: usize = 1 << 20;
/// Bytes an envelope adds around its payload (kind, version, length, crc).
pub const ENVELOPE_OVERHEAD: usize = HEADER_LEN + 4;
const HEADER_LEN: usize = 6;

/// Envelope kind byte of a transaction record.
pub const KIND_RECORD: u8 = b'R';
/// Envelope kind byte of a partition's coordinator epoch.
pub const KIND_EPOCH: u8 = b'E';
/// Envelope kind byte of the producer-id high-water mark.
pub const KIND_PRODUCER_ID: u8 = b'P';

/// Current payload version of [`KIND_RECORD`]: bincode of [`TxnRecord`] as defined now.
/// Version 1 (before KIP-939's two-phase commit) is still read, see [`RecordV1`].
pub const RECORD_VERSION: u8 = 2;
/// The first payload version of [`KIND_RECORD`], without the two-phase-commit fields.
pub const RECORD_VERSION_1: u8 = 1;
/// Current payload version of [`KIND_EPOCH`]: bincode of the `i32` epoch.
pub const EPOCH_VERSION: u8 = 1;
/// Current payload version of [`KIND_PRODUCER_ID`]: bincode of the `i64` next free id.
pub const PRODUCER_ID_VERSION: u8 = 1;

/// Key prefix of transaction records.
pub const RECORD_KEY_PREFIX: u8 = b'r';
/// Key prefix of coordinator epochs.
pub const EPOCH_KEY_PREFIX: u8 = b'e';
/// Key of the producer-id high-water mark (the next id never handed out).
pub const PRODUCER_ID_KEY: &[u8] = b"m:next_producer_id";

/// bincode configuration: varints, and a bound on what a decode may allocate.
fn config() -> impl bincode::config::Config {
    bincode::config::standard().with_limit::<MAX_PAYLOAD_LEN>()
}

// ===== keys =====

/// The key of `id`'s record in `partition`.
pub fn record_key(partition: LogPartition, id: &TransactionalId) -> Vec<u8> {
    let mut k = Vec::with_capacity(5 + id.as_str().len());
    k.extend_from_slice(&record_prefix(partition));
    k.extend_from_slice(id.as_str().as_bytes());
    k
}

/// The common prefix of every record key of `partition` (for a prefix scan).
pub fn record_prefix(partition: LogPartition) -> [u8; 5] {
    prefixed(RECORD_KEY_PREFIX, partition)
}

/// The key of `partition`'s coordinator epoch.
pub fn epoch_key(partition: LogPartition) -> [u8; 5] {
    prefixed(EPOCH_KEY_PREFIX, partition)
}

fn prefixed(tag: u8, partition: LogPartition) -> [u8; 5] {
    let p = partition.0.to_be_bytes();
    [tag, p[0], p[1], p[2], p[3]]
}

/// Splits a record key into partition and transactional id.
pub fn parse_record_key(key: &[u8]) -> Result<(LogPartition, TransactionalId), LogError> {
    let corrupt = |partition, reason: &str| LogError::Corrupt {
        partition,
        key: printable_key(key),
        reason: reason.into(),
    };
    let (head, id) = match key {
        [RECORD_KEY_PREFIX, a, b, c, d, rest @ ..] => (u32::from_be_bytes([*a, *b, *c, *d]), rest),
        _ => return Err(corrupt(None, "not a record key")),
    };
    let partition = LogPartition(head);
    let id = std::str::from_utf8(id)
        .map_err(|_| corrupt(Some(partition), "transactional id is not UTF-8"))?;
    let id =
        TransactionalId::new(id).map_err(|_| corrupt(Some(partition), "empty transactional id"))?;
    Ok((partition, id))
}

/// Splits an epoch key into its partition.
pub fn parse_epoch_key(key: &[u8]) -> Result<LogPartition, LogError> {
    match key {
        [EPOCH_KEY_PREFIX, a, b, c, d] => Ok(LogPartition(u32::from_be_bytes([*a, *b, *c, *d]))),
        _ => Err(LogError::Corrupt {
            partition: None,
            key: printable_key(key),
            reason: "not a coordinator epoch key".into(),
        }),
    }
}

/// A printable form of a raw key, as used in [`LogError::Corrupt`]: the transactional id for
/// record keys, `coordinator_epoch` for epoch keys, the name for the producer-id key, and an
/// escaped byte string otherwise.
pub fn printable_key(key: &[u8]) -> String {
    match key {
        [RECORD_KEY_PREFIX, _, _, _, _, id @ ..] => escape(id),
        [EPOCH_KEY_PREFIX, _, _, _, _] => "coordinator_epoch".into(),
        k if k == PRODUCER_ID_KEY => "next_producer_id".into(),
        k => escape(k),
    }
}

fn escape(bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        Ok(s) => s.to_owned(),
        Err(_) => bytes.escape_ascii().to_string(),
    }
}

// ===== envelope =====

/// Wraps `payload` in an envelope of `kind`/`version`, checksummed together with `key`.
fn seal(kind: u8, version: u8, key: &[u8], payload: &[u8]) -> Result<Vec<u8>, LogError> {
    if payload.len() > MAX_PAYLOAD_LEN {
        return Err(LogError::InvalidArgument(format!(
            "encoded value of {} bytes exceeds the {MAX_PAYLOAD_LEN}-byte limit",
            payload.len()
        )));
    }
    let len = u32::try_from(payload.len())
        .map_err(|_| LogError::InvalidArgument("encoded value too large".into()))?;
    let mut out = Vec::with_capacity(ENVELOPE_OVERHEAD + payload.len());
    out.push(kind);
    out.push(version);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(payload);
    let crc = crc32c::crc32c_append(crc32c::crc32c(key), &out);
    out.extend_from_slice(&crc.to_be_bytes());
    Ok(out)
}

/// Wraps arbitrary `payload` bytes in a correctly checksummed envelope of `kind`/`version`
/// under `key`, without checking that the payload decodes. For tools and fuzzing (the fuzz
/// target `txn_log_record` uses it to get past the checksum); the log itself writes values
/// only through [`encode_record`], [`encode_epoch`] and [`encode_next_producer_id`].
pub fn seal_value(kind: u8, version: u8, key: &[u8], payload: &[u8]) -> Result<Vec<u8>, LogError> {
    seal(kind, version, key, payload)
}

/// Verifies an envelope of `kind` stored under `key` and returns `(version, payload)`, or why
/// it is corrupt. For the other record spaces of the store (`crate::security`).
pub fn open_value<'a>(kind: u8, key: &[u8], value: &'a [u8]) -> Result<(u8, &'a [u8]), String> {
    open(kind, key, value)
}

/// Verifies an envelope of `kind` stored under `key` and returns `(version, payload)`.
fn open<'a>(kind: u8, key: &[u8], value: &'a [u8]) -> Result<(u8, &'a [u8]), String> {
    if value.len() < ENVELOPE_OVERHEAD {
        return Err(format!(
            "value of {} bytes is shorter than the {ENVELOPE_OVERHEAD}-byte envelope",
            value.len()
        ));
    }
    let (header, rest) = value.split_at(HEADER_LEN);
    let len = u32::from_be_bytes([header[2], header[3], header[4], header[5]]);
    let len = usize::try_from(len).map_err(|_| "payload length does not fit".to_string())?;
    if len > MAX_PAYLOAD_LEN {
        return Err(format!("payload length {len} exceeds the limit"));
    }
    if rest.len() != len + 4 {
        return Err(format!(
            "payload length {len} does not match the {} bytes stored",
            rest.len().saturating_sub(4)
        ));
    }
    let (payload, crc_bytes) = rest.split_at(len);
    let stored = u32::from_be_bytes([crc_bytes[0], crc_bytes[1], crc_bytes[2], crc_bytes[3]]);
    let computed = crc32c::crc32c_append(crc32c::crc32c(key), &value[..HEADER_LEN + len]);
    if stored != computed {
        return Err(format!(
            "checksum mismatch (stored {stored:#010x}, computed {computed:#010x})"
        ));
    }
    if header[0] != kind {
        return Err(format!(
            "envelope kind {:#04x}, expected {kind:#04x}",
            header[0]
        ));
    }
    Ok((header[1], payload))
}

/// Decodes a whole bincode payload (as [`encode_payload`] wrote it); trailing bytes are an error.
pub(crate) fn decode_payload<T: serde::de::DeserializeOwned>(payload: &[u8]) -> Result<T, String> {
    let (value, used) = bincode::serde::decode_from_slice::<T, _>(payload, config())
        .map_err(|e| format!("payload does not decode: {e}"))?;
    if used != payload.len() {
        return Err(format!(
            "payload has {} trailing bytes",
            payload.len() - used
        ));
    }
    Ok(value)
}

/// Encodes `value` as a bincode payload of at most [`MAX_PAYLOAD_LEN`] bytes.
pub(crate) fn encode_payload<T: serde::Serialize>(value: &T) -> Result<Vec<u8>, LogError> {
    bincode::serde::encode_to_vec(value, config())
        .map_err(|e| LogError::InvalidArgument(format!("value does not encode: {e}")))
}

// ===== typed values =====

/// Encodes `record` as the value stored under `key`.
pub fn encode_record(key: &[u8], record: &TxnRecord) -> Result<Vec<u8>, LogError> {
    seal(KIND_RECORD, RECORD_VERSION, key, &encode_payload(record)?)
}

/// Verifies and decodes the record stored under `key` in `partition`.
pub fn decode_record(
    partition: LogPartition,
    key: &[u8],
    value: &[u8],
) -> Result<TxnRecord, LogError> {
    let corrupt = |reason: String| LogError::Corrupt {
        partition: Some(partition),
        key: printable_key(key),
        reason,
    };
    let (version, payload) = open(KIND_RECORD, key, value).map_err(corrupt)?;
    let record: TxnRecord = match version {
        RECORD_VERSION => decode_payload(payload).map_err(corrupt)?,
        RECORD_VERSION_1 => decode_payload::<RecordV1>(payload).map_err(corrupt)?.into(),
        v => return Err(corrupt(format!("unknown record version {v}"))),
    };
    record.check_persistable().map_err(corrupt)?;
    Ok(record)
}

/// A [`KIND_RECORD`] payload of version 1, frozen: the fields of [`TxnRecord`] before KIP-939,
/// in their order. Its `next_producer_epoch` was never written other than -1.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RecordV1 {
    /// See [`TxnRecord::producer_id`].
    pub producer_id: ProducerId,
    /// See [`TxnRecord::prev_producer_id`].
    pub prev_producer_id: ProducerId,
    /// See [`TxnRecord::next_producer_id`].
    pub next_producer_id: ProducerId,
    /// See [`TxnRecord::producer_epoch`].
    pub producer_epoch: ProducerEpoch,
    /// See [`TxnRecord::last_producer_epoch`].
    pub last_producer_epoch: ProducerEpoch,
    /// Reserved, always -1; becomes [`TxnRecord::session_producer_epoch`].
    pub next_producer_epoch: ProducerEpoch,
    /// See [`TxnRecord::timeout_ms`].
    pub timeout_ms: i32,
    /// See [`TxnRecord::state`].
    pub state: TxnState,
    /// See [`TxnRecord::partitions`].
    pub partitions: BTreeSet<TopicPartition>,
    /// See [`TxnRecord::txn_start_ms`].
    pub txn_start_ms: i64,
    /// See [`TxnRecord::txn_last_update_ms`].
    pub txn_last_update_ms: i64,
    /// See [`TxnRecord::client_txn_version`].
    pub client_txn_version: TxnVersion,
}

impl From<RecordV1> for TxnRecord {
    /// A version-1 record is a record without two-phase commit and without a kept session.
    fn from(v1: RecordV1) -> Self {
        Self {
            producer_id: v1.producer_id,
            prev_producer_id: v1.prev_producer_id,
            next_producer_id: v1.next_producer_id,
            producer_epoch: v1.producer_epoch,
            last_producer_epoch: v1.last_producer_epoch,
            session_producer_id: ProducerId::NONE,
            session_producer_epoch: v1.next_producer_epoch,
            timeout_ms: v1.timeout_ms,
            state: v1.state,
            partitions: v1.partitions,
            txn_start_ms: v1.txn_start_ms,
            txn_last_update_ms: v1.txn_last_update_ms,
            client_txn_version: v1.client_txn_version,
            two_phase_commit: false,
        }
    }
}

/// Encodes a coordinator epoch as the value stored under `key`.
pub fn encode_epoch(key: &[u8], epoch: CoordinatorEpoch) -> Result<Vec<u8>, LogError> {
    seal(KIND_EPOCH, EPOCH_VERSION, key, &encode_payload(&epoch.0)?)
}

/// Verifies and decodes the coordinator epoch stored under `key` for `partition`.
pub fn decode_epoch(
    partition: LogPartition,
    key: &[u8],
    value: &[u8],
) -> Result<CoordinatorEpoch, LogError> {
    let corrupt = |reason: String| LogError::Corrupt {
        partition: Some(partition),
        key: printable_key(key),
        reason,
    };
    let (version, payload) = open(KIND_EPOCH, key, value).map_err(corrupt)?;
    match version {
        EPOCH_VERSION => decode_payload::<i32>(payload)
            .map(CoordinatorEpoch)
            .map_err(corrupt),
        v => Err(corrupt(format!("unknown coordinator epoch version {v}"))),
    }
}

/// Encodes the producer-id high-water mark (the next id never handed out).
pub fn encode_next_producer_id(next: i64) -> Result<Vec<u8>, LogError> {
    seal(
        KIND_PRODUCER_ID,
        PRODUCER_ID_VERSION,
        PRODUCER_ID_KEY,
        &encode_payload(&next)?,
    )
}

/// Verifies and decodes the producer-id high-water mark.
pub fn decode_next_producer_id(value: &[u8]) -> Result<i64, LogError> {
    let corrupt = |reason: String| LogError::Corrupt {
        partition: None,
        key: printable_key(PRODUCER_ID_KEY),
        reason,
    };
    let (version, payload) = open(KIND_PRODUCER_ID, PRODUCER_ID_KEY, value).map_err(corrupt)?;
    let next = match version {
        PRODUCER_ID_VERSION => decode_payload::<i64>(payload).map_err(corrupt)?,
        v => return Err(corrupt(format!("unknown producer id counter version {v}"))),
    };
    if next < 0 {
        return Err(corrupt(format!("negative next producer id {next}")));
    }
    Ok(next)
}

// ===== stored partitions and entries =====

/// Decodes one log partition as stored: `epoch` is the value under [`epoch_key`] (if any),
/// `records` the `(key, value)` pairs under [`record_prefix`] in key order. Every record key
/// must name `partition`. This is `SledTxnLog::load` without the store; the fuzz target
/// `txn_log_record` runs it on arbitrary entries.
pub fn decode_partition<K, V, I>(
    partition: LogPartition,
    epoch: Option<&[u8]>,
    records: I,
) -> Result<LoadedPartition, LogError>
where
    K: AsRef<[u8]>,
    V: AsRef<[u8]>,
    I: IntoIterator<Item = Result<(K, V), LogError>>,
{
    let coordinator_epoch = match epoch {
        Some(v) => Some(decode_epoch(partition, &epoch_key(partition), v)?),
        None => None,
    };
    let mut out = Vec::new();
    for kv in records {
        let (k, v) = kv?;
        let (p, id, record) = decode_record_entry(k.as_ref(), v.as_ref())?;
        if p != partition {
            return Err(LogError::Corrupt {
                partition: Some(partition),
                key: printable_key(k.as_ref()),
                reason: format!("record key names partition {p}"),
            });
        }
        out.push((id, record));
    }
    Ok(LoadedPartition {
        coordinator_epoch,
        records: out,
    })
}

/// Verifies and decodes one stored record: its partition and transactional id (from the key)
/// and the record.
pub fn decode_record_entry(
    key: &[u8],
    value: &[u8],
) -> Result<(LogPartition, TransactionalId, TxnRecord), LogError> {
    let (partition, id) = parse_record_key(key)?;
    Ok((partition, id, decode_record(partition, key, value)?))
}

/// Verifies one stored `(key, value)` pair of any kind (record, coordinator epoch,
/// producer-id counter); an unknown key is [`LogError::Corrupt`]. What
/// `SledTxnLog::verify_all` does for each entry.
pub fn verify_entry(key: &[u8], value: &[u8]) -> Result<(), LogError> {
    match key.first() {
        Some(&RECORD_KEY_PREFIX) => {
            let (p, _) = parse_record_key(key)?;
            decode_record(p, key, value).map(|_| ())
        }
        Some(&EPOCH_KEY_PREFIX) => {
            let p = parse_epoch_key(key)?;
            decode_epoch(p, key, value).map(|_| ())
        }
        _ if key == PRODUCER_ID_KEY => decode_next_producer_id(value).map(|_| ()),
        _ => Err(LogError::Corrupt {
            partition: None,
            key: printable_key(key),
            reason: "unknown key".into(),
        }),
    }
}

#[cfg(all(test, not(txn_loom)))]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn arb_record() -> impl Strategy<Value = TxnRecord> {
        (
            // Mostly real ids and epochs, so that most records are persistable states.
            (pid_or_none(), pid_or_none(), pid_or_none()),
            (epoch_or_none(), epoch_or_none(), epoch_or_none()),
            any::<i32>(),
            0usize..TxnState::ALL.len(),
            proptest::collection::btree_set(("[a-z._-]{1,20}", any::<i32>()), 0..20),
            (any::<i64>(), any::<i64>(), any::<u8>()),
            (pid_or_none(), any::<bool>()),
        )
            .prop_map(
                |(pids, epochs, timeout_ms, state, parts, (start, last, tv), (session, two_pc))| {
                    TxnRecord {
                        producer_id: ProducerId(pids.0),
                        prev_producer_id: ProducerId(pids.1),
                        next_producer_id: ProducerId(pids.2),
                        producer_epoch: ProducerEpoch(epochs.0),
                        last_producer_epoch: ProducerEpoch(epochs.1),
                        session_producer_id: ProducerId(session),
                        session_producer_epoch: ProducerEpoch(epochs.2),
                        two_phase_commit: two_pc,
                        timeout_ms,
                        state: TxnState::ALL[state],
                        partitions: parts
                            .into_iter()
                            .map(|(t, p)| TopicPartition::new(t, p))
                            .collect::<BTreeSet<_>>(),
                        txn_start_ms: start,
                        txn_last_update_ms: last,
                        client_txn_version: TxnVersion::from(tv),
                    }
                },
            )
    }

    fn pid_or_none() -> impl Strategy<Value = i64> {
        prop_oneof![4 => 0i64..1000, 1 => Just(-1i64), 1 => any::<i64>()]
    }

    fn epoch_or_none() -> impl Strategy<Value = i16> {
        prop_oneof![4 => 0i16.., 1 => Just(-1i16), 1 => any::<i16>()]
    }

    fn arb_id() -> impl Strategy<Value = TransactionalId> {
        "\\PC{1,40}".prop_map(|s| TransactionalId::new(s).unwrap())
    }

    proptest! {
        /// Every persistable record survives encode -> decode unchanged, under its own key;
        /// any other record is refused as Corrupt for the reason `check_persistable` gives.
        #[test]
        fn record_round_trips(rec in arb_record(), id in arb_id(), p in any::<u32>()) {
            let key = record_key(LogPartition(p), &id);
            let bytes = encode_record(&key, &rec).unwrap();
            match (rec.check_persistable(), decode_record(LogPartition(p), &key, &bytes)) {
                (Ok(()), decoded) => prop_assert_eq!(decoded.unwrap(), rec),
                (Err(why), Err(LogError::Corrupt { reason, .. })) => prop_assert_eq!(reason, why),
                (Err(why), other) => prop_assert!(false, "{why}: decoded as {other:?}"),
            }
            prop_assert_eq!(parse_record_key(&key).unwrap(), (LogPartition(p), id));
        }

        /// Epochs and the pid counter round-trip too.
        #[test]
        fn epoch_and_counter_round_trip(e in any::<i32>(), p in any::<u32>(), next in 0i64..) {
            let key = epoch_key(LogPartition(p));
            let bytes = encode_epoch(&key, CoordinatorEpoch(e)).unwrap();
            prop_assert_eq!(decode_epoch(LogPartition(p), &key, &bytes).unwrap(), CoordinatorEpoch(e));
            prop_assert_eq!(parse_epoch_key(&key).unwrap(), LogPartition(p));
            let bytes = encode_next_producer_id(next).unwrap();
            prop_assert_eq!(decode_next_producer_id(&bytes).unwrap(), next);
        }

        /// Flipping any bit of an encoded record is reported as Corrupt naming the key.
        #[test]
        fn any_bit_flip_is_detected(rec in arb_record(), bit in any::<prop::sample::Index>()) {
            let id = TransactionalId::new("flip").unwrap();
            let key = record_key(LogPartition(1), &id);
            let mut bytes = encode_record(&key, &rec).unwrap();
            let i = bit.index(bytes.len() * 8);
            bytes[i / 8] ^= 1 << (i % 8);
            match decode_record(LogPartition(1), &key, &bytes) {
                Err(LogError::Corrupt { partition, key, .. }) => {
                    prop_assert_eq!(partition, Some(LogPartition(1)));
                    prop_assert_eq!(key, "flip");
                }
                other => prop_assert!(false, "flip not detected: {:?}", other),
            }
        }

        /// Arbitrary bytes never panic any decoder; they are Corrupt (or, vanishingly rarely,
        /// a valid envelope).
        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256), key in proptest::collection::vec(any::<u8>(), 0..16)) {
            let _ = decode_record(LogPartition(0), &key, &bytes);
            let _ = decode_epoch(LogPartition(0), &key, &bytes);
            let _ = decode_next_producer_id(&bytes);
            let _ = parse_record_key(&key);
            let _ = parse_epoch_key(&key);
            let _ = printable_key(&key);
        }

        /// A correctly checksummed envelope around arbitrary payload bytes (the case the CRC
        /// cannot catch: a codec bug or a hostile writer) never panics bincode either, even
        /// with huge length prefixes inside the payload.
        #[test]
        fn sealed_garbage_never_panics(payload in proptest::collection::vec(any::<u8>(), 0..512), version in 0u8..3) {
            let key = record_key(LogPartition(0), &TransactionalId::new("g").unwrap());
            let bytes = seal(KIND_RECORD, version, &key, &payload).unwrap();
            let _ = decode_record(LogPartition(0), &key, &bytes);
            let ekey = epoch_key(LogPartition(0));
            let bytes = seal(KIND_EPOCH, version, &ekey, &payload).unwrap();
            let _ = decode_epoch(LogPartition(0), &ekey, &bytes);
        }
    }

    /// A record written before two-phase commit (payload version 1, its bytes spelled out)
    /// still loads: no 2PC, no kept session.
    #[test]
    fn a_version_1_record_decodes() {
        let key = record_key(LogPartition(3), &TransactionalId::new("old").unwrap());
        // producer id 7, prev -1, next -1, epoch 2, last 1, next epoch -1, timeout 60000,
        // Ongoing, {t-0}, start 10, last update 11, TV2 (bincode standard: zigzag varints).
        let payload: &[u8] = &[
            14, 1, 1, 4, 2, 1, 252, 192, 212, 1, 0, 1, 1, 1, b't', 0, 20, 22, 2,
        ];
        let old = RecordV1 {
            producer_id: ProducerId(7),
            prev_producer_id: ProducerId::NONE,
            next_producer_id: ProducerId::NONE,
            producer_epoch: ProducerEpoch(2),
            last_producer_epoch: ProducerEpoch(1),
            next_producer_epoch: ProducerEpoch::NONE,
            timeout_ms: 60_000,
            state: TxnState::Ongoing,
            partitions: [TopicPartition::new("t", 0)].into_iter().collect(),
            txn_start_ms: 10,
            txn_last_update_ms: 11,
            client_txn_version: TxnVersion::V2,
        };
        assert_eq!(
            encode_payload(&old).unwrap(),
            payload,
            "the frozen v1 layout"
        );
        let bytes = seal(KIND_RECORD, RECORD_VERSION_1, &key, payload).unwrap();
        let record = decode_record(LogPartition(3), &key, &bytes).unwrap();
        assert_eq!(record, TxnRecord::from(old));
        assert!(!record.two_phase_commit);
        assert_eq!(record.session(), None);
        // Written again, it is a version-2 record that reads back the same.
        let again = encode_record(&key, &record).unwrap();
        assert_eq!(again[1], RECORD_VERSION);
        assert_eq!(
            decode_record(LogPartition(3), &key, &again).unwrap(),
            record
        );
    }

    #[test]
    fn unknown_version_is_corrupt() {
        let key = epoch_key(LogPartition(7));
        let payload = encode_payload(&5i32).unwrap();
        let bytes = seal(KIND_EPOCH, 9, &key, &payload).unwrap();
        let err = decode_epoch(LogPartition(7), &key, &bytes).unwrap_err();
        assert!(
            matches!(&err, LogError::Corrupt { reason, .. } if reason.contains("version 9")),
            "{err:?}"
        );
    }

    #[test]
    fn value_under_another_key_is_corrupt() {
        let a = epoch_key(LogPartition(1));
        let b = epoch_key(LogPartition(2));
        let bytes = encode_epoch(&a, CoordinatorEpoch(3)).unwrap();
        assert!(decode_epoch(LogPartition(2), &b, &bytes).is_err());
    }

    #[test]
    fn huge_sequence_length_in_payload_does_not_allocate() {
        // A record payload whose partition-set length prefix claims u64::MAX entries.
        // Three pids, two epochs, the session's pid and epoch, timeout, state: all varint 0.
        let mut payload = vec![0u8; 9];
        payload.push(253); // bincode varint marker: a u64 follows
        payload.extend_from_slice(&u64::MAX.to_le_bytes());
        let key = record_key(LogPartition(0), &TransactionalId::new("x").unwrap());
        let bytes = seal(KIND_RECORD, RECORD_VERSION, &key, &payload).unwrap();
        assert!(matches!(
            decode_record(LogPartition(0), &key, &bytes),
            Err(LogError::Corrupt { .. })
        ));
    }

    #[test]
    fn keys_sort_by_partition_then_id() {
        let a = record_key(LogPartition(1), &TransactionalId::new("zz").unwrap());
        let b = record_key(LogPartition(2), &TransactionalId::new("aa").unwrap());
        let c = record_key(LogPartition(256), &TransactionalId::new("aa").unwrap());
        assert!(a < b && b < c);
        assert!(a.starts_with(&record_prefix(LogPartition(1))));
    }
}
