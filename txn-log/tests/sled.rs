//! `SledTxnLog`-specific tests: what the generic suite cannot see.
//!
//! - crash consistency with a real process killed by SIGKILL at random moments;
//! - the coordinator-epoch fence survives reopen;
//! - corruption of a stored value or its envelope is reported as `Corrupt` naming the key;
//! - producer-id blocks never overlap across reopen and crash;
//! - a failed fsync poisons the log; group-commit bounds and counters.
#![cfg(feature = "sled")]

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use crash_record::expected_record;
use txn_log::codec;
use txn_log::mem::block_on;
use txn_log::rng::Rng;
use txn_log::suite::{assert_disjoint, join_all, record, tid};
use txn_log::{
    CoordinatorEpoch, LogEntry, LogError, LogPartition, ProducerId, ProducerIdBlock, SledConfig,
    SledTxnLog, SyncMode, TxnLog, TxnRecord, TxnState,
};

#[path = "../src/bin/crash_writer/record.rs"]
mod crash_record;

const P: LogPartition = LogPartition(0);

/// Appends one upsert of `id` (record `r`) to [`P`] at coordinator epoch `epoch`.
fn upsert_one(log: &SledTxnLog, epoch: i32, id: &str, r: TxnRecord) -> Result<(), LogError> {
    block_on(log.append(
        P,
        CoordinatorEpoch(epoch),
        vec![LogEntry::upsert(tid(id), r)],
    ))
}

/// What one child printed before it was killed.
#[derive(Default)]
struct ChildLog {
    claimed: Option<i32>,
    /// (writer, seq) acknowledged.
    acks: Vec<(i64, i64)>,
    blocks: Vec<ProducerIdBlock>,
}

fn parse_child_output(lines: &[String], cycle: i64) -> ChildLog {
    let mut out = ChildLog::default();
    for line in lines {
        let f: Vec<&str> = line.split_whitespace().collect();
        match f.as_slice() {
            ["claimed", e] => out.claimed = Some(e.parse().unwrap()),
            ["ack", c, w, s] => {
                assert_eq!(c.parse::<i64>().unwrap(), cycle);
                out.acks.push((w.parse().unwrap(), s.parse().unwrap()));
            }
            ["block", first, len] => out.blocks.push(ProducerIdBlock {
                first: ProducerId(first.parse().unwrap()),
                len: len.parse().unwrap(),
            }),
            // A line cut by the kill is never printed as an ack: `println!` writes it whole,
            // but the last line may lack its newline; it then only counts as unacknowledged.
            _ => {}
        }
    }
    out
}

