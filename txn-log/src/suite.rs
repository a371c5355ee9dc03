//! The conformance suite of [`TxnLog`]: the acceptance bar for an implementation
//! (feature `testing`; no stability promise).
//!
//! Each check is an `async fn` taking a fresh, empty log and panicking on a violation.
//! [`run_all`] runs them all against logs from a factory. The futures need no runtime: drive
//! them with [`crate::mem::block_on`] or any executor. Concurrency is exercised by polling many
//! calls at once ([`join_all`]), which is what makes a group-commit implementation batch them.
//!
//! What the suite cannot check generically (durability across a real crash, corruption on
//! disk) is tested per implementation.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::{
    CoordinatorEpoch, LogEntry, LogError, LogPartition, ProducerEpoch, ProducerId, ProducerIdBlock,
    TopicPartition, TransactionalId, TxnLog, TxnRecord, TxnState,
};

/// A valid record with producer id `pid`, in `state`, with `partitions` partitions of topic
/// `t`; the other fields are derived from `pid` so different pids give different records.
pub fn record(pid: i64, state: TxnState, partitions: usize) -> TxnRecord {
    let epoch = ProducerEpoch(i16::try_from(pid.rem_euclid(1000)).unwrap_or(0));
    TxnRecord {
        prev_producer_id: ProducerId(pid - 1),
        state,
        partitions: (0..partitions)
            .map(|i| TopicPartition::new("t", i32::try_from(i).unwrap_or(i32::MAX)))
            .collect(),
        txn_start_ms: pid,
        client_txn_version: crate::TxnVersion::V2,
        ..TxnRecord::initialized(ProducerId(pid), epoch, 60_000, pid + 1)
    }
}

/// `TransactionalId::new(s)`, panicking on the empty string.
pub fn tid(s: &str) -> TransactionalId {
    TransactionalId::new(s).expect("non-empty transactional id")
}

