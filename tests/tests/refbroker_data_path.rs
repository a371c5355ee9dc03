//! The refbroker binary over loopback, driven with kafka-protocol requests: plain, idempotent
//! and transactional produce, markers, read_committed fetch (LSO and aborted transactions),
//! ListOffsets, transactional offset commits, a consumer group round, and that a restart
//! rebuilds producer state, the LSO and offsets from the partition logs.

use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, BrokerId, FindCoordinatorRequest, GroupId, HeartbeatRequest,
    JoinGroupRequest, LeaveGroupRequest, ListOffsetsRequest, MetadataRequest, OffsetCommitRequest,
    OffsetFetchRequest, ProducerId as WireProducerId, SyncGroupRequest, TopicName, TransactionalId,
    TxnOffsetCommitRequest, WriteTxnMarkersRequest,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::RecordBatchDecoder;
use txn_testkit::client::Versions;
use txn_testkit::wire::{self, Conn, sb};
use txn_tests::refbroker::process::BrokerProcess;
use txn_tests::txn_steps::fetch_of_t;

fn start(dir: &std::path::Path) -> BrokerProcess {
    let args = [
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        dir.to_str().expect("utf-8 path"),
        "--topics",
        "t:2",
        "--coordinator",
        "127.0.0.1:9",
        "--offsets-partitions",
        "5",
        "--set",
        "fetch.max.wait.ms=50",
        // The participant rules are driven with hand-made transactional batches and
        // markers, with no coordinator behind 127.0.0.1:9 to verify them against (KIP-890
        // verification is tested in fault_hanging_txn).
        "--set",
        "transaction.partition.verification.enable=false",
    ];
    BrokerProcess::start(std::path::Path::new(env!("CARGO_BIN_EXE_refbroker")), &args)
}

async fn connect(b: &BrokerProcess) -> Conn {
    wire::connect(b.addr(), "refbroker-test").await
}

/// A v2 batch of `n` records `prefix-i`; producer `(pid, epoch, seq)` or plain.
fn batch(producer: Option<(i64, i16, i32)>, transactional: bool, n: i32, prefix: &str) -> Bytes {
    let values: Vec<String> = (0..n).map(|i| format!("{prefix}-{i}")).collect();
    wire::record_batch(producer, transactional, &values)
}

/// Produces `records` to `t`/`partition`; returns (error_code, base_offset).
async fn produce(c: &mut Conn, partition: i32, records: Bytes, txn_id: Option<&str>) -> (i16, i64) {
    wire::produce(c, "t", partition, records, txn_id).await
}

struct Fetched {
    error: i16,
    high_watermark: i64,
    last_stable_offset: i64,
    aborted: Option<Vec<(i64, i64)>>,
    /// (offset, value) of data records; control records as value "<control>".
    records: Vec<(i64, String)>,
}

async fn fetch(c: &mut Conn, partition: i32, offset: i64, read_committed: bool) -> Fetched {
    let req = fetch_of_t(partition, offset, read_committed);
    let resp = c.call(&req, 11).await.expect("fetch");
    let p = &resp.responses[0].partitions[0];
    let mut records = Vec::new();
    if let Some(bytes) = &p.records {
        let mut buf = bytes.clone();
        for set in RecordBatchDecoder::decode_all(&mut buf).expect("decodable records") {
            for r in set.records {
                let v = if r.control {
                    "<control>".to_owned()
                } else {
                    String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned()
                };
                records.push((r.offset, v));
            }
        }
    }
    Fetched {
        error: p.error_code,
        high_watermark: p.high_watermark,
        last_stable_offset: p.last_stable_offset,
        aborted: p.aborted_transactions.as_ref().map(|a| {
            a.iter()
                .map(|t| (t.producer_id.0, t.first_offset))
                .collect()
        }),
        records,
    }
}

/// Sends one marker for `pid` to the given topic partitions; returns the error codes.
async fn marker(
    c: &mut Conn,
    pid: i64,
    epoch: i16,
    commit: bool,
    partitions: &[(&str, i32)],
) -> Vec<i16> {
    marker_tv(c, 1, 0, pid, epoch, commit, partitions).await
}