/// Every acknowledged write of a child killed with SIGKILL at a random moment is present
/// after reopen, every batch is all-or-nothing with exact contents (nothing torn), the
/// per-writer overwrite is at least as new as the last ack, the claim persisted, stale
/// epochs stay fenced after reopen, and producer-id blocks never overlap across crashes; odd
/// cycles reopen with `SledConfig::preload` (the recovered log read at open).
#[test]
fn acknowledged_writes_survive_sigkill_and_nothing_is_torn() {
    let seed = 0x7a3c_19e5_u64;
    eprintln!("crash test seed {seed:#x}");
    let mut rng = Rng::new(seed);
    let dir = tempfile::tempdir().unwrap();
    let writers = 4;
    let cycles = 30;
    let mut all_blocks: Vec<ProducerIdBlock> = Vec::new();
    let mut total_acks = 0usize;
    for cycle in 0..cycles {
        let mut child = Command::new(env!("CARGO_BIN_EXE_txn-log-crash-writer"))
            .arg(dir.path())
            .arg(cycle.to_string())
            .arg(writers.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (first_tx, first_rx) = std::sync::mpsc::channel::<()>();
        let reader = std::thread::spawn(move || {
            let mut lines = Vec::new();
            let mut first_tx = Some(first_tx);
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(tx) = first_tx.take() {
                    let _ = tx.send(());
                }
                lines.push(line);
            }
            lines
        });
        // Hang guard only (the child prints `claimed` right after opening).
        first_rx
            .recv_timeout(Duration::from_secs(20))
            .expect("child did not start");
        std::thread::sleep(Duration::from_millis(5 + rng.next_u64() % 150));
        child.kill().unwrap(); // SIGKILL on Unix
        child.wait().unwrap();
        let lines = reader.join().unwrap();
        let out = parse_child_output(&lines, cycle);
        let epoch = i32::try_from(cycle + 1).unwrap();
        assert_eq!(out.claimed, Some(epoch), "cycle {cycle}");
        total_acks += out.acks.len();

        // Odd cycles read the recovered log at open, as the daemon does.
        let mut config = SledConfig::new(dir.path());
        config.preload = cycle % 2 == 1;
        let log = SledTxnLog::open(config).unwrap();
        let loaded = block_on(log.load(P)).unwrap();
        assert_eq!(loaded.coordinator_epoch, Some(CoordinatorEpoch(epoch)));
        let records: BTreeMap<String, TxnRecord> = loaded
            .records
            .into_iter()
            .map(|(id, r)| (id.as_str().to_owned(), r))
            .collect();
        // Acknowledged batches are there, exactly.
        for &(w, seq) in &out.acks {
            let base = (cycle * 1_000 + w) * 1_000_000 + seq * 3;
            for k in 0..3 {
                let id = format!("c{cycle}-w{w}-{seq}-{k}");
                assert_eq!(
                    records.get(&id),
                    Some(&expected_record(base + k)),
                    "cycle {cycle}: acknowledged {id} missing or wrong (seed {seed:#x})"
                );
            }
        }
        // Nothing torn: every batch of this cycle is complete and exact, acked or not.
        let mut groups: BTreeMap<(i64, i64), BTreeSet<i64>> = BTreeMap::new();
        for (id, rec) in &records {
            let Some(rest) = id.strip_prefix(&format!("c{cycle}-w")) else {
                continue;
            };
            let f: Vec<i64> = rest.split('-').map(|x| x.parse().unwrap()).collect();
            let [w, seq, k] = f[..] else {
                panic!("bad id {id}")
            };
            let base = (cycle * 1_000 + w) * 1_000_000 + seq * 3;
            assert_eq!(rec, &expected_record(base + k), "torn record {id}");
            groups.entry((w, seq)).or_default().insert(k);
        }
        for ((w, seq), ks) in &groups {
            assert_eq!(
                ks.len(),
                3,
                "cycle {cycle}: batch w{w} seq {seq} is partial: {ks:?}"
            );
        }
        // The per-writer overwrite is at least as new as the last ack, and its batch landed.
        for w in 0..writers {
            if let Some(max_seq) = out.acks.iter().filter(|a| a.0 == w).map(|a| a.1).max() {
                let last = &records[&format!("w{w}-last")];
                assert!(
                    last.producer_id.0 >= max_seq,
                    "w{w}-last older than its last ack"
                );
                assert_eq!(last, &expected_record(last.producer_id.0));
                assert!(groups.contains_key(&(w, last.producer_id.0)));
            }
        }
        // Producer ids: the parent's next block lies above every block the child was given.
        let next = block_on(log.allocate_block(10, ProducerId(0))).unwrap();
        for b in &out.blocks {
            assert!(
                next.first.0 >= b.end(),
                "reused producer ids: {b:?} then {next:?}"
            );
        }
        all_blocks.extend(out.blocks);
        all_blocks.push(next);
        assert_disjoint(&all_blocks);
        // Fencing after reopen: the previous epoch is stale.
        let stale = CoordinatorEpoch(epoch - 1);
        assert!(block_on(log.claim(P, stale)).unwrap_err().is_fenced());
        assert!(
            block_on(log.append(P, stale, Vec::new()))
                .unwrap_err()
                .is_fenced()
        );
        drop(log);
    }
    let log = SledTxnLog::open_path(dir.path()).unwrap();
    assert!(log.verify_all().unwrap() > 0);
    eprintln!("{cycles} kills, {total_acks} acknowledged batches checked");
    assert!(total_acks > 0, "no child ever acknowledged a write");
}