/// Polls all `futs` concurrently on the current task until every one completes; outputs in
/// input order.
pub async fn join_all<F: Future>(futs: Vec<F>) -> Vec<F::Output> {
    let mut futs: Vec<Pin<Box<F>>> = futs.into_iter().map(Box::pin).collect();
    let mut out: Vec<Option<F::Output>> = futs.iter().map(|_| None).collect();
    std::future::poll_fn(|cx: &mut Context<'_>| {
        let mut pending = false;
        for (f, o) in futs.iter_mut().zip(out.iter_mut()) {
            if o.is_none() {
                match f.as_mut().poll(cx) {
                    Poll::Ready(v) => *o = Some(v),
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    out.into_iter().flatten().collect()
}

/// A boxed `claim`/`append` call, as `async_trait` returns it.
type UnitCall<'a> = Pin<Box<dyn Future<Output = Result<(), LogError>> + Send + 'a>>;

const P: LogPartition = LogPartition(7);
/// The floor of a deployment that starts its producer ids at 0, as Kafka does.
const NO_FLOOR: ProducerId = ProducerId(0);
const E1: CoordinatorEpoch = CoordinatorEpoch(1);
const E2: CoordinatorEpoch = CoordinatorEpoch(2);

/// Runs every check, each against a fresh log from `make`.
pub async fn run_all<L: TxnLog, F: FnMut() -> L>(mut make: F) {
    claim_append_load_round_trip(&make()).await;
    load_of_an_unknown_partition_is_empty(&make()).await;
    stale_append_is_fenced_and_writes_nothing(&make()).await;
    stale_claim_is_fenced_and_equal_or_higher_claims_succeed(&make()).await;
    append_with_an_unclaimed_epoch_is_not_claimed(&make()).await;
    batches_apply_entirely_and_the_last_entry_for_an_id_wins(&make()).await;
    tombstones_remove_ids(&make()).await;
    appends_apply_in_call_order(&make()).await;
    the_call_orders_appends_not_the_poll(&make()).await;
    partitions_are_independent(&make()).await;
    producer_id_blocks_never_overlap(&make()).await;
    zero_length_block_is_invalid(&make()).await;
    many_concurrent_appenders_all_land(&make()).await;
    claim_fences_concurrent_appends_of_the_old_epoch(&make()).await;
    concurrent_next_claims_get_distinct_epochs(&make()).await;
    empty_append_checks_the_fence(&make()).await;
    blocks_start_at_the_floor_and_never_reuse_ids(&make()).await;
}

/// A claimed partition stores its epoch; appended records load back exactly, ordered by id.
pub async fn claim_append_load_round_trip<L: TxnLog + ?Sized>(log: &L) {
    log.claim(P, E1).await.expect("claim");
    let loaded = log.load(P).await.expect("load");
    assert_eq!(loaded.coordinator_epoch, Some(E1));
    assert!(loaded.records.is_empty());
    let b = record(2, TxnState::Ongoing, 3);
    let a = record(1, TxnState::Empty, 0);
    log.append(
        P,
        E1,
        vec![
            LogEntry::upsert(tid("b"), b.clone()),
            LogEntry::upsert(tid("a"), a.clone()),
        ],
    )
    .await
    .expect("append");
    let loaded = log.load(P).await.expect("load");
    assert_eq!(loaded.coordinator_epoch, Some(E1));
    assert_eq!(loaded.records, vec![(tid("a"), a), (tid("b"), b)]);
}

/// Loading a partition nobody touched gives no epoch and no records.
pub async fn load_of_an_unknown_partition_is_empty<L: TxnLog + ?Sized>(log: &L) {
    let loaded = log.load(LogPartition(12345)).await.expect("load");
    assert_eq!(loaded.coordinator_epoch, None);
    assert!(loaded.records.is_empty());
}

/// After `claim(2)`, an append with epoch 1 is `Fenced { current: 2 }` and changes nothing.
pub async fn stale_append_is_fenced_and_writes_nothing<L: TxnLog + ?Sized>(log: &L) {
    log.claim(P, E1).await.expect("claim 1");
    log.append(
        P,
        E1,
        vec![LogEntry::upsert(tid("x"), record(1, TxnState::Empty, 0))],
    )
    .await
    .expect("append as 1");
    log.claim(P, E2).await.expect("claim 2");
    let err = log
        .append(
            P,
            E1,
            vec![
                LogEntry::upsert(tid("x"), record(9, TxnState::Ongoing, 1)),
                LogEntry::upsert(tid("y"), record(9, TxnState::Ongoing, 1)),
            ],
        )
        .await
        .expect_err("stale append must fail");
    assert!(
        matches!(err, LogError::Fenced { partition, current } if partition == P && current == E2),
        "{err:?}"
    );
    assert!(err.is_fenced());
    let loaded = log.load(P).await.expect("load");
    assert_eq!(loaded.coordinator_epoch, Some(E2));
    assert_eq!(
        loaded.records,
        vec![(tid("x"), record(1, TxnState::Empty, 0))]
    );
    // The new owner can write.
    log.append(P, E2, vec![LogEntry::tombstone(tid("x"))])
        .await
        .expect("append as 2");
}

/// An empty batch writes nothing but checks the fence: `Ok` at the stored epoch, `Fenced`
/// below it. The coordinator asks the log this way whether it still owns a partition.
pub async fn empty_append_checks_the_fence<L: TxnLog + ?Sized>(log: &L) {
    log.claim(P, E1).await.expect("claim 1");
    log.append(P, E1, Vec::new())
        .await
        .expect("empty append as 1");
    log.claim(P, E2).await.expect("claim 2");
    let err = log
        .append(P, E1, Vec::new())
        .await
        .expect_err("a stale empty append must fail");
    assert!(
        matches!(err, LogError::Fenced { partition, current } if partition == P && current == E2),
        "{err:?}"
    );
    log.append(P, E2, Vec::new())
        .await
        .expect("empty append as 2");
    assert!(log.load(P).await.expect("load").records.is_empty());
}

/// A lower claim is `Fenced`; an equal claim (re-claim) and a higher one succeed.
pub async fn stale_claim_is_fenced_and_equal_or_higher_claims_succeed<L: TxnLog + ?Sized>(log: &L) {
    log.claim(P, CoordinatorEpoch(5)).await.expect("claim 5");
    let err = log
        .claim(P, CoordinatorEpoch(4))
        .await
        .expect_err("lower claim");
    assert!(
        matches!(err, LogError::Fenced { current, .. } if current == CoordinatorEpoch(5)),
        "{err:?}"
    );
    log.claim(P, CoordinatorEpoch(5))
        .await
        .expect("equal claim");
    log.claim(P, CoordinatorEpoch(9))
        .await
        .expect("higher claim");
    assert_eq!(
        log.load(P).await.expect("load").coordinator_epoch,
        Some(CoordinatorEpoch(9))
    );
    let err = log
        .claim(P, CoordinatorEpoch(5))
        .await
        .expect_err("lower claim");
    assert!(
        matches!(err, LogError::Fenced { current, .. } if current == CoordinatorEpoch(9)),
        "{err:?}"
    );
}

/// Appending with no claim at all, or with an epoch above the claimed one, is `NotClaimed`.
pub async fn append_with_an_unclaimed_epoch_is_not_claimed<L: TxnLog + ?Sized>(log: &L) {
    let entry = || vec![LogEntry::upsert(tid("x"), record(1, TxnState::Empty, 0))];
    let err = log.append(P, E1, entry()).await.expect_err("no claim");
    assert!(
        matches!(err, LogError::NotClaimed { partition, epoch } if partition == P && epoch == E1),
        "{err:?}"
    );
    log.claim(P, E1).await.expect("claim");
    let err = log.append(P, E2, entry()).await.expect_err("newer epoch");
    assert!(
        matches!(err, LogError::NotClaimed { epoch, .. } if epoch == E2),
        "{err:?}"
    );
    assert!(log.load(P).await.expect("load").records.is_empty());
}

/// A batch lands as a whole; within it, a later entry for an id replaces an earlier one.
pub async fn batches_apply_entirely_and_the_last_entry_for_an_id_wins<L: TxnLog + ?Sized>(log: &L) {
    log.claim(P, E1).await.expect("claim");
    let batch: Vec<LogEntry> = (0..50)
        .map(|i| LogEntry::upsert(tid(&format!("id-{i:02}")), record(i, TxnState::Ongoing, 2)))
        .chain([
            LogEntry::upsert(tid("id-03"), record(103, TxnState::PrepareCommit, 2)),
            LogEntry::tombstone(tid("id-04")),
            LogEntry::upsert(tid("id-04"), record(104, TxnState::PrepareAbort, 1)),
            LogEntry::tombstone(tid("id-05")),
        ])
        .collect();
    log.append(P, E1, batch).await.expect("append");
    let loaded = log.load(P).await.expect("load");
    let got: BTreeMap<_, _> = loaded.records.into_iter().collect();
    assert_eq!(got.len(), 49);
    assert_eq!(got[&tid("id-03")], record(103, TxnState::PrepareCommit, 2));
    assert_eq!(got[&tid("id-04")], record(104, TxnState::PrepareAbort, 1));
    assert!(!got.contains_key(&tid("id-05")));
    assert_eq!(got[&tid("id-49")], record(49, TxnState::Ongoing, 2));
    // An empty batch is a valid no-op.
    log.append(P, E1, Vec::new()).await.expect("empty append");
}

/// A tombstone removes an id; a tombstone for an unknown id is harmless; the id can return.
pub async fn tombstones_remove_ids<L: TxnLog + ?Sized>(log: &L) {
    log.claim(P, E1).await.expect("claim");
    log.append(
        P,
        E1,
        vec![
            LogEntry::upsert(tid("a"), record(1, TxnState::CompleteCommit, 0)),
            LogEntry::upsert(tid("b"), record(2, TxnState::CompleteAbort, 0)),
        ],
    )
    .await
    .expect("append");
    log.append(
        P,
        E1,
        vec![
            LogEntry::tombstone(tid("a")),
            LogEntry::tombstone(tid("zz")),
        ],
    )
    .await
    .expect("tombstone");
    let loaded = log.load(P).await.expect("load");
    assert_eq!(
        loaded.records,
        vec![(tid("b"), record(2, TxnState::CompleteAbort, 0))]
    );
    log.append(
        P,
        E1,
        vec![LogEntry::upsert(tid("a"), record(3, TxnState::Empty, 0))],
    )
    .await
    .expect("re-add");
    assert_eq!(log.load(P).await.expect("load").records.len(), 2);
}

/// Sequential appends to one id: the last one is what loads.
pub async fn appends_apply_in_call_order<L: TxnLog + ?Sized>(log: &L) {
    log.claim(P, E1).await.expect("claim");
    let states = [
        TxnState::Empty,
        TxnState::Ongoing,
        TxnState::PrepareCommit,
        TxnState::CompleteCommit,
    ];
    for (i, s) in (0i64..).zip(states) {
        // Idle states hold no partitions (a persistable record, TxnRecord::check_persistable).
        let parts = usize::from(!s.is_idle());
        log.append(P, E1, vec![LogEntry::upsert(tid("t"), record(i, s, parts))])
            .await
            .expect("append");
        let loaded = log.load(P).await.expect("load");
        assert_eq!(loaded.records, vec![(tid("t"), record(i, s, parts))]);
    }
}

/// `append` queues at the call: appends started one after the other apply in that order even
/// when their futures are awaited the other way round, and an append whose future is dropped
/// unpolled still applies (before the ones started after it).
pub async fn the_call_orders_appends_not_the_poll<L: TxnLog + ?Sized>(log: &L) {
    log.claim(P, E1).await.expect("claim");
    let first = log.append(
        P,
        E1,
        vec![LogEntry::upsert(tid("t"), record(1, TxnState::Empty, 0))],
    );
    let second = log.append(
        P,
        E1,
        vec![LogEntry::upsert(tid("t"), record(2, TxnState::Ongoing, 1))],
    );
    second.await.expect("second");
    first.await.expect("first");
    let loaded = log.load(P).await.expect("load");
    assert_eq!(
        loaded.records,
        vec![(tid("t"), record(2, TxnState::Ongoing, 1))]
    );
    drop(log.append(
        P,
        E1,
        vec![LogEntry::upsert(tid("u"), record(3, TxnState::Empty, 0))],
    ));
    log.append(
        P,
        E1,
        vec![LogEntry::upsert(tid("v"), record(4, TxnState::Ongoing, 1))],
    )
    .await
    .expect("after the dropped one");
    let loaded = log.load(P).await.expect("load");
    assert_eq!(
        loaded.records,
        vec![
            (tid("t"), record(2, TxnState::Ongoing, 1)),
            (tid("u"), record(3, TxnState::Empty, 0)),
            (tid("v"), record(4, TxnState::Ongoing, 1)),
        ]
    );
}

/// Epochs and records of one partition do not leak into another.
pub async fn partitions_are_independent<L: TxnLog + ?Sized>(log: &L) {
    let (p1, p2) = (LogPartition(0), LogPartition(1));
    log.claim(p1, CoordinatorEpoch(3)).await.expect("claim p1");
    log.claim(p2, CoordinatorEpoch(1)).await.expect("claim p2");
    log.append(
        p1,
        CoordinatorEpoch(3),
        vec![LogEntry::upsert(tid("same"), record(1, TxnState::Empty, 0))],
    )
    .await
    .expect("append p1");
    log.append(
        p2,
        CoordinatorEpoch(1),
        vec![LogEntry::upsert(
            tid("same"),
            record(2, TxnState::Ongoing, 1),
        )],
    )
    .await
    .expect("append p2");
    // Epoch 1 is stale on p1 but current on p2.
    assert!(
        log.append(p1, CoordinatorEpoch(1), Vec::new())
            .await
            .expect_err("stale on p1")
            .is_fenced()
    );
    let l1 = log.load(p1).await.expect("load p1");
    let l2 = log.load(p2).await.expect("load p2");
    assert_eq!(l1.coordinator_epoch, Some(CoordinatorEpoch(3)));
    assert_eq!(l2.coordinator_epoch, Some(CoordinatorEpoch(1)));
    assert_eq!(
        l1.records,
        vec![(tid("same"), record(1, TxnState::Empty, 0))]
    );
    assert_eq!(
        l2.records,
        vec![(tid("same"), record(2, TxnState::Ongoing, 1))]
    );
}

/// Asserts that `blocks` are pairwise disjoint and non-negative.
pub fn assert_disjoint(blocks: &[ProducerIdBlock]) {
    let mut sorted: Vec<_> = blocks.to_vec();
    sorted.sort_by_key(|b| b.first);
    for w in sorted.windows(2) {
        assert!(
            w[0].end() <= w[1].first.0,
            "overlapping producer id blocks {:?} and {:?}",
            w[0],
            w[1]
        );
    }
    assert!(
        sorted.iter().all(|b| b.first.0 >= 0),
        "negative producer id"
    );
}

/// Blocks, sequential and concurrent, never overlap and have the requested length.
pub async fn producer_id_blocks_never_overlap<L: TxnLog + ?Sized>(log: &L) {
    let mut blocks = Vec::new();
    for len in [1u32, 1000, 7, 1] {
        let b = log.allocate_block(len, NO_FLOOR).await.expect("allocate");
        assert_eq!(b.len, len);
        blocks.push(b);
    }
    let concurrent = join_all(
        (1..=32u32)
            .map(|i| log.allocate_block(i, NO_FLOOR))
            .collect(),
    )
    .await;
    for (i, b) in (1..=32u32).zip(concurrent) {
        let b = b.expect("allocate");
        assert_eq!(b.len, i);
        blocks.push(b);
    }
    assert_disjoint(&blocks);
}

/// A block starts at the floor when the counter is below it and at the counter otherwise; a
/// floor lowered later never hands out an id twice.
pub async fn blocks_start_at_the_floor_and_never_reuse_ids<L: TxnLog + ?Sized>(log: &L) {
    let a = log.allocate_block(10, NO_FLOOR).await.expect("allocate");
    let floor = ProducerId(1_000_000_000_000_000);
    let b = log.allocate_block(10, floor).await.expect("allocate");
    assert_eq!(b.first, floor);
    let c = log.allocate_block(10, floor).await.expect("allocate");
    assert_eq!(
        c.first.0,
        floor.0 + 10,
        "the counter moved past the floor's block"
    );
    let d = log.allocate_block(10, NO_FLOOR).await.expect("allocate");
    assert_eq!(d.first.0, floor.0 + 20, "a lower floor does not go back");
    assert_disjoint(&[a, b, c, d]);
}

/// `allocate_block(0)` is `InvalidArgument` and does not disturb later blocks.
pub async fn zero_length_block_is_invalid<L: TxnLog + ?Sized>(log: &L) {
    let a = log.allocate_block(10, NO_FLOOR).await.expect("allocate");
    let err = log
        .allocate_block(0, NO_FLOOR)
        .await
        .expect_err("zero length");
    assert!(matches!(err, LogError::InvalidArgument(_)), "{err:?}");
    let b = log.allocate_block(10, NO_FLOOR).await.expect("allocate");
    assert_disjoint(&[a, b]);
}

/// 200 appends in flight at once, over 4 partitions: every one succeeds and lands.
pub async fn many_concurrent_appenders_all_land<L: TxnLog + ?Sized>(log: &L) {
    let parts = [
        LogPartition(0),
        LogPartition(1),
        LogPartition(2),
        LogPartition(3),
    ];
    for p in parts {
        log.claim(p, E1).await.expect("claim");
    }
    let n = 200usize;
    let futs = (0..n)
        .map(|i| {
            let p = parts[i % parts.len()];
            let pid = i64::try_from(i).unwrap_or(i64::MAX);
            log.append(
                p,
                E1,
                vec![
                    LogEntry::upsert(tid(&format!("w{i}-a")), record(pid, TxnState::Ongoing, 1)),
                    LogEntry::upsert(tid(&format!("w{i}-b")), record(pid, TxnState::Empty, 0)),
                ],
            )
        })
        .collect();
    for r in join_all(futs).await {
        r.expect("concurrent append");
    }
    let mut ids = BTreeSet::new();
    for p in parts {
        for (id, rec) in log.load(p).await.expect("load").records {
            let i: usize = id.as_str()[1..]
                .split('-')
                .next()
                .and_then(|s| s.parse().ok())
                .expect("id format");
            assert_eq!(parts[i % parts.len()], p, "{id} in the wrong partition");
            assert_eq!(rec.producer_id.0, i64::try_from(i).unwrap_or(i64::MAX));
            ids.insert(id);
        }
    }
    assert_eq!(ids.len(), 2 * n);
}

/// Appends of epoch 1 racing a `claim(2)`: each either lands (and loads) or is `Fenced`;
/// once the claim has resolved, every epoch-1 append is fenced.
pub async fn claim_fences_concurrent_appends_of_the_old_epoch<L: TxnLog + ?Sized>(log: &L) {
    log.claim(P, E1).await.expect("claim 1");
    let n = 64usize;
    let appends = (0..n)
        .map(|i| {
            log.append(
                P,
                E1,
                vec![LogEntry::upsert(
                    tid(&format!("r{i:03}")),
                    record(1, TxnState::Ongoing, 1),
                )],
            )
        })
        .collect::<Vec<_>>();
    // Interleave the claim in the middle of the appends.
    let mut all: Vec<UnitCall<'_>> = Vec::new();
    let mut appends = appends.into_iter();
    all.extend(appends.by_ref().take(n / 2));
    all.push(log.claim(P, E2));
    all.extend(appends);
    let results = join_all(all).await;
    let claim_result = &results[n / 2];
    assert!(claim_result.is_ok(), "claim 2: {claim_result:?}");
    let loaded = log.load(P).await.expect("load");
    let present: BTreeSet<_> = loaded.records.into_iter().map(|(id, _)| id).collect();
    for (i, r) in results
        .iter()
        .enumerate()
        .filter(|(k, _)| *k != n / 2)
        .map(|(k, r)| (if k > n / 2 { k - 1 } else { k }, r))
    {
        let id = tid(&format!("r{i:03}"));
        match r {
            Ok(()) => assert!(present.contains(&id), "acknowledged {id} missing"),
            Err(e) => {
                assert!(e.is_fenced(), "{id}: {e:?}");
                assert!(!present.contains(&id), "fenced {id} landed");
            }
        }
    }
    let err = log
        .append(P, E1, vec![LogEntry::tombstone(tid("r000"))])
        .await
        .expect_err("after claim 2");
    assert!(err.is_fenced());
}

/// `claim_next` claims stored+1 (0 on a fresh partition); concurrent `claim_next` calls each
/// get an epoch of their own, so no two owners share one, and only the highest may append.
pub async fn concurrent_next_claims_get_distinct_epochs<L: TxnLog + ?Sized>(log: &L) {
    assert_eq!(log.claim_next(P).await.expect("first"), CoordinatorEpoch(0));
    log.claim(P, CoordinatorEpoch(5)).await.expect("claim 5");
    assert_eq!(
        log.claim_next(P).await.expect("after 5"),
        CoordinatorEpoch(6)
    );
    let n = 8;
    let got = join_all((0..n).map(|_| log.claim_next(P)).collect()).await;
    let epochs: BTreeSet<CoordinatorEpoch> =
        got.into_iter().map(|r| r.expect("claim_next")).collect();
    assert_eq!(
        epochs.len(),
        n,
        "two claim_next calls got the same epoch: {epochs:?}"
    );
    let highest = *epochs.last().expect("epochs");
    assert_eq!(highest, CoordinatorEpoch(6 + 8));
    for &e in &epochs {
        let r = log
            .append(
                P,
                e,
                vec![LogEntry::upsert(tid("x"), record(1, TxnState::Ongoing, 1))],
            )
            .await;
        assert_eq!(r.is_ok(), e == highest, "append with epoch {e:?}: {r:?}");
    }
    assert_eq!(
        log.load(P).await.expect("load").coordinator_epoch,
        Some(highest)
    );
}

/// The [`crate::SecurityStore`] checks: puts, deletes and reads back ACL bindings and SCRAM
/// credentials; a binding put twice is stored once; deleting what is absent is no error.
pub async fn security_store_round_trip<S: crate::SecurityStore + ?Sized>(store: &S) {
    use crate::{SecurityChange, StoredScram};
    use security::acl::{
        AccessControlEntry, AclBinding, AclOperation, AclPermissionType, ResourcePattern,
        ResourceType,
    };
    use security::sasl::{ScramCredential, ScramMechanism};

    let acl = |name: &str, permission| {
        AclBinding::new(
            ResourcePattern::literal(ResourceType::TransactionalId, name),
            AccessControlEntry::new("User:alice", "*", AclOperation::Write, permission),
        )
    };
    let scram = |user: &str, m: ScramMechanism| StoredScram {
        user: user.to_owned(),
        mechanism: m,
        credential: ScramCredential::from_password_and_salt(m, user, b"salt", 4096)
            .expect("credential"),
    };
    assert_eq!(
        store.load_security().await.expect("empty"),
        crate::SecuritySnapshot::default()
    );
    let a = acl("a", AclPermissionType::Allow);
    let b = acl("b", AclPermissionType::Deny);
    store
        .apply_security(&[
            SecurityChange::PutAcl(a.clone()),
            SecurityChange::PutAcl(b.clone()),
            SecurityChange::PutAcl(a.clone()),
            SecurityChange::PutScram(scram("alice", ScramMechanism::Sha256)),
            SecurityChange::PutScram(scram("alice", ScramMechanism::Sha512)),
            SecurityChange::PutScram(scram("bob", ScramMechanism::Sha512)),
        ])
        .await
        .expect("put");
    let snap = store.load_security().await.expect("load");
    let mut acls = snap.acls.clone();
    acls.sort();
    let mut want = vec![a.clone(), b.clone()];
    want.sort();
    assert_eq!(acls, want);
    assert_eq!(snap.credentials.len(), 3);
    assert!(
        snap.credentials
            .contains(&scram("bob", ScramMechanism::Sha512))
    );
    store
        .apply_security(&[
            SecurityChange::DeleteAcl(a.clone()),
            SecurityChange::DeleteAcl(acl("never", AclPermissionType::Allow)),
            SecurityChange::DeleteScram {
                user: "alice".into(),
                mechanism: ScramMechanism::Sha256,
            },
        ])
        .await
        .expect("delete");
    let snap = store.load_security().await.expect("load");
    assert_eq!(snap.acls, vec![b]);
    let mut users: Vec<_> = snap
        .credentials
        .iter()
        .map(|c| (c.user.clone(), c.mechanism))
        .collect();
    users.sort_by_key(|(u, m)| (u.clone(), m.name()));
    assert_eq!(
        users,
        vec![
            ("alice".to_owned(), ScramMechanism::Sha512),
            ("bob".to_owned(), ScramMechanism::Sha512)
        ]
    );
}