/// [`marker`] as WriteTxnMarkers `version` with `TransactionVersion` `tv` (sent at v2 only).
async fn marker_tv(
    c: &mut Conn,
    version: i16,
    tv: i8,
    pid: i64,
    epoch: i16,
    commit: bool,
    partitions: &[(&str, i32)],
) -> Vec<i16> {
    use kafka_protocol::messages::write_txn_markers_request::{
        WritableTxnMarker, WritableTxnMarkerTopic,
    };
    let topics = partitions
        .iter()
        .map(|(t, p)| {
            WritableTxnMarkerTopic::default()
                .with_name(TopicName(sb(t)))
                .with_partition_indexes(vec![*p])
        })
        .collect();
    let req = WriteTxnMarkersRequest::default().with_markers(vec![
        WritableTxnMarker::default()
            .with_producer_id(WireProducerId(pid))
            .with_producer_epoch(epoch)
            .with_transaction_result(commit)
            .with_topics(topics)
            .with_coordinator_epoch(1)
            .with_transaction_version(tv),
    ]);
    let resp = c.call(&req, version).await.expect("write markers");
    resp.markers[0]
        .topics
        .iter()
        .flat_map(|t| t.partitions.iter().map(|p| p.error_code))
        .collect()
}

async fn latest(c: &mut Conn, partition: i32, read_committed: bool) -> i64 {
    use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
    let req = ListOffsetsRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_isolation_level(i8::from(read_committed))
        .with_topics(vec![
            ListOffsetsTopic::default()
                .with_name(TopicName(sb("t")))
                .with_partitions(vec![
                    ListOffsetsPartition::default()
                        .with_partition_index(partition)
                        .with_timestamp(-1),
                ]),
        ]);
    let resp = c.call(&req, 5).await.expect("list offsets");
    let p = &resp.topics[0].partitions[0];
    assert_eq!(p.error_code, 0);
    p.offset
}

fn values(f: &Fetched) -> Vec<&str> {
    f.records.iter().map(|(_, v)| v.as_str()).collect()
}

/// Kafka's partition of `group` in `__consumer_offsets` with 5 partitions.
fn offsets_partition(group: &str) -> i32 {
    i32::try_from(txn_log::kafka_partition_for(
        txn_log::java_string_hash(group),
        5,
    ))
    .unwrap()
}

async fn fetch_offset(c: &mut Conn, group: &str, partition: i32) -> (i16, i64) {
    use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
    let req = OffsetFetchRequest::default()
        .with_group_id(GroupId(sb(group)))
        .with_require_stable(true)
        .with_topics(Some(vec![
            OffsetFetchRequestTopic::default()
                .with_name(TopicName(sb("t")))
                .with_partition_indexes(vec![partition]),
        ]));
    let resp = c.call(&req, 7).await.expect("offset fetch");
    assert_eq!(resp.error_code, 0);
    let p = &resp.topics[0].partitions[0];
    (p.error_code, p.committed_offset)
}