/// Claim and append fences hold across close and reopen.
#[test]
fn fencing_holds_after_reopen() {
    let dir = tempfile::tempdir().unwrap();
    {
        let log = SledTxnLog::open_path(dir.path()).unwrap();
        block_on(log.claim(P, CoordinatorEpoch(3))).unwrap();
        upsert_one(&log, 3, "a", record(1, TxnState::Empty, 0)).unwrap();
    }
    {
        let fenced_by_3 = |e: &LogError| {
            matches!(
                e,
                LogError::Fenced {
                    current: CoordinatorEpoch(3),
                    ..
                }
            )
        };
        let log = SledTxnLog::open_path(dir.path()).unwrap();
        let err = block_on(log.claim(P, CoordinatorEpoch(2))).unwrap_err();
        assert!(fenced_by_3(&err), "{err:?}");
        let err = block_on(log.append(P, CoordinatorEpoch(2), vec![LogEntry::tombstone(tid("a"))]))
            .unwrap_err();
        assert!(fenced_by_3(&err), "{err:?}");
        let err = block_on(log.append(P, CoordinatorEpoch(4), Vec::new())).unwrap_err();
        assert!(matches!(err, LogError::NotClaimed { .. }), "{err:?}");
        upsert_one(&log, 3, "b", record(2, TxnState::Empty, 0)).unwrap();
        block_on(log.claim(P, CoordinatorEpoch(4))).unwrap();
    }
    let log = SledTxnLog::open_path(dir.path()).unwrap();
    assert!(
        block_on(log.append(P, CoordinatorEpoch(3), Vec::new()))
            .unwrap_err()
            .is_fenced()
    );
    let loaded = block_on(log.load(P)).unwrap();
    assert_eq!(loaded.coordinator_epoch, Some(CoordinatorEpoch(4)));
    assert_eq!(loaded.records.len(), 2);
}

/// A change to a raw stored value.
type Mutation = dyn Fn(&mut Vec<u8>);

/// Opens the raw sled database, waiting (bounded) for a just-dropped instance to release its
/// file lock (sled releases it after its deferred destruction).
fn raw_open(dir: &Path) -> sled::Db {
    for _ in 0..500 {
        match sled::open(dir) {
            Ok(db) => return db,
            Err(e) if e.to_string().contains("could not acquire lock") => {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => panic!("raw sled open: {e}"),
        }
    }
    panic!("sled lock still held after 5 s");
}

/// Applies `f` to the raw value stored under `key`, through sled directly.
fn tamper(dir: &Path, key: &[u8], f: impl FnOnce(&mut Vec<u8>)) {
    let db = raw_open(dir);
    let tree = db.open_tree("txn-log").unwrap();
    let mut v = tree.get(key).unwrap().expect("key present").to_vec();
    f(&mut v);
    tree.insert(key, v).unwrap();
    db.flush().unwrap();
}

fn raw_get(dir: &Path, key: &[u8]) -> Vec<u8> {
    let db = raw_open(dir);
    let tree = db.open_tree("txn-log").unwrap();
    tree.get(key).unwrap().expect("key present").to_vec()
}

/// Flipping bytes of a stored record's payload or of any envelope field (kind, version,
/// length, checksum), or truncating it, makes `load` report `Corrupt` naming partition and
/// key; a corrupt epoch or producer-id counter fails `open` the same way.
#[test]
fn corruption_is_reported_with_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let p = LogPartition(5);
    {
        let log = SledTxnLog::open_path(dir.path()).unwrap();
        block_on(log.claim(p, CoordinatorEpoch(1))).unwrap();
        block_on(log.append(
            p,
            CoordinatorEpoch(1),
            vec![
                LogEntry::upsert(tid("good"), record(1, TxnState::Empty, 0)),
                LogEntry::upsert(tid("victim"), record(2, TxnState::Ongoing, 4)),
            ],
        ))
        .unwrap();
        block_on(log.allocate_block(10, ProducerId(0))).unwrap();
    }
    let key = codec::record_key(p, &tid("victim"));
    let original = raw_get(dir.path(), &key);
    let len = original.len();
    let cases: Vec<(&str, Box<Mutation>)> = vec![
        ("payload byte", Box::new(|v: &mut Vec<u8>| v[8] ^= 0x40)),
        ("kind byte", Box::new(|v: &mut Vec<u8>| v[0] ^= 0x01)),
        ("version byte", Box::new(|v: &mut Vec<u8>| v[1] = 9)),
        ("length field", Box::new(|v: &mut Vec<u8>| v[5] ^= 0x01)),
        (
            "length field high byte",
            Box::new(|v: &mut Vec<u8>| v[2] = 0xff),
        ),
        (
            "checksum",
            Box::new(move |v: &mut Vec<u8>| v[len - 1] ^= 0x80),
        ),
        (
            "truncation",
            Box::new(|v: &mut Vec<u8>| v.truncate(v.len() - 3)),
        ),
        ("empty value", Box::new(|v: &mut Vec<u8>| v.clear())),
    ];
    for (what, f) in cases {
        tamper(dir.path(), &key, |v| {
            *v = original.clone();
            f(v);
        });
        // Read through sled at load, and read at open (preload): the same report.
        for preload in [false, true] {
            let mut config = SledConfig::new(dir.path());
            config.preload = preload;
            let log = SledTxnLog::open(config).unwrap();
            match block_on(log.load(p)) {
                Err(LogError::Corrupt {
                    partition,
                    key,
                    reason,
                }) => {
                    assert_eq!(partition, Some(p), "{what}, preload {preload}");
                    assert_eq!(key, "victim", "{what}, preload {preload}: {reason}");
                }
                other => panic!("{what}, preload {preload}: corruption not reported: {other:?}"),
            }
            // A second load reads sled again and finds it again.
            assert!(block_on(log.load(p)).is_err(), "{what}, preload {preload}");
            assert!(
                matches!(log.verify_all(), Err(LogError::Corrupt { .. })),
                "{what}"
            );
            // Other partitions stay readable.
            assert!(block_on(log.load(LogPartition(6))).is_ok());
        }
    }
    tamper(dir.path(), &key, |v| *v = original.clone());
    {
        let log = SledTxnLog::open_path(dir.path()).unwrap();
        assert_eq!(block_on(log.load(p)).unwrap().records.len(), 2);
    }

    let ekey = codec::epoch_key(p);
    let eorig = raw_get(dir.path(), &ekey);
    tamper(dir.path(), &ekey, |v| v[6] ^= 0x04);
    match SledTxnLog::open_path(dir.path()) {
        Err(LogError::Corrupt { partition, key, .. }) => {
            assert_eq!(partition, Some(p));
            assert_eq!(key, "coordinator_epoch");
        }
        other => panic!("corrupt epoch not reported: {other:?}"),
    }
    tamper(dir.path(), &ekey, |v| *v = eorig);

    tamper(dir.path(), codec::PRODUCER_ID_KEY, |v| v[7] ^= 0x10);
    match SledTxnLog::open_path(dir.path()) {
        Err(LogError::Corrupt { partition, key, .. }) => {
            assert_eq!(partition, None);
            assert_eq!(key, "next_producer_id");
        }
        other => panic!("corrupt pid counter not reported: {other:?}"),
    }
}

