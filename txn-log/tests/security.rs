//! `SecurityStore` on the in-memory and sled logs: round trip, persistence across reopen, and
//! corruption reported as `Corrupt` (never skipped).

use ::security::acl::{
    AccessControlEntry, AclBinding, AclOperation, AclPermissionType, ResourcePattern, ResourceType,
};
use txn_log::mem::block_on;
use txn_log::security::{self as store, SecurityChange};
use txn_log::suite::security_store_round_trip;
use txn_log::{LogError, MemTxnLog, SecurityStore};

fn a_binding() -> AclBinding {
    AclBinding::new(
        ResourcePattern::prefixed(ResourceType::TransactionalId, "orders-"),
        AccessControlEntry::new(
            "User:bob",
            "*",
            AclOperation::Write,
            AclPermissionType::Deny,
        ),
    )
}

#[test]
fn mem_round_trip() {
    block_on(security_store_round_trip(&MemTxnLog::new()));
}

#[test]
fn mem_corruption_is_reported() {
    let log = MemTxnLog::new();
    let (k, mut v) = store::encode_acl(&a_binding()).unwrap();
    let last = v.len() - 1;
    v[last] ^= 1;
    log.put_raw_security(k, v);
    assert!(matches!(
        block_on(log.load_security()),
        Err(LogError::Corrupt { .. })
    ));
}

#[cfg(feature = "sled")]
mod sled {
    use super::*;
    use txn_log::SledTxnLog;

    #[tokio::test]
    async fn sled_round_trip_and_reopen() {
        let dir = tempfile::tempdir().unwrap();
        {
            let log = SledTxnLog::open_path(dir.path()).unwrap();
            security_store_round_trip(&log).await;
            log.apply_security(&[SecurityChange::PutAcl(a_binding())])
                .await
                .unwrap();
            log.shutdown();
        }
        let log = SledTxnLog::open_path(dir.path()).unwrap();
        let snap = log.load_security().await.unwrap();
        assert!(snap.acls.contains(&a_binding()));
        assert_eq!(snap.acls.len(), 2);
        assert_eq!(snap.credentials.len(), 2);
        // The transaction records do not see the security tree.
        assert_eq!(log.verify_all().unwrap(), 0);
    }

    #[tokio::test]
    async fn sled_corruption_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        {
            let log = SledTxnLog::open_path(dir.path()).unwrap();
            log.apply_security(&[SecurityChange::PutAcl(a_binding())])
                .await
                .unwrap();
            log.shutdown();
        }
        {
            let db = ::sled::open(dir.path()).unwrap();
            let tree = db.open_tree(b"security").unwrap();
            let (k, v) = tree.iter().next().unwrap().unwrap();
            let mut v = v.to_vec();
            v[7] ^= 0x40;
            tree.insert(k, v).unwrap();
            db.flush().unwrap();
        }
        let log = SledTxnLog::open_path(dir.path()).unwrap();
        let err = log.load_security().await.unwrap_err();
        assert!(matches!(err, LogError::Corrupt { .. }), "{err:?}");
    }
}