#[tokio::test]
async fn api_versions_and_metadata_advertise_what_librdkafka_needs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let b = start(dir.path());
    let mut c = connect(&b).await;
    let v = c
        .call(&ApiVersionsRequest::default(), 3)
        .await
        .expect("api versions");
    assert_eq!(v.error_code, 0);
    let versions = Versions::of(&v);
    let range = |k: ApiKey| versions.range(k);
    assert!(range(ApiKey::Fetch).is_some_and(|(lo, hi)| lo <= 4 && hi >= 4));
    assert!(range(ApiKey::Produce).is_some_and(|(lo, hi)| lo <= 3 && hi >= 3));
    assert_eq!(
        range(ApiKey::WriteTxnMarkers),
        Some((1, 2)),
        "KIP-1228's v2"
    );
    assert!(range(ApiKey::InitProducerId).is_some());

    let md = c
        .call(&MetadataRequest::default().with_topics(None), 12)
        .await
        .expect("metadata");
    // this broker, and the standalone coordinator's node (so clients can reach it)
    assert_eq!(md.brokers.len(), 2);
    assert_eq!(md.brokers[0].port, i32::from(b.addr().port()));
    assert_eq!(
        (md.brokers[1].node_id, md.brokers[1].port),
        (BrokerId(1000), 9)
    );
    let t = md
        .topics
        .iter()
        .find(|t| t.name.as_ref().map(|n| n.0.as_str()) == Some("t"));
    let t = t.expect("topic t listed");
    assert_eq!(t.partitions.len(), 2);
    assert!(t.partitions.iter().all(|p| p.leader_id == BrokerId(1)));

    let fc = c
        .call(
            &FindCoordinatorRequest::default()
                .with_key_type(1)
                .with_key(sb("tx")),
            2,
        )
        .await
        .expect("find coordinator");
    // FindCoordinator is relayed to the daemon; nothing listens on port 9, so the client is
    // told to retry (COORDINATOR_NOT_AVAILABLE), as Kafka answers while no coordinator is up.
    assert_eq!((fc.error_code, fc.node_id, fc.port), (15, BrokerId(-1), -1));
}

#[tokio::test]
async fn transactions_markers_and_read_committed_survive_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut b = start(dir.path());
    let mut c = connect(&b).await;

    // plain producer
    assert_eq!(
        produce(&mut c, 0, batch(None, false, 3, "plain"), None).await,
        (0, 0)
    );
    // idempotent producer: a retry is acknowledged with the original offset, a gap refused
    let idem = batch(Some((5000, 0, 0)), false, 2, "idem");
    assert_eq!(produce(&mut c, 0, idem.clone(), None).await, (0, 3));
    assert_eq!(produce(&mut c, 0, idem.clone(), None).await, (0, 3));
    let gap = batch(Some((5000, 0, 7)), false, 1, "gap");
    assert_eq!(produce(&mut c, 0, gap, None).await.0, 45);

    // transaction 1 (producer 6000) is aborted, transaction 2 committed
    let tx1 = batch(Some((6000, 0, 0)), true, 2, "aborted");
    assert_eq!(produce(&mut c, 0, tx1, Some("tx")).await, (0, 5));
    assert_eq!(
        latest(&mut c, 0, true).await,
        5,
        "the open transaction holds the LSO"
    );
    assert_eq!(latest(&mut c, 0, false).await, 7);
    let f = fetch(&mut c, 0, 0, true).await;
    assert_eq!(f.last_stable_offset, 5);
    assert_eq!(
        values(&f),
        ["plain-0", "plain-1", "plain-2", "idem-0", "idem-1"]
    );
    assert_eq!(marker(&mut c, 6000, 0, false, &[("t", 0)]).await, vec![0]);
    let tx2 = batch(Some((6000, 0, 2)), true, 1, "committed");
    assert_eq!(produce(&mut c, 0, tx2, Some("tx")).await, (0, 8));
    assert_eq!(marker(&mut c, 6000, 0, true, &[("t", 0)]).await, vec![0]);

    let f = fetch(&mut c, 0, 5, true).await;
    assert_eq!(
        (f.error, f.high_watermark, f.last_stable_offset),
        (0, 10, 10)
    );
    assert_eq!(f.aborted, Some(vec![(6000, 5)]));
    assert_eq!(
        values(&f),
        [
            "aborted-0",
            "aborted-1",
            "<control>",
            "committed-0",
            "<control>"
        ],
        "data and control batches are served as stored; the client drops aborted ones"
    );
    let f = fetch(&mut c, 0, 5, false).await;
    assert_eq!(f.aborted, None);

    // a third transaction stays open across the restart
    let tx3 = batch(Some((6000, 0, 3)), true, 1, "open");
    assert_eq!(produce(&mut c, 0, tx3, Some("tx")).await, (0, 10));
    // a zombie with an older epoch is fenced once a newer epoch wrote
    let newer = batch(Some((7000, 1, 0)), false, 1, "new-epoch");
    assert_eq!(produce(&mut c, 1, newer, None).await, (0, 0));
    let zombie = batch(Some((7000, 0, 1)), false, 1, "zombie");
    assert_eq!(produce(&mut c, 1, zombie, None).await.0, 47);
    // a marker from an older producer epoch is refused
    assert_eq!(marker(&mut c, 7000, 0, false, &[("t", 1)]).await, vec![47]);
    // unknown partitions are refused per partition
    assert_eq!(marker(&mut c, 6000, 0, true, &[("nope", 0)]).await, vec![3]);
    drop(c);

    b.kill();
    let b = start(dir.path());
    let mut c = connect(&b).await;
    assert_eq!(latest(&mut c, 0, false).await, 11);
    assert_eq!(
        latest(&mut c, 0, true).await,
        10,
        "replay restores the open transaction"
    );
    assert_eq!(
        produce(&mut c, 0, idem, None).await,
        (0, 3),
        "replay restores duplicate detection"
    );
    assert_eq!(marker(&mut c, 6000, 0, false, &[("t", 0)]).await, vec![0]);
    let f = fetch(&mut c, 0, 0, true).await;
    assert_eq!(f.last_stable_offset, 12);
    assert_eq!(f.aborted, Some(vec![(6000, 5), (6000, 10)]));
    let f = fetch(&mut c, 0, 13, false).await;
    assert_eq!(
        f.error, 1,
        "offset beyond the log end is OFFSET_OUT_OF_RANGE"
    );
}