/// With `SledConfig::preload`, every partition's first load returns what a read of sled
/// returns (partitions spread over the recovery readers' ranges, one above every claimed
/// partition, one with no records); a partition written after open is read from sled again.
#[test]
fn preload_serves_what_sled_holds_and_rereads_written_partitions() {
    let dir = tempfile::tempdir().unwrap();
    let claimed = [0u32, 1, 3, 7, 100, 1000, 4097];
    let expected = |log: &SledTxnLog| -> BTreeMap<u32, txn_log::LoadedPartition> {
        claimed
            .iter()
            .chain(&[5000, 77])
            .map(|&p| (p, block_on(log.load(LogPartition(p))).unwrap()))
            .collect()
    };
    let before = {
        let log = SledTxnLog::open_path(dir.path()).unwrap();
        for (i, &p) in claimed.iter().enumerate() {
            let epoch = CoordinatorEpoch(i32::try_from(i).unwrap() + 1);
            block_on(log.claim(LogPartition(p), epoch)).unwrap();
            let n = if p == 7 { 0 } else { 3 + i };
            let entries = (0..n)
                .map(|j| {
                    let pid = i64::from(p) * 100 + i64::try_from(j).unwrap();
                    LogEntry::upsert(
                        tid(&format!("id-{p}-{j}")),
                        record(pid, TxnState::Ongoing, j + 1),
                    )
                })
                .collect();
            block_on(log.append(LogPartition(p), epoch, entries)).unwrap();
        }
        // Partition 5000 was never claimed, so it has no records; 77 has neither.
        expected(&log)
    };
    let mut config = SledConfig::new(dir.path());
    config.preload = true;
    let log = SledTxnLog::open(config.clone()).unwrap();
    assert_eq!(expected(&log), before);

    let log = {
        drop(log);
        SledTxnLog::open(config).unwrap()
    };
    let p = LogPartition(3);
    let epoch = before[&3].coordinator_epoch.unwrap();
    block_on(log.append(
        p,
        epoch,
        vec![
            LogEntry::upsert(tid("written-after-open"), record(9, TxnState::Empty, 0)),
            LogEntry::tombstone(tid("id-3-0")),
        ],
    ))
    .unwrap();
    let loaded = block_on(log.load(p)).unwrap();
    let ids: Vec<&str> = loaded.records.iter().map(|(id, _)| id.as_str()).collect();
    assert!(ids.contains(&"written-after-open"), "{ids:?}");
    assert!(!ids.contains(&"id-3-0"), "{ids:?}");
    assert_eq!(ids.len(), before[&3].records.len());
    assert_eq!(
        block_on(log.load(LogPartition(1000))).unwrap(),
        before[&1000]
    );
}

