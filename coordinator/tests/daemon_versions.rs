//! Every advertised API at every advertised version, against the real daemon: each answer
//! decodes at the request's version and carries the expected result.
#![cfg(feature = "daemon")]

mod daemon_support;

use daemon_support::*;
use kafka_protocol::messages as km;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_api_at_every_version() {
    let broker = FakeBroker::start().await;
    let bs = broker.addr.to_string();
    let dir = tempfile::tempdir().expect("tmp");
    let d = Daemon::start(
        dir.path(),
        &[
            "--bootstrap-servers",
            &bs,
            "--node-id",
            "9",
            "--set",
            "transaction.state.log.num.partitions=4",
        ],
    );
    let mut c = d.conn().await;
    let port = i32::from(d.addr.port());

    for v in 0..=12 {
        let topics = if v == 0 {
            vec![
                km::metadata_request::MetadataRequestTopic::default()
                    .with_name(Some(km::TopicName(s("t")))),
            ]
        } else {
            vec![
                km::metadata_request::MetadataRequestTopic::default()
                    .with_name(Some(km::TopicName(s("t2")))),
            ]
        };
        let r = c
            .call(&km::MetadataRequest::default().with_topics(Some(topics)), v)
            .await
            .expect("metadata");
        assert!(
            r.brokers.iter().any(|b| b.node_id.0 == 9 && b.port == port),
            "Metadata v{v}"
        );
        assert!(r.brokers.iter().any(|b| b.node_id.0 == 1), "Metadata v{v}");
        assert_eq!(r.topics.len(), 1, "Metadata v{v}");
        assert_eq!(r.topics[0].partitions.len(), 3, "Metadata v{v}");
    }
    for v in 0..=6 {
        for (key_type, node) in [(1i8, 9), (0, 1)] {
            if v == 0 && key_type == 1 {
                continue; // v0 has no key type: it is always a group lookup.
            }
            let req = if v >= 4 {
                km::FindCoordinatorRequest::default()
                    .with_key_type(key_type)
                    .with_coordinator_keys(vec![s("k1"), s("k2")])
            } else {
                km::FindCoordinatorRequest::default()
                    .with_key_type(key_type)
                    .with_key(s("k1"))
            };
            let r = c.call(&req, v).await.expect("find coordinator");
            if v >= 4 {
                assert_eq!(r.coordinators.len(), 2, "v{v}");
                assert!(
                    r.coordinators
                        .iter()
                        .all(|x| x.error_code == 0 && x.node_id.0 == node),
                    "v{v} {r:?}"
                );
            } else {
                assert_eq!(
                    (r.error_code, r.node_id.0),
                    (0, node),
                    "FindCoordinator v{v} type {key_type}"
                );
            }
        }
    }
    for v in 0..=5 {
        let id = format!("ver-{v}");
        let mut r = c.call(&init_req(Some(&id), 30_000), v).await.expect("init");
        for _ in 0..100 {
            if r.error_code != 14 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            r = c.call(&init_req(Some(&id), 30_000), v).await.expect("init");
        }
        assert_eq!(r.error_code, 0, "InitProducerId v{v}");
        let (pid, epoch) = (r.producer_id.0, r.producer_epoch);
        if v <= 3 {
            let r = c
                .call(&add_req_v3(&id, pid, epoch, &[("t", 0), ("t2", 1)]), v)
                .await
                .expect("add");
            assert_eq!(
                add_errors(&r),
                vec![("t".into(), 0, 0), ("t2".into(), 1, 0)],
                "AddPartitionsToTxn v{v}"
            );
        } else {
            // v4+: the broker-to-broker batch; add through v3, then verify through v4/v5.
            let r = c
                .call(&add_req_v3(&id, pid, epoch, &[("t", 0)]), 3)
                .await
                .expect("add");
            assert_eq!(add_errors(&r), vec![("t".into(), 0, 0)]);
            let batch = km::AddPartitionsToTxnRequest::default().with_transactions(vec![
                km::add_partitions_to_txn_request::AddPartitionsToTxnTransaction::default()
                    .with_transactional_id(km::TransactionalId(s(&id)))
                    .with_producer_id(km::ProducerId(pid))
                    .with_producer_epoch(epoch)
                    .with_verify_only(true)
                    .with_topics(vec![
                        km::add_partitions_to_txn_request::AddPartitionsToTxnTopic::default()
                            .with_name(km::TopicName(s("t")))
                            .with_partitions(vec![0, 1]),
                    ]),
            ]);
            let r = c.call(&batch, v).await.expect("verify");
            assert_eq!(r.error_code, 0);
            assert_eq!(r.results_by_transaction.len(), 1);
            let mut got: Vec<(i32, i16)> = r.results_by_transaction[0].topic_results[0]
                .results_by_partition
                .iter()
                .map(|p| (p.partition_index, p.partition_error_code))
                .collect();
            got.sort_unstable();
            // t-0 is in the transaction; t-1 is not (TRANSACTION_ABORTABLE for a verification).
            assert_eq!(got[0], (0, 0), "AddPartitionsToTxn v{v} verify");
            assert_ne!(got[1].1, 0, "AddPartitionsToTxn v{v} verify");
        }
        if v <= 4 {
            let r = c
                .call(
                    &km::AddOffsetsToTxnRequest::default()
                        .with_transactional_id(km::TransactionalId(s(&id)))
                        .with_producer_id(km::ProducerId(pid))
                        .with_producer_epoch(epoch)
                        .with_group_id(km::GroupId(s("g"))),
                    v,
                )
                .await
                .expect("add offsets");
            assert_eq!(r.error_code, 0, "AddOffsetsToTxn v{v}");
        }
        let r = c
            .call(&end_req(&id, pid, epoch, true), v)
            .await
            .expect("end");
        assert_eq!(r.error_code, 0, "EndTxn v{v}");
        if v >= 5 {
            assert_eq!(r.producer_id.0, pid);
            assert_eq!(
                r.producer_epoch,
                epoch + 1,
                "TV2 bumps the epoch at the end"
            );
        }
        wait_state(&mut c, &id, "CompleteCommit").await;
        // The markers went as WriteTxnMarkers v2 (the fake lists it) with the transaction's
        // version: TV2 from EndTxn v5, TV0 below.
        let tvs: Vec<i8> = broker
            .markers()
            .iter()
            .flat_map(|r| r.markers.iter())
            .filter(|m| m.producer_id.0 == pid)
            .map(|m| m.transaction_version)
            .collect();
        let want = if v >= 5 { 2 } else { 0 };
        assert!(
            !tvs.is_empty() && tvs.iter().all(|&t| t == want),
            "EndTxn v{v}: marker transaction versions {tvs:?}"
        );
    }
    let d0 = describe(&mut c, "ver-0").await;
    assert_eq!(d0.error_code, 0);
    for v in 0..=1 {
        let r = c
            .call(
                &km::ListTransactionsRequest::default()
                    .with_state_filters(vec![s("CompleteCommit")]),
                v,
            )
            .await
            .expect("list");
        assert_eq!(r.error_code, 0);
        assert_eq!(r.transaction_states.len(), 6, "ListTransactions v{v}");
    }
}