/// KIP-1228 on the wire: the broker hands a v2 marker's `TransactionVersion` to the
/// participant. Data at epoch 0: a TV2 marker at epoch 0 is refused (INVALID_PRODUCER_EPOCH),
/// at 1 accepted; a TV1 marker at the data's epoch is accepted, and so is a v1 marker (no field).
#[tokio::test]
async fn a_v2_marker_carries_its_transaction_version_to_the_epoch_rule() {
    let dir = tempfile::tempdir().expect("tempdir");
    let b = start(dir.path());
    let mut c = connect(&b).await;
    let open = |pid: i64| batch(Some((pid, 0, 0)), true, 1, "open");
    assert_eq!(produce(&mut c, 1, open(8000), Some("tx")).await.0, 0);
    assert_eq!(
        marker_tv(&mut c, 2, 2, 8000, 0, true, &[("t", 1)]).await,
        vec![47],
        "TV2 at the data's epoch"
    );
    assert_eq!(
        marker_tv(&mut c, 2, 2, 8000, 1, true, &[("t", 1)]).await,
        vec![0],
        "TV2 at epoch + 1"
    );
    assert_eq!(produce(&mut c, 1, open(8001), Some("tx")).await.0, 0);
    assert_eq!(
        marker_tv(&mut c, 2, 1, 8001, 0, true, &[("t", 1)]).await,
        vec![0],
        "TV1 at the data's epoch"
    );
    assert_eq!(produce(&mut c, 1, open(8002), Some("tx")).await.0, 0);
    assert_eq!(
        marker_tv(&mut c, 1, 2, 8002, 0, true, &[("t", 1)]).await,
        vec![0],
        "v1 carries no version: TV0's rule"
    );
}