/// Blocks allocated before and after several reopens never overlap.
#[test]
fn producer_id_blocks_never_overlap_across_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let mut blocks = Vec::new();
    for round in 0..5u32 {
        let log = SledTxnLog::open_path(dir.path()).unwrap();
        for len in [1, 50, 1000 + round] {
            blocks.push(block_on(log.allocate_block(len, ProducerId(0))).unwrap());
        }
        let concurrent = block_on(join_all(
            (0..10)
                .map(|_| log.allocate_block(7, ProducerId(0)))
                .collect(),
        ));
        blocks.extend(concurrent.into_iter().map(Result::unwrap));
    }
    assert_disjoint(&blocks);
    assert_eq!(blocks.len(), 5 * 13);
}

/// A failed fsync fails the calls of its batch with `Io` and poisons the log: every later
/// call is `Poisoned`. A reopen (the restart) recovers a working log.
#[test]
fn failed_fsync_poisons_the_log() {
    let dir = tempfile::tempdir().unwrap();
    {
        let log = SledTxnLog::open_path(dir.path()).unwrap();
        block_on(log.claim(P, CoordinatorEpoch(1))).unwrap();
        log.fail_next_sync();
        let err = upsert_one(&log, 1, "x", record(1, TxnState::Empty, 0)).unwrap_err();
        assert!(matches!(err, LogError::Io(_)), "{err:?}");
        assert!(log.is_poisoned());
        let poisoned = |r: Result<(), LogError>| matches!(r, Err(LogError::Poisoned { .. }));
        assert!(poisoned(block_on(log.append(
            P,
            CoordinatorEpoch(1),
            Vec::new()
        ))));
        assert!(poisoned(block_on(log.claim(P, CoordinatorEpoch(2)))));
        assert!(poisoned(block_on(log.load(P)).map(|_| ())));
        assert!(poisoned(
            block_on(log.allocate_block(1, ProducerId(0))).map(|_| ())
        ));
        assert!(matches!(log.verify_all(), Err(LogError::Poisoned { .. })));
    }
    let log = SledTxnLog::open_path(dir.path()).unwrap();
    block_on(log.append(P, CoordinatorEpoch(1), Vec::new())).unwrap();
    assert!(!log.is_poisoned());
}

/// Counters: sequential calls are one batch each; a batch never exceeds `max_batch`;
/// rejected calls are counted apart.
#[test]
fn group_commit_respects_max_batch_and_counts() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = SledConfig::new(dir.path());
    config.max_batch = 4;
    let log = SledTxnLog::open(config).unwrap();
    block_on(log.claim(P, CoordinatorEpoch(1))).unwrap();
    for i in 0..5 {
        upsert_one(&log, 1, &format!("s{i}"), record(i, TxnState::Empty, 0)).unwrap();
    }
    let s = log.stats();
    assert_eq!((s.batches, s.requests, s.rejected), (6, 6, 0));
    assert!(block_on(log.append(P, CoordinatorEpoch(0), Vec::new())).is_err());
    assert_eq!(log.stats().rejected, 1);
    let results = block_on(join_all(
        (0..100)
            .map(|i| {
                log.append(
                    P,
                    CoordinatorEpoch(1),
                    vec![LogEntry::upsert(
                        tid(&format!("c{i}")),
                        record(i, TxnState::Ongoing, 1),
                    )],
                )
            })
            .collect(),
    ));
    assert!(results.iter().all(Result::is_ok));
    let s = log.stats();
    assert_eq!(s.requests, 106);
    assert!(s.largest_batch <= 4, "{s:?}");
    assert!(s.batches >= 6 + 25, "{s:?}");
    assert!(s.syncs >= s.batches, "every batch is fsynced: {s:?}");
    assert_eq!(block_on(log.load(P)).unwrap().records.len(), 105);
}

