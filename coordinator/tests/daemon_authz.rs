//! Authorization over the wire: the real daemon with Kafka's standard authorizer, clients as
//! `User:ANONYMOUS` on PLAINTEXT (Kafka accepts ACLs for it), ACLs bootstrapped offline with
//! `txn-coordinator acl add` and then managed with CreateAcls / DescribeAcls; SCRAM credentials
//! with AlterUserScramCredentials / DescribeUserScramCredentials; both kept across a restart.
#![cfg(feature = "daemon")]

mod daemon_support;

use daemon_support::*;
use kafka_protocol::messages as km;
use markers::wire::KafkaConnection;
use tokio::net::TcpStream;

const AUTHORIZER: &str =
    "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer";

/// CreateAcls (v3) of `creations` on `c`.
async fn create_acls(
    c: &mut KafkaConnection<TcpStream>,
    creations: Vec<km::create_acls_request::AclCreation>,
) -> km::CreateAclsResponse {
    c.call(
        &km::CreateAclsRequest::default().with_creations(creations),
        3,
    )
    .await
    .expect("create")
}

fn creation(
    rt: i8,
    name: &str,
    pattern: i8,
    op: i8,
    permission: i8,
) -> km::create_acls_request::AclCreation {
    km::create_acls_request::AclCreation::default()
        .with_resource_type(rt)
        .with_resource_name(s(name))
        .with_resource_pattern_type(pattern)
        .with_principal(s("User:ANONYMOUS"))
        .with_host(s("*"))
        .with_operation(op)
        .with_permission_type(permission)
}

// Kafka's codes.
/// Allows `User:ANONYMOUS` operation `op` on the cluster with the offline `acl add` of the
/// daemon's CLI on data directory `data` (`extra`: more arguments, such as `--set`s).
fn allow_on_cluster_offline(data: &str, op: &str, extra: &[&str]) {
    let mut args = vec![
        "acl",
        "add",
        "--principal",
        "User:ANONYMOUS",
        "--resource-type",
        "Cluster",
        "--resource-name",
        "kafka-cluster",
        "--operation",
        op,
        "--data-dir",
        data,
    ];
    args.extend_from_slice(extra);
    let (st, out, err) = run_cli(&args);
    assert!(st.success(), "{out}{err}");
}