#[tokio::test]
async fn txn_offset_commits_become_visible_with_the_commit_marker() {
    use kafka_protocol::messages::offset_commit_request::{
        OffsetCommitRequestPartition, OffsetCommitRequestTopic,
    };
    use kafka_protocol::messages::txn_offset_commit_request::{
        TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let mut b = start(dir.path());
    let mut c = connect(&b).await;
    let group = "g1";
    let op = offsets_partition(group);

    let plain = OffsetCommitRequest::default()
        .with_group_id(GroupId(sb(group)))
        .with_generation_id_or_member_epoch(-1)
        .with_topics(vec![
            OffsetCommitRequestTopic::default()
                .with_name(TopicName(sb("t")))
                .with_partitions(vec![
                    OffsetCommitRequestPartition::default()
                        .with_partition_index(0)
                        .with_committed_offset(4),
                ]),
        ]);
    let r = c.call(&plain, 8).await.expect("offset commit");
    assert_eq!(r.topics[0].partitions[0].error_code, 0);
    assert_eq!(fetch_offset(&mut c, group, 0).await, (0, 4));

    let txn_commit = |epoch: i16, offset: i64| {
        TxnOffsetCommitRequest::default()
            .with_transactional_id(TransactionalId(sb("tx")))
            .with_group_id(GroupId(sb(group)))
            .with_producer_id(WireProducerId(8000))
            .with_producer_epoch(epoch)
            .with_generation_id(-1)
            .with_topics(vec![
                TxnOffsetCommitRequestTopic::default()
                    .with_name(TopicName(sb("t")))
                    .with_partitions(vec![
                        TxnOffsetCommitRequestPartition::default()
                            .with_partition_index(0)
                            .with_committed_offset(offset),
                    ]),
            ])
    };
    let r = c
        .call(&txn_commit(0, 9), 3)
        .await
        .expect("txn offset commit");
    assert_eq!(r.topics[0].partitions[0].error_code, 0);
    assert_eq!(
        fetch_offset(&mut c, group, 0).await.0,
        88,
        "staged offsets make require_stable answer UNSTABLE_OFFSET_COMMIT"
    );
    assert_eq!(
        marker(&mut c, 8000, 0, false, &[("__consumer_offsets", op)]).await,
        vec![0]
    );
    assert_eq!(
        fetch_offset(&mut c, group, 0).await,
        (0, 4),
        "aborted: old offset"
    );

    let r = c
        .call(&txn_commit(0, 11), 3)
        .await
        .expect("txn offset commit");
    assert_eq!(r.topics[0].partitions[0].error_code, 0);
    assert_eq!(
        marker(&mut c, 8000, 0, true, &[("__consumer_offsets", op)]).await,
        vec![0]
    );
    assert_eq!(fetch_offset(&mut c, group, 0).await, (0, 11));

    // the producer's next epoch fences commits of the old one
    let r = c
        .call(&txn_commit(1, 12), 3)
        .await
        .expect("txn offset commit");
    assert_eq!(r.topics[0].partitions[0].error_code, 0);
    let r = c
        .call(&txn_commit(0, 13), 3)
        .await
        .expect("txn offset commit");
    assert_eq!(r.topics[0].partitions[0].error_code, 47);
    drop(c);

    b.kill();
    let b = start(dir.path());
    let mut c = connect(&b).await;
    assert_eq!(
        fetch_offset(&mut c, group, 0).await.0,
        88,
        "staged survives restart"
    );
    assert_eq!(
        marker(&mut c, 8000, 1, true, &[("__consumer_offsets", op)]).await,
        vec![0]
    );
    assert_eq!(fetch_offset(&mut c, group, 0).await, (0, 12));
}

#[tokio::test]
async fn a_single_member_group_joins_syncs_heartbeats_and_leaves() {
    use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
    use kafka_protocol::messages::leave_group_request::MemberIdentity;
    use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
    let dir = tempfile::tempdir().expect("tempdir");
    let b = start(dir.path());
    let mut c = connect(&b).await;
    let join = JoinGroupRequest::default()
        .with_group_id(GroupId(sb("cg")))
        .with_session_timeout_ms(10_000)
        .with_rebalance_timeout_ms(10_000)
        .with_protocol_type(sb("consumer"))
        .with_protocols(vec![
            JoinGroupRequestProtocol::default()
                .with_name(sb("range"))
                .with_metadata(Bytes::from_static(b"sub")),
        ]);
    let j = c.call(&join, 5).await.expect("join");
    assert_eq!(j.error_code, 0);
    assert_eq!(j.generation_id, 1);
    assert_eq!(j.leader, j.member_id);
    assert_eq!(j.members.len(), 1);
    assert_eq!(j.protocol_name.as_deref(), Some("range"));

    let sync = SyncGroupRequest::default()
        .with_group_id(GroupId(sb("cg")))
        .with_generation_id(1)
        .with_member_id(j.member_id.clone())
        .with_assignments(vec![
            SyncGroupRequestAssignment::default()
                .with_member_id(j.member_id.clone())
                .with_assignment(Bytes::from_static(b"assigned")),
        ]);
    let s = c.call(&sync, 4).await.expect("sync");
    assert_eq!((s.error_code, s.assignment.as_ref()), (0, &b"assigned"[..]));

    let hb = |generation| {
        HeartbeatRequest::default()
            .with_group_id(GroupId(sb("cg")))
            .with_generation_id(generation)
            .with_member_id(j.member_id.clone())
    };
    assert_eq!(c.call(&hb(1), 4).await.expect("heartbeat").error_code, 0);
    assert_eq!(c.call(&hb(0), 4).await.expect("heartbeat").error_code, 22);

    let leave = LeaveGroupRequest::default()
        .with_group_id(GroupId(sb("cg")))
        .with_members(vec![
            MemberIdentity::default().with_member_id(j.member_id.clone()),
        ]);
    let l = c.call(&leave, 4).await.expect("leave");
    assert_eq!((l.error_code, l.members[0].error_code), (0, 0));
    assert_eq!(c.call(&hb(1), 4).await.expect("heartbeat").error_code, 25);
}

#[tokio::test]
async fn a_second_member_triggers_a_rebalance_that_both_members_complete() {
    use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
    use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
    let dir = tempfile::tempdir().expect("tempdir");
    let b = start(dir.path());
    let join = |member: &StrBytes| {
        JoinGroupRequest::default()
            .with_group_id(GroupId(sb("two")))
            .with_session_timeout_ms(30_000)
            .with_rebalance_timeout_ms(30_000)
            .with_member_id(member.clone())
            .with_protocol_type(sb("consumer"))
            .with_protocols(vec![
                JoinGroupRequestProtocol::default()
                    .with_name(sb("range"))
                    .with_metadata(Bytes::from_static(b"sub")),
            ])
    };
    let mut a = connect(&b).await;
    let ja = a.call(&join(&sb("")), 5).await.expect("join a");
    assert_eq!((ja.error_code, ja.generation_id), (0, 1));
    let a_id = ja.member_id.clone();
    let sync = |member: &StrBytes, generation: i32, assignments: Vec<(StrBytes, &'static [u8])>| {
        SyncGroupRequest::default()
            .with_group_id(GroupId(sb("two")))
            .with_generation_id(generation)
            .with_member_id(member.clone())
            .with_assignments(
                assignments
                    .into_iter()
                    .map(|(m, bytes)| {
                        SyncGroupRequestAssignment::default()
                            .with_member_id(m)
                            .with_assignment(Bytes::from_static(bytes))
                    })
                    .collect(),
            )
    };
    let s = a
        .call(&sync(&a_id, 1, vec![(a_id.clone(), b"all")]), 4)
        .await
        .expect("sync a");
    assert_eq!(s.error_code, 0);

    // B joins: its JoinGroup waits for A to rejoin
    let mut bconn = connect(&b).await;
    let b_join = tokio::spawn(async move {
        let j = bconn.call(&join(&sb("")), 5).await.expect("join b");
        (bconn, j)
    });
    let hb = HeartbeatRequest::default()
        .with_group_id(GroupId(sb("two")))
        .with_generation_id(1)
        .with_member_id(a_id.clone());
    let mut seen_rebalance = false;
    for _ in 0..100 {
        let e = a.call(&hb, 4).await.expect("heartbeat").error_code;
        if e == 27 {
            seen_rebalance = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        seen_rebalance,
        "A learns of the rebalance from its heartbeat"
    );
    let ja2 = a.call(&join(&a_id), 5).await.expect("rejoin a");
    let (mut bconn, jb) = b_join.await.expect("join b task");
    assert_eq!((ja2.error_code, jb.error_code), (0, 0));
    assert_eq!((ja2.generation_id, jb.generation_id), (2, 2));
    assert_eq!(ja2.leader, a_id, "the old leader stays leader");
    assert_eq!(ja2.members.len(), 2, "the leader sees both subscriptions");
    assert!(jb.members.is_empty());
    let b_id = jb.member_id.clone();

    // B's sync waits for the leader's assignment
    let b_id2 = b_id.clone();
    let b_sync = tokio::spawn(async move {
        bconn
            .call(&sync(&b_id2, 2, Vec::new()), 4)
            .await
            .expect("sync b")
    });
    let sa = a
        .call(
            &sync(
                &a_id,
                2,
                vec![(a_id.clone(), b"half-a"), (b_id.clone(), b"half-b")],
            ),
            4,
        )
        .await
        .expect("sync a");
    let sb_resp = b_sync.await.expect("sync b task");
    assert_eq!((sa.error_code, sa.assignment.as_ref()), (0, &b"half-a"[..]));
    assert_eq!(
        (sb_resp.error_code, sb_resp.assignment.as_ref()),
        (0, &b"half-b"[..])
    );
    let stale = a.call(&sync(&a_id, 1, Vec::new()), 4).await.expect("sync");
    assert_eq!(
        stale.error_code, 22,
        "an old generation is ILLEGAL_GENERATION"
    );
}

#[tokio::test]
async fn a_torn_tail_is_truncated_on_restart_and_appends_continue_after_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut b = start(dir.path());
    let mut c = connect(&b).await;
    assert_eq!(
        produce(&mut c, 0, batch(None, false, 2, "kept"), None).await,
        (0, 0)
    );
    drop(c);
    b.kill();
    // a crash in the middle of an append: half of what was being written at the end of the
    // broker's journal
    let seg = dir.path().join("journal.log");
    let half = batch(None, false, 3, "torn");
    let mut bytes = std::fs::read(&seg).expect("journal");
    bytes.extend_from_slice(&half[..half.len() / 2]);
    std::fs::write(&seg, &bytes).expect("write torn tail");

    let b = start(dir.path());
    let mut c = connect(&b).await;
    assert_eq!(latest(&mut c, 0, false).await, 2);
    assert_eq!(
        produce(&mut c, 0, batch(None, false, 1, "next"), None).await,
        (0, 2)
    );
    let f = fetch(&mut c, 0, 0, false).await;
    assert_eq!(values(&f), ["kept-0", "kept-1", "next-0"]);
}

/// A script that reads the first "listening" line and closes the pipe must not kill the broker
/// (`println!` panics once stdout is closed; the bench smoke run lost its broker that way).
#[tokio::test]
async fn a_closed_stdout_does_not_stop_the_broker() {
    let port = wire::free_port();
    let dir = tempfile::tempdir().expect("tempdir");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_refbroker"))
        .args(["--listen", &format!("127.0.0.1:{port}"), "--data-dir"])
        .arg(dir.path())
        .args(["--topics", "t:1", "--embedded-coordinator"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn refbroker");
    drop(child.stdout.take());
    let mut answered = None;
    for _ in 0..200 {
        if let Ok(mut c) = wire::try_connect(("127.0.0.1", port), "closed-stdout").await
            && let Ok(r) = c.call(&ApiVersionsRequest::default(), 3).await
        {
            answered = Some(r.error_code);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // a second connection after the broker has long announced its listeners
    tokio::time::sleep(Duration::from_millis(200)).await;
    let again = match wire::try_connect(("127.0.0.1", port), "closed-stdout").await {
        Ok(mut c) => c
            .call(&ApiVersionsRequest::default(), 3)
            .await
            .map(|r| r.error_code)
            .ok(),
        Err(_) => None,
    };
    let alive = child.try_wait().expect("try_wait").is_none();
    let _ = child.kill();
    let _ = child.wait();
    assert!(alive, "the broker exited once its stdout was closed");
    assert_eq!(
        (answered, again),
        (Some(0), Some(0)),
        "ApiVersions answered"
    );
}
