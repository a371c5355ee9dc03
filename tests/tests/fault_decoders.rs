//! Stable-toolchain randomized decoding of produce record batches: random bytes and
//! mutations of valid transactional / control batches go through
//! `markers::participant::BatchHeader::parse`, `LogBatch::read_all`, kafka-protocol's
//! `RecordBatchDecoder` (`decode_batch_info`, `decode_all`) and the fault clients'
//! read_committed filter. Nothing may panic; huge length and count fields (batch length,
//! record count, varint record / key / value / header lengths) in small buffers must be
//! refused, not allocated (an allocation of what they claim would abort the test process).
//! Mutations recompute the CRC so that they reach the record decoder, not just the checksum.
//!
//! `TXN_FAULT_SEED` replays a run; each case prints nothing unless it fails.

use std::panic::{AssertUnwindSafe, catch_unwind};

use bytes::{Bytes, BytesMut};
use kafka_protocol::records::RecordBatchDecoder;
use markers::participant::{BatchHeader, LogBatch};
use txn_testkit::wire::record_batch;
use txn_tests::fault::client::filter_read_committed;
use txn_tests::fault::workload::{Rng, seed_from_env};

/// Recomputes the v2 CRC (crc32c of bytes 21.., stored at 17..21) if the buffer is long enough.
fn fix_crc(b: &mut [u8]) {
    if b.len() >= 61 {
        let crc = crc32c::crc32c(&b[21..]);
        b[17..21].copy_from_slice(&crc.to_be_bytes());
    }
}

fn decode_everything(bytes: &Bytes) {
    let _ = BatchHeader::parse(bytes);
    for b in LogBatch::read_all(bytes.clone()).take(64) {
        if b.is_err() {
            break;
        }
    }
    let mut a = bytes.clone();
    let _ = RecordBatchDecoder::decode_batch_info(&mut a);
    let mut c = bytes.clone();
    let _ = RecordBatchDecoder::decode_all(&mut c);
    let _ = filter_read_committed(bytes, &[(1, 0), (7, 3)], 0);
}

fn seed_batches(rng: &mut Rng) -> Vec<Vec<u8>> {
    let n = 1 + rng.below(5) as usize;
    let values: Vec<String> = (0..n)
        .map(|i| format!("value-{i}-{}", rng.below(1000)))
        .collect();
    let txn = record_batch(Some((7, 3, 0)), true, &values).to_vec();
    let idem = record_batch(Some((9, 0, 5)), false, &values[..1]).to_vec();
    let mut two = txn.clone();
    two.extend_from_slice(&idem);
    vec![txn, idem, two]
}

const HUGE: [u32; 5] = [
    0x7fff_ffff,
    0xffff_ffff,
    0x8000_0000,
    0x0100_0000,
    0xffff_fff0,
];

fn mutate(rng: &mut Rng, mut b: Vec<u8>) -> Vec<u8> {
    if b.len() < 61 {
        // already truncated: only byte-level changes
        if let Some(x) = b.last_mut() {
            *x ^= 0x80;
        }
        return b;
    }
    match rng.below(7) {
        // flip bytes
        0 => {
            for _ in 0..1 + rng.below(8) {
                let i = rng.below(b.len() as u64) as usize;
                b[i] ^= 1 << rng.below(8);
            }
        }
        // a huge 32-bit field at a header position that holds a length or count
        1 => {
            let at = [8usize, 23, 57][rng.below(3) as usize];
            let v = HUGE[rng.below(HUGE.len() as u64) as usize];
            b[at..at + 4].copy_from_slice(&v.to_be_bytes());
        }
        // a huge varint somewhere in the records section
        2 if b.len() > 62 => {
            let i = 61 + rng.below((b.len() - 61) as u64) as usize;
            let varint = [0xfe, 0xff, 0xff, 0xff, 0x0f];
            let end = (i + varint.len()).min(b.len());
            b[i..end].copy_from_slice(&varint[..end - i]);
        }
        // truncate
        3 => {
            let keep = rng.below(b.len() as u64) as usize;
            b.truncate(keep);
        }
        // random attributes (compression codecs, control bit, timestamp type)
        4 => {
            b[21] = rng.below(256) as u8;
            b[22] = rng.below(256) as u8;
        }
        // append garbage
        5 => {
            for _ in 0..rng.below(64) {
                b.push(rng.below(256) as u8);
            }
        }
        // random magic
        _ => b[16] = rng.below(256) as u8,
    }
    if rng.chance(0.8) {
        fix_crc(&mut b);
    }
    b
}

#[test]
fn random_and_mutated_record_batches_never_panic_or_allocate_what_they_claim() {
    let seed = seed_from_env();
    println!("decoder fuzz seed: {seed} (replay with TXN_FAULT_SEED={seed})");
    let mut rng = Rng::new(seed);
    let mut cases = 0u32;
    for round in 0..4000u32 {
        let mut inputs: Vec<Vec<u8>> = Vec::new();
        // pure random, short and long
        let len = rng.below(200) as usize;
        inputs.push((0..len).map(|_| rng.below(256) as u8).collect());
        for b in seed_batches(&mut rng) {
            inputs.push(mutate(&mut rng, b.clone()));
            let twice = mutate(&mut rng, b);
            inputs.push(mutate(&mut rng, twice));
        }
        for input in inputs {
            cases += 1;
            let bytes = Bytes::from(input);
            let r = catch_unwind(AssertUnwindSafe(|| decode_everything(&bytes)));
            assert!(
                r.is_ok(),
                "seed {seed} round {round}: panic on {:02x?}",
                &bytes[..bytes.len().min(128)]
            );
        }
    }
    assert!(cases > 10_000);
}

#[test]
fn valid_batches_still_decode_and_filter_as_expected() {
    // The harness must not pass because everything is rejected.
    let values = vec!["a".to_owned(), "b".to_owned()];
    let b = record_batch(Some((7, 3, 0)), true, &values);
    let (h, len) = BatchHeader::parse(&b).expect("valid batch");
    assert_eq!(len, b.len());
    assert_eq!(h.record_count, 2);
    let (delivered, next) = filter_read_committed(&b, &[], 0).expect("decodes");
    assert_eq!(delivered.len(), 2);
    assert_eq!(next, 2);
    // the same batch from an aborted producer is filtered
    let (delivered, _) = filter_read_committed(&b, &[(7, 0)], 0).expect("decodes");
    assert!(delivered.is_empty());
    // a huge record count with a fixed CRC is refused
    let mut m = b.to_vec();
    m[57..61].copy_from_slice(&0x7fff_ffffu32.to_be_bytes());
    fix_crc(&mut m);
    let m = Bytes::from(m);
    assert!(RecordBatchDecoder::decode_all(&mut m.clone()).is_err());
    let mut buf = BytesMut::new();
    buf.extend_from_slice(&m);
    decode_everything(&buf.freeze());
}