const TRANSACTIONAL_ID: i8 = 5;
const LITERAL: i8 = 3;
const PREFIXED: i8 = 4;
const WRITE: i8 = 4;
const DESCRIBE: i8 = 8;
const ALLOW: i8 = 3;
const DENY: i8 = 2;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acls_decide_and_a_denied_request_leaves_no_state() {
    let dir = tempfile::tempdir().expect("tmp");
    let data = dir.path().to_str().expect("utf-8").to_owned();
    // The administrator's rights, offline: ALTER and DESCRIBE on the cluster, nothing else.
    for op in ["Alter", "Describe"] {
        allow_on_cluster_offline(
            &data,
            op,
            &["--set", "transaction.state.log.num.partitions=5"],
        );
    }
    let args = [
        "--set",
        AUTHORIZER,
        "--set",
        "transaction.state.log.num.partitions=5",
    ];
    let mut d = Daemon::start(dir.path(), &args);
    let mut c = d.conn().await;

    // No ACL on the id: denied, and nothing of it is stored.
    let r = c
        .call(&init_req(Some("app-1"), 60_000), 4)
        .await
        .expect("init");
    assert_eq!(r.error_code, 53, "TRANSACTIONAL_ID_AUTHORIZATION_FAILED");
    let r = create_acls(
        &mut c,
        vec![creation(
            TRANSACTIONAL_ID,
            "app-",
            PREFIXED,
            DESCRIBE,
            ALLOW,
        )],
    )
    .await;
    assert_eq!(r.results[0].error_code, 0);
    assert_eq!(
        describe(&mut c, "app-1").await.error_code,
        105,
        "the denied InitProducerId left no transactional id"
    );

    // WRITE on the prefix: allowed; a literal DENY wins over it.
    let r = create_acls(
        &mut c,
        vec![
            creation(TRANSACTIONAL_ID, "app-", PREFIXED, WRITE, ALLOW),
            creation(TRANSACTIONAL_ID, "app-blocked", LITERAL, WRITE, DENY),
            creation(TRANSACTIONAL_ID, "", LITERAL, WRITE, ALLOW),
        ],
    )
    .await;
    let codes: Vec<i16> = r.results.iter().map(|x| x.error_code).collect();
    assert_eq!(codes, vec![0, 0, 42], "an empty name is INVALID_REQUEST");
    init_ok(&mut c, "app-1", 60_000).await;
    let r = c
        .call(&init_req(Some("app-blocked"), 60_000), 4)
        .await
        .expect("init");
    assert_eq!(r.error_code, 53, "DENY wins");
    let r = c
        .call(&init_req(Some("other"), 60_000), 4)
        .await
        .expect("init");
    assert_eq!(r.error_code, 53);

    let r = c
        .call(&describe_all_acls_req(), 3)
        .await
        .expect("describe acls");
    assert_eq!(r.error_code, 0);
    let n: usize = r.resources.iter().map(|x| x.acls.len()).sum();
    assert_eq!(n, 5, "2 offline + 3 created (one was invalid)");

    // SCRAM credentials through AlterUserScramCredentials.
    let salt = b"0123456789abcdef".to_vec();
    let salted = security::sasl::ScramMechanism::Sha256.salted_password("pw", &salt, 4096);
    let r = c
        .call(
            &km::AlterUserScramCredentialsRequest::default().with_upsertions(vec![
                km::alter_user_scram_credentials_request::ScramCredentialUpsertion::default()
                    .with_name(s("alice"))
                    .with_mechanism(1)
                    .with_iterations(4096)
                    .with_salt(salt.into())
                    .with_salted_password(salted.into()),
            ]),
            0,
        )
        .await
        .expect("alter scram");
    assert_eq!(
        r.results[0].error_code, 0,
        "{:?}",
        r.results[0].error_message
    );

    // Everything survives a restart.
    d.terminate();
    let d = Daemon::start(dir.path(), &args);
    let mut c = d.conn().await;
    let r = c
        .call(&init_req(Some("app-blocked"), 60_000), 4)
        .await
        .expect("init");
    assert_eq!(r.error_code, 53);
    init_ok(&mut c, "app-2", 60_000).await;
    let r = c
        .call(&km::DescribeUserScramCredentialsRequest::default(), 0)
        .await
        .expect("describe scram");
    assert_eq!(r.results.len(), 1);
    assert_eq!(r.results[0].user.as_str(), "alice");
    assert_eq!(r.results[0].credential_infos[0].iterations, 4096);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_authorizer_nothing_is_checked_and_acls_are_disabled() {
    let dir = tempfile::tempdir().expect("tmp");
    let d = Daemon::start(
        dir.path(),
        &["--set", "transaction.state.log.num.partitions=5"],
    );
    let mut c = d.conn().await;
    init_ok(&mut c, "free", 60_000).await;
    let r = create_acls(
        &mut c,
        vec![creation(TRANSACTIONAL_ID, "x", LITERAL, WRITE, ALLOW)],
    )
    .await;
    assert_eq!(r.results[0].error_code, 54, "SECURITY_DISABLED");
}

/// KIP-939: InitProducerId v6 with `Enable2Pc` needs TWO_PHASE_COMMIT (Kafka's operation 15)
/// on the transactional id besides WRITE, as Kafka's `KafkaApis` checks it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enable_2pc_needs_two_phase_commit_on_the_id() {
    const TWO_PHASE_COMMIT: i8 = 15;
    let dir = tempfile::tempdir().expect("tmp");
    let data = dir.path().to_str().expect("utf-8").to_owned();
    allow_on_cluster_offline(&data, "Alter", &[]);
    let d = Daemon::start(
        dir.path(),
        &[
            "--set",
            AUTHORIZER,
            "--set",
            "transaction.two.phase.commit.enable=true",
        ],
    );
    let mut c = d.conn().await;
    let grant = async |c: &mut KafkaConnection<TcpStream>, op| {
        let r = c
            .call(
                &km::CreateAclsRequest::default().with_creations(vec![creation(
                    TRANSACTIONAL_ID,
                    "xa",
                    LITERAL,
                    op,
                    ALLOW,
                )]),
                3,
            )
            .await
            .expect("create");
        assert_eq!(r.results[0].error_code, 0, "operation {op}");
    };
    let init_2pc = init_req(Some("xa"), 60_000).with_enable_2_pc(true);
    grant(&mut c, WRITE).await;
    let r = c.call(&init_2pc, 6).await.expect("init");
    assert_eq!(r.error_code, 53, "WRITE alone");
    init_ok(&mut c, "xa", 60_000).await;
    grant(&mut c, TWO_PHASE_COMMIT).await;
    let mut code = -1;
    for _ in 0..100 {
        code = c.call(&init_2pc, 6).await.expect("init").error_code;
        if code != 51 && code != 14 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(code, 0, "WRITE and TWO_PHASE_COMMIT");
}
