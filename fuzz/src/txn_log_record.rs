//! The `txn_log_record` harness: stored txn-log entries through the decoders recovery runs,
//! and what loads through the pure engine.

use coordinator::testing::{EngineHarness, Markers};
use coordinator::{
    AddPartitionsToTxnRequest, Config, DescribeTransactionsRequest, EndTxnRequest,
    InitProducerIdRequest, ListTransactionsRequest, Millis, ProducerIdAllocator, Request,
};
use txn_log::{
    CoordinatorEpoch, LogEntry, LogError, LogOp, LogPartition, MemTxnLog, TopicPartition, codec,
};

/// One stored entry of a `txn_log_record` input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredEntry {
    /// In sealed mode, which envelope the harness wraps `value` in: kind `[R, E, P][tag % 3]`,
    /// version `tag / 3 % 4` (2 is the current version of records, 1 of the other kinds). Ignored in raw mode.
    pub tag: u8,
    /// The stored key.
    pub key: Vec<u8>,
    /// The stored value (raw mode) or the envelope's payload (sealed mode).
    pub value: Vec<u8>,
}

/// A `txn_log_record` input: `[mode] ([tag] [key len u8] [key] [value len u16 BE] [value])*`.
/// Mode bit 0: sealed (the harness seals each value with [`codec::seal_value`] so that the
/// payload reaches bincode); bits 1..: number of log partitions minus one (mod 8).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredLog {
    /// Seal values (mode bit 0).
    pub sealed: bool,
    /// Number of log partitions of the engine config, 1..=8.
    pub partitions: u32,
    /// The entries, in input order.
    pub entries: Vec<StoredEntry>,
}

impl StoredLog {
    /// Parses an input; a truncated last entry is dropped.
    pub fn parse(data: &[u8]) -> Self {
        let (&mode, mut rest) = data.split_first().unwrap_or((&0, &[]));
        let mut entries = Vec::new();
        while let [tag, klen, tail @ ..] = rest {
            let klen = usize::from(*klen);
            if tail.len() < klen + 2 {
                break;
            }
            let (key, tail) = tail.split_at(klen);
            let vlen = usize::from(u16::from_be_bytes([tail[0], tail[1]]));
            let tail = &tail[2..];
            if tail.len() < vlen {
                break;
            }
            let (value, tail) = tail.split_at(vlen);
            entries.push(StoredEntry {
                tag: *tag,
                key: key.to_vec(),
                value: value.to_vec(),
            });
            rest = tail;
        }
        Self {
            sealed: mode & 1 == 1,
            partitions: 1 + u32::from(mode >> 1) % 8,
            entries,
        }
    }

    /// Encodes the input format ([`StoredLog::parse`] reads it back). Keys over 255 and
    /// values over 65 535 bytes are truncated.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![u8::from(self.sealed) | (((self.partitions.max(1) - 1) as u8 % 8) << 1)];
        for e in &self.entries {
            let key = &e.key[..e.key.len().min(255)];
            let value = &e.value[..e.value.len().min(65_535)];
            out.push(e.tag);
            out.push(key.len() as u8);
            out.extend_from_slice(key);
            out.extend_from_slice(&(value.len() as u16).to_be_bytes());
            out.extend_from_slice(value);
        }
        out
    }
}

/// `txn_log_record`: every entry through [`codec::verify_entry`] (what `verify_all` runs),
/// the epoch and producer-id keys through the decoders `SledTxnLog::open` runs, and each
/// partition's records (in key order, as sled returns them) through [`codec::decode_partition`]
/// (what `SledTxnLog::load` runs). A partition that loads is then given to a pure [`Engine`]
/// (`handle_load`, as the shell's driver does), whose effects are executed, and which is asked
/// to describe and list its transactions, to end and re-initialise each loaded one, and to
/// time them out.
pub fn txn_log_record(data: &[u8]) {
    let input = StoredLog::parse(data);
    let mut entries: Vec<(Vec<u8>, Vec<u8>)> = Vec::with_capacity(input.entries.len());
    for e in &input.entries {
        let value = if input.sealed {
            let kind = [
                codec::KIND_RECORD,
                codec::KIND_EPOCH,
                codec::KIND_PRODUCER_ID,
            ][usize::from(e.tag % 3)];
            codec::seal_value(kind, e.tag / 3 % 4, &e.key, &e.value)
                .expect("payload within the limit")
        } else {
            e.value.clone()
        };
        let _ = codec::verify_entry(&e.key, &value);
        let _ = codec::printable_key(&e.key);
        if e.key.first() == Some(&codec::EPOCH_KEY_PREFIX)
            && let Ok(p) = codec::parse_epoch_key(&e.key)
        {
            let _ = codec::decode_epoch(p, &e.key, &value);
        }
        if e.key == codec::PRODUCER_ID_KEY {
            let _ = codec::decode_next_producer_id(&value);
        }
        entries.push((e.key.clone(), value));
    }
    // sled: one value per key (the last write wins), iterated in key order.
    entries.reverse();
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    entries.dedup_by(|a, b| a.0 == b.0);

    let config = Config {
        transaction_state_log_num_partitions: input.partitions,
        ..Config::default()
    };
    for p in 0..input.partitions {
        let partition = LogPartition(p);
        let ekey = codec::epoch_key(partition);
        let epoch = entries
            .iter()
            .find(|(k, _)| k[..] == ekey[..])
            .map(|(_, v)| &v[..]);
        let prefix = codec::record_prefix(partition);
        let records = entries
            .iter()
            .filter(|(k, _)| k.starts_with(&prefix))
            .map(|(k, v)| Ok::<_, LogError>((k, v)));
        // As the shell's load does: decode, then refuse ids routed to another partition.
        if let Ok(loaded) = codec::decode_partition(partition, epoch, records)
            && config.check_loaded(partition, &loaded).is_ok()
        {
            load_into_engine(partition, &config, loaded);
        }
    }
}

