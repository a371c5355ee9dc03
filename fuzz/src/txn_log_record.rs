//! The `txn_log_record` harness: stored txn-log entries through the decoders recovery runs,
//! and what loads through the pure engine.

use coordinator::{
    AddPartitionsToTxnRequest, AddPartitionsTxn, Config, DescribeTransactionsRequest, Effect,
    EndTxnRequest, Engine, InitProducerIdRequest, ListTransactionsRequest, MarkerCompletion,
    MarkerOutcome, Millis, ProducerIdAllocator, Request, RequestId,
};
use txn_log::{CoordinatorEpoch, LogError, LogPartition, ProducerIdBlock, TopicPartition, codec};

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

/// Executes an engine's effects as the shell's driver does: appends succeed, markers are
/// written, producer-id blocks arrive, responses are dropped.
fn run_effects(
    engine: &mut Engine,
    now: Millis,
    allocator: &ProducerIdAllocator,
    next_block: &mut i64,
) {
    for _ in 0..10_000 {
        let Some(effect) = engine.poll_effect() else {
            return;
        };
        match effect {
            Effect::AppendLog { io, .. } => engine.handle_append_done(io),
            Effect::WriteMarkers(request) => engine.handle_markers_done(
                now,
                MarkerCompletion::of(&request, MarkerOutcome::Completed),
            ),
            Effect::NeedProducerIds { block_size } => {
                let block = ProducerIdBlock {
                    first: txn_log::ProducerId(*next_block),
                    len: block_size,
                };
                *next_block += i64::from(block_size);
                if allocator.add_block(block).is_err() {
                    allocator.refill_failed();
                }
            }
            _ => {}
        }
    }
    panic!("the engine produced more than 10 000 effects for one input");
}

fn load_into_engine(partition: LogPartition, config: &Config, loaded: txn_log::LoadedPartition) {
    let allocator = ProducerIdAllocator::with_block(ProducerIdBlock {
        first: txn_log::ProducerId(0),
        len: 1000,
    })
    .expect("block");
    let mut next_block = 1000;
    // Two-phase commit allowed, so that a record's KIP-939 state is exercised too.
    let config = Config {
        transaction_two_phase_commit_enable: true,
        ..config.clone()
    };
    let mut engine = Engine::new(partition, config, allocator.clone());
    let now = Millis(1_700_000_000_000);
    let epoch = CoordinatorEpoch(
        loaded
            .coordinator_epoch
            .map_or(1, |e| e.0.saturating_add(1)),
    );
    let ids: Vec<_> = loaded
        .records
        .iter()
        .map(|(id, r)| (id.clone(), r.clone()))
        .collect();
    engine.handle_load(now, epoch, loaded);
    run_effects(&mut engine, now, &allocator, &mut next_block);
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
    let mut req = 0u64;
    let mut send = |engine: &mut Engine, request: Request| {
        req += 1;
        engine.handle_request(now, RequestId(req), request);
        run_effects(engine, now, &allocator, &mut next_block);
    };
    for (id, r) in &ids {
        let raw = id.as_str().to_owned();
        send(
            &mut engine,
            Request::DescribeTransactions(DescribeTransactionsRequest {
                transactional_ids: vec![raw.clone()],
            }),
        );
        send(
            &mut engine,
            Request::AddPartitionsToTxn(AddPartitionsToTxnRequest {
                version: 3,
                transactions: vec![AddPartitionsTxn {
                    transactional_id: raw.clone(),
                    producer_id: r.producer_id,
                    producer_epoch: r.producer_epoch,
                    verify_only: false,
                    partitions: vec![TopicPartition::new("t", 0)],
                }],
            }),
        );
        // The record's producer, then a kept transaction's session (KIP-939) if it has one.
        let pairs = std::iter::once((r.producer_id, r.producer_epoch)).chain(r.session());
        for (producer_id, producer_epoch) in pairs {
            for version in [3, 5] {
                send(
                    &mut engine,
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
            &mut engine,
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
            &mut engine,
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
            &mut engine,
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
        let later = Millis(now.0 + step);
        engine.handle_timeout(later);
        run_effects(&mut engine, later, &allocator, &mut next_block);
    }
    let _ = engine.poll_timeout();
}