/// OS-buffered mode stores and reloads the same data, and makes no fsync calls.
#[test]
fn os_buffered_mode_round_trips() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = SledConfig::new(dir.path());
    config.sync_mode = SyncMode::OsBuffered;
    {
        let log = SledTxnLog::open(config.clone()).unwrap();
        block_on(log.claim(P, CoordinatorEpoch(1))).unwrap();
        upsert_one(&log, 1, "a", record(1, TxnState::Empty, 0)).unwrap();
        assert_eq!(log.stats().syncs, 0);
    }
    let log = SledTxnLog::open(config).unwrap();
    assert_eq!(block_on(log.load(P)).unwrap().records.len(), 1);
}

/// Invalid configuration is rejected; after `shutdown` every call is `Closed`.
#[test]
fn bad_config_and_shutdown() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = SledConfig::new(dir.path());
    config.max_batch = 0;
    assert!(matches!(
        SledTxnLog::open(config),
        Err(LogError::InvalidArgument(_))
    ));
    let log = SledTxnLog::open_path(dir.path()).unwrap();
    log.shutdown();
    assert!(matches!(
        block_on(log.claim(P, CoordinatorEpoch(1))),
        Err(LogError::Closed)
    ));
    assert!(matches!(block_on(log.load(P)), Err(LogError::Closed)));
    log.shutdown();
}

/// Sets the mtime of `dir` (and of `dir/blobs`) an hour back, as if sled had created nothing
/// there for a long time.
fn age_dirs(dir: &Path) {
    let old = std::time::SystemTime::now() - Duration::from_secs(3600);
    for d in [dir.to_path_buf(), dir.join("blobs")] {
        if let Ok(f) = std::fs::File::open(&d) {
            f.set_modified(old).unwrap();
        }
    }
}

/// The writer lists the data directories only when they may hold a new file, and a file sled
/// creates (a blob for a large value) is still found and fsynced before its batch is acked.
#[test]
fn new_files_are_found_without_listing_every_batch() {
    let dir = tempfile::tempdir().unwrap();
    {
        let log = SledTxnLog::open_path(dir.path()).unwrap();
        block_on(log.claim(P, CoordinatorEpoch(1))).unwrap();
    }
    let log = SledTxnLog::open_path(dir.path()).unwrap();
    // After open: sled's recovery may itself touch the directory.
    age_dirs(dir.path());
    let at_open = log.stats();
    for i in 0..200 {
        upsert_one(&log, 1, &format!("s{i}"), record(i, TxnState::Ongoing, 1)).unwrap();
    }
    let s = log.stats();
    eprintln!("at open {at_open:?}, after 200 appends {s:?}");
    assert!(s.batches - at_open.batches >= 200, "{s:?}");
    assert!(
        s.dir_listings - at_open.dir_listings < 100,
        "settled directories are not listed on every batch: {s:?}"
    );
    assert_eq!(s.new_files, at_open.new_files, "{s:?}");

    // A value above sled's blob threshold becomes a new file under blobs/.
    upsert_one(&log, 1, "big", record(7, TxnState::Ongoing, 40_000)).unwrap();
    let after = log.stats();
    let blobs = std::fs::read_dir(dir.path().join("blobs")).map_or(0, Iterator::count);
    assert!(blobs >= 1, "sled wrote a blob file");
    assert!(
        after.new_files > s.new_files,
        "the blob file was fsynced before the ack: {after:?}"
    );
    drop(log);
    let log = SledTxnLog::open_path(dir.path()).unwrap();
    let loaded = block_on(log.load(P)).unwrap();
    assert_eq!(loaded.records.len(), 201);
}