fn load_into_engine(partition: LogPartition, config: &Config, loaded: txn_log::LoadedPartition) {
    // The decoded partition is written to a log, from which a coordinator at the next epoch
    // loads it; its effects are executed as the shell's driver does (appends written, markers
    // acknowledged, producer-id blocks from the log, responses dropped).
    let log = MemTxnLog::new();
    let stored = loaded.coordinator_epoch.unwrap_or(CoordinatorEpoch(0));
    let epoch = CoordinatorEpoch(stored.0.saturating_add(1));
    let ids = loaded.records;
    log.claim_sync(partition, stored).expect("claim");
    let entries = ids
        .iter()
        .map(|(id, r)| LogEntry {
            id: id.clone(),
            op: LogOp::Upsert(r.clone()),
        })
        .collect();
    log.append_sync(partition, stored, entries)
        .expect("records written");
    let (block, _) = log
        .allocate_block_sync(1000, txn_log::ProducerId(0))
        .expect("block");
    let allocator = ProducerIdAllocator::with_block(block).expect("block");
    // Two-phase commit allowed, so that a record's KIP-939 state is exercised too.
    let config = Config {
        transaction_two_phase_commit_enable: true,
        ..config.clone()
    };
    let now = Millis(1_700_000_000_000);
    let mut h = EngineHarness::new(log, partition, config, allocator)
        .with_markers(Markers::AckAtOnce)
        .with_now(now);
    h.load(epoch).expect("load");
    h.drive();
    let engine = h.engine();
    let _ = engine.describe("");
    for (id, _) in &ids {
        let _ = engine.describe(id.as_str());
    }
    let _ = engine.list_transactions(
        now,
        &ListTransactionsRequest {
            state_filters: Vec::new(),
            producer_id_filters: Vec::new(),
            duration_filter_ms: 0,
            transactional_id_pattern: None,
        },
    );
    let send = |h: &mut EngineHarness, request: Request| {
        h.request(request);
        h.drive();
    };
    for (id, r) in &ids {
        let raw = id.as_str().to_owned();
        send(
            &mut h,
            Request::DescribeTransactions(DescribeTransactionsRequest {
                transactional_ids: vec![raw.clone()],
            }),
        );
        send(
            &mut h,
            Request::AddPartitionsToTxn(AddPartitionsToTxnRequest::add(
                3,
                &raw,
                r.producer_id,
                r.producer_epoch,
                &[TopicPartition::new("t", 0)],
            )),
        );
        // The record's producer, then a kept transaction's session (KIP-939) if it has one.
        let pairs = std::iter::once((r.producer_id, r.producer_epoch)).chain(r.session());
        for (producer_id, producer_epoch) in pairs {
            for version in [3, 5] {
                send(
                    &mut h,
                    Request::EndTxn(EndTxnRequest {
                        version,
                        transactional_id: raw.clone(),
                        producer_id,
                        producer_epoch,
                        committed: r.state.id() % 2 == 0,
                    }),
                );
            }
        }
        send(
            &mut h,
            Request::InitProducerId(InitProducerIdRequest {
                version: 6,
                transactional_id: Some(raw.clone()),
                transaction_timeout_ms: 60_000,
                producer_id: txn_log::ProducerId::NONE,
                producer_epoch: txn_log::ProducerEpoch::NONE,
                enable_2pc: true,
                keep_prepared_txn: true,
            }),
        );
        send(
            &mut h,
            Request::InitProducerId(InitProducerIdRequest {
                version: 5,
                transactional_id: Some(raw.clone()),
                transaction_timeout_ms: 60_000,
                producer_id: r.producer_id,
                producer_epoch: r.producer_epoch,
                enable_2pc: false,
                keep_prepared_txn: false,
            }),
        );
        send(
            &mut h,
            Request::InitProducerId(InitProducerIdRequest {
                version: 4,
                transactional_id: Some(raw),
                transaction_timeout_ms: 60_000,
                producer_id: txn_log::ProducerId::NONE,
                producer_epoch: txn_log::ProducerEpoch::NONE,
                enable_2pc: false,
                keep_prepared_txn: false,
            }),
        );
    }
    // Time passes: reaping of timed-out transactions and expiry of idle ids.
    for step in [1_000, 3_600_000, 86_400_000 * 30] {
        h.advance(now.0 + step - h.now().0);
        h.drive();
    }
    let _ = h.engine().poll_timeout();
}
