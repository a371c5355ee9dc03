//! `SecurityStore` on `EtcdTxnLog` against a real etcd cluster (started here): the round trip
//! of ACL bindings and SCRAM credentials, and one coordinator's change seen by another
//! connection (corruption is checked on the codec, `txn-log/src/security.rs`).

use txn_log::SecurityChange;
use txn_log::suite::security_store_round_trip;
use txn_log::{EtcdTxnLog, SecurityStore};
use txn_tests::etcd::EtcdCluster;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn security_records_in_etcd() {
    let cluster = EtcdCluster::start(3).await.expect("etcd cluster");
    let a = EtcdTxnLog::connect(cluster.config("/sec"))
        .await
        .expect("connect");
    security_store_round_trip(&a).await;

    // Another coordinator's connection on the same prefix sees the same records.
    let b = EtcdTxnLog::connect(cluster.config("/sec"))
        .await
        .expect("connect");
    assert_eq!(
        a.load_security().await.expect("a"),
        b.load_security().await.expect("b")
    );

    // A deletion through one connection is seen by the other.
    let binding = a.load_security().await.expect("load").acls[0].clone();
    a.apply_security(&[SecurityChange::DeleteAcl(binding.clone())])
        .await
        .expect("delete");
    assert!(!b.load_security().await.expect("b").acls.contains(&binding));
}
