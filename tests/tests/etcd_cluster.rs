//! Three daemons on one log in a 3-member etcd cluster (`txn.log.backend=etcd`): the log
//! partitions spread over the live daemons, FindCoordinator and Metadata agree on every
//! daemon, and when the owner of a transactional id is SIGKILLed a survivor takes its
//! partitions over within the lease TTL and the id's transactions go on there.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use kafka_protocol::messages::{self as km};
use kafka_protocol::protocol::StrBytes;
use txn_testkit::pool::Pool;
use txn_tests::etcd::requests::{find, init_at_owner};
use txn_tests::etcd::{EtcdCluster, daemon_on_etcd};
use txn_tests::fault::process::{Proc, bin_path};

const LEASE_MS: u64 = 2000;

/// The tests run one at a time. Each starts its own three etcd members and its daemons, and on
/// the two cores of the CI machine one test's cluster must not take CPU from another's
/// elections: an etcd election that takes most of a lease makes a daemon give its partitions up,
/// which `one_dead_etcd_member_does_not_cost_a_daemon_its_lease` counts as a failure
/// (docs/reliability.md).
static ONE_CLUSTER_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Daemon `node` on the etcd log with a short lease and 12 log partitions.
fn daemon(node: i32, endpoints: &str, dir: &std::path::Path) -> Proc {
    let lease = format!("etcd.lease.ttl.ms={LEASE_MS}");
    let extra = [
        "--set",
        lease.as_str(),
        "--set",
        "transaction.state.log.num.partitions=12",
    ];
    daemon_on_etcd(node, endpoints, dir, &extra).expect("daemon starts")
}

/// Daemons 1..=n on a fresh three-member etcd cluster, started while holding
/// `ONE_CLUSTER_AT_A_TIME`; everything is stopped on drop, the daemons first.
struct Cluster {
    daemons: Vec<Proc>,
    /// Where each daemon listens, by index (node id - 1).
    addrs: Vec<SocketAddr>,
    _etcd: EtcdCluster,
    _dir: tempfile::TempDir,
    _one: tokio::sync::MutexGuard<'static, ()>,
}

async fn cluster(n: i32) -> Cluster {
    let one = ONE_CLUSTER_AT_A_TIME.lock().await;
    let etcd = EtcdCluster::start(3).await.expect("etcd");
    let dir = tempfile::tempdir().expect("tmp");
    let endpoints = etcd.endpoints_arg();
    let daemons: Vec<Proc> = (1..=n).map(|i| daemon(i, &endpoints, dir.path())).collect();
    let addrs = daemons.iter().map(|d| d.addr().expect("addr")).collect();
    Cluster {
        daemons,
        addrs,
        _etcd: etcd,
        _dir: dir,
        _one: one,
    }
}

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitions_spread_and_move_to_survivors_when_an_owner_dies() {
    let mut c = cluster(3).await;
    let addrs = c.addrs.clone();
    let mut pool = Pool::new("etcd-cluster-test", Duration::from_secs(5));

    // Every daemon sees the three members and names the same owner for each id.
    let ids: Vec<String> = (0..24).map(|i| format!("tx-{i}")).collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    let owners = loop {
        let mut answers = Vec::new();
        for id in &ids {
            let per_daemon: Vec<Option<(i32, SocketAddr)>> = {
                let mut v = Vec::new();
                for &a in &addrs {
                    v.push(find(&mut pool, a, id).await);
                }
                v
            };
            answers.push(per_daemon);
        }
        let agreed = answers
            .iter()
            .all(|v| v[0].is_some() && v.iter().all(|x| *x == v[0]));
        let nodes: std::collections::BTreeSet<i32> =
            answers.iter().filter_map(|v| v[0].map(|x| x.0)).collect();
        if agreed && nodes.len() == 3 {
            break answers
                .into_iter()
                .map(|v| v[0].expect("agreed"))
                .collect::<Vec<_>>();
        }
        assert!(
            Instant::now() < deadline,
            "daemons never agreed on 3 owners: {answers:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let meta = pool
        .call(
            addrs[0],
            &km::MetadataRequest::default().with_topics(Some(vec![])),
            4,
        )
        .await
        .expect("metadata");
    let mut listed: Vec<i32> = meta.brokers.iter().map(|b| b.node_id.0).collect();
    listed.sort_unstable();
    assert_eq!(listed, vec![1, 2, 3], "Metadata lists every live daemon");

    // Each id initializes at its owner.
    for (id, (node, _)) in ids.iter().zip(&owners) {
        let (served_by, _) = init_at_owner(&mut pool, &addrs, id, Duration::from_secs(30)).await;
        assert_eq!(served_by, *node, "{id}");
    }

    // The admin commands answer for the whole cluster, whichever daemon they ask.
    let cli = |args: &[&str]| {
        let out = std::process::Command::new(
            std::env::var_os("TXN_COORDINATOR_BIN")
                .map_or_else(|| bin_path("txn-coordinator"), PathBuf::from),
        )
        .args(args)
        .output()
        .expect("txn-coordinator runs");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "{args:?}: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        text
    };
    let bootstrap = addrs[0].to_string();
    let listed = cli(&["list", "--bootstrap-server", &bootstrap, "--json"]);
    for id in &ids {
        assert!(
            listed.contains(&format!("\"{id}\"")),
            "{id} not listed: {listed}"
        );
    }
    let elsewhere = ids
        .iter()
        .zip(&owners)
        .find(|(_, (n, _))| *n != 1)
        .map(|(id, _)| id.clone())
        .expect("an id owned by another daemon");
    let described = cli(&[
        "describe",
        "--bootstrap-server",
        &bootstrap,
        "--transactional-id",
        &elsewhere,
    ]);
    assert!(described.contains("Empty"), "{described}");

    // SIGKILL daemon 2: its ids move to daemons 1 and 3 within the lease TTL (plus a load).
    let victim = 2;
    let moved: Vec<&String> = ids
        .iter()
        .zip(&owners)
        .filter(|(_, (n, _))| *n == victim)
        .map(|(id, _)| id)
        .collect();
    assert!(!moved.is_empty());
    let killed_at = Instant::now();
    c.daemons[1].kill();
    let survivors = [addrs[0], addrs[2]];
    let mut failover = Vec::new();
    for id in &moved {
        let (node, (_, epoch)) =
            init_at_owner(&mut pool, &survivors, id, Duration::from_secs(30)).await;
        assert_ne!(node, victim, "{id}");
        assert!(
            epoch >= 1,
            "{id}: the epoch continues from the dead owner's"
        );
        failover.push(killed_at.elapsed());
    }
    let first = failover.first().copied().unwrap_or_default();
    println!(
        "owner SIGKILLed: first InitProducerId of a moved id served by a survivor after {first:?} \
         (lease {LEASE_MS} ms), all {} moved ids after {:?}",
        moved.len(),
        failover.last().copied().unwrap_or_default()
    );
    assert!(
        first < Duration::from_millis(LEASE_MS) + Duration::from_secs(5),
        "failover took {first:?}"
    );
}

/// The owner of an id is SIGSTOPped past its lease: a survivor takes the id over (a higher
/// coordinator epoch). Resumed, the old owner still holds the id's old state in memory, but
/// nothing it does with it lands: its append is fenced in etcd and the client gets an error,
/// and the survivor's state is untouched. Then it registers again and owns partitions again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_owner_resumed_after_its_lease_completes_nothing_from_stale_state_and_rejoins() {
    let mut c = cluster(2).await;
    let addrs = c.addrs.clone();
    let mut pool = Pool::new("etcd-pause-test", Duration::from_secs(3));
    let (owner, (pid, epoch)) =
        init_at_owner(&mut pool, &addrs, "z", Duration::from_secs(30)).await;
    let old = usize::try_from(owner - 1).expect("node ids 1 and 2");
    let survivor = addrs[1 - old];

    c.daemons[old].pause().expect("SIGSTOP");
    tokio::time::sleep(Duration::from_millis(LEASE_MS + 1500)).await;
    let (node, (pid2, epoch2)) =
        init_at_owner(&mut pool, &[survivor], "z", Duration::from_secs(30)).await;
    assert_ne!(node, owner);
    assert_eq!(
        (pid2, epoch2),
        (pid, epoch + 1),
        "the survivor fenced the old epoch"
    );

    c.daemons[old].resume().expect("SIGCONT");
    // Straight to the resumed daemon, with the epoch it handed out itself.
    let add = km::AddPartitionsToTxnRequest::default()
        .with_v3_and_below_transactional_id(km::TransactionalId(s("z")))
        .with_v3_and_below_producer_id(km::ProducerId(pid))
        .with_v3_and_below_producer_epoch(epoch)
        .with_v3_and_below_topics(vec![
            km::add_partitions_to_txn_request::AddPartitionsToTxnTopic::default()
                .with_name(km::TopicName(s("t")))
                .with_partitions(vec![0]),
        ]);
    match pool.call(addrs[old], &add, 3).await {
        Ok(r) => {
            let code =
                r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code;
            assert_ne!(
                code, 0,
                "the resumed old owner accepted a stale AddPartitionsToTxn"
            );
            println!("resumed old owner answered AddPartitionsToTxn with error {code}");
        }
        Err(e) => println!("resumed old owner did not answer: {e}"),
    }
    // The survivor's state is untouched: the epoch it gave out is current, nothing was added.
    let describe = km::DescribeTransactionsRequest::default()
        .with_transactional_ids(vec![km::TransactionalId(s("z"))]);
    let r = pool.call(survivor, &describe, 0).await.expect("describe");
    let t = &r.transaction_states[0];
    assert_eq!(t.error_code, 0);
    assert_eq!((t.producer_id.0, t.producer_epoch), (pid, epoch + 1));
    assert!(t.topics.is_empty(), "a stale add landed: {t:?}");

    // etcd dropped the old owner's lease while it was stopped; it registers again and gets
    // its share of the partitions back (a finding of the cluster fault run: it kept sending
    // keep-alives for the dead lease and never rejoined).
    let deadline = Instant::now() + Duration::from_millis(LEASE_MS) + Duration::from_secs(10);
    let ids: Vec<String> = (0..24).map(|i| format!("rejoin-{i}")).collect();
    let mut rejoined = false;
    while !rejoined && Instant::now() < deadline {
        for id in &ids {
            if find(&mut pool, survivor, id).await.map(|(n, _)| n) == Some(owner) {
                rejoined = true;
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        rejoined,
        "the resumed daemon {owner} owns none of 24 ids {} ms after the survivor answered",
        LEASE_MS + 10_000
    );
}

/// Failover time over 20 SIGKILLs (a measurement: `cargo test --release -p txn-tests --test
/// etcd_cluster failover_times -- --ignored --nocapture`): each round kills the owner of a
/// fresh id, times the first InitProducerId a survivor serves for it, restarts the dead daemon
/// and lets it rejoin. Prints p50 / p99 / max; fails if one exceeds lease + 5 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement of about 2 minutes; run it by name"]
async fn failover_times_over_20_kills() {
    let mut c = cluster(3).await;
    let addrs = c.addrs.clone();
    let mut pool = Pool::new("etcd-failover-bench", Duration::from_secs(3));
    let mut times = Vec::new();
    for round in 0..20 {
        let id = format!("failover-{round}");
        let (owner, _) = init_at_owner(&mut pool, &addrs, &id, Duration::from_secs(30)).await;
        let victim = usize::try_from(owner - 1).expect("node ids 1..=3");
        let survivors: Vec<SocketAddr> =
            (0..3).filter(|&i| i != victim).map(|i| addrs[i]).collect();
        let killed = Instant::now();
        c.daemons[victim].kill();
        let (node, _) = init_at_owner(&mut pool, &survivors, &id, Duration::from_secs(30)).await;
        let took = killed.elapsed();
        assert_ne!(node, owner);
        times.push(took);
        c.daemons[victim]
            .restart(Duration::from_secs(60))
            .expect("restart");
        tokio::time::sleep(Duration::from_millis(LEASE_MS + 1000)).await;
    }
    times.sort();
    let at = |q: f64| times[((times.len() as f64 - 1.0) * q).round() as usize];
    println!(
        "failover over {} SIGKILLs (lease {LEASE_MS} ms): p50 {:?}, p99 {:?}, max {:?}",
        times.len(),
        at(0.5),
        at(0.99),
        times[times.len() - 1]
    );
    assert!(at(0.99) < Duration::from_millis(LEASE_MS) + Duration::from_secs(5));
}

/// Each etcd member in turn is SIGKILLed for longer than the lease (3 s; quorum holds): the daemon
/// keeps its lease (keep-alives go to a live member) and never gives its partitions up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_dead_etcd_member_does_not_cost_a_daemon_its_lease() {
    let _one = ONE_CLUSTER_AT_A_TIME.lock().await;
    let mut etcd = EtcdCluster::start(3).await.expect("etcd");
    let dir = tempfile::tempdir().expect("tmp");
    let endpoints = etcd.endpoints_arg();
    // The default lease (3 s): a leader election of etcd fits in it.
    let d = daemon_on_etcd(1, &endpoints, dir.path(), &[]).expect("daemon starts");
    let a = d.addr().expect("addr");
    let mut pool = Pool::new("etcd-member-kill-test", Duration::from_secs(3));
    init_at_owner(&mut pool, &[a], "m", Duration::from_secs(30)).await;
    for i in 0..3 {
        etcd.kill(i);
        tokio::time::sleep(Duration::from_millis(7_500)).await;
        init_at_owner(&mut pool, &[a], "m", Duration::from_secs(10)).await;
        etcd.restart(i).expect("restart member");
        etcd.wait_ready(Duration::from_secs(30))
            .await
            .expect("etcd ready");
    }
    let log = std::fs::read_to_string(dir.path().join("daemon-1.log")).expect("daemon log");
    let registrations = log.matches("registered in etcd").count();
    let handed_over = log.contains("log partition handed over");
    if registrations != 1 || handed_over {
        // A rare failure is kept for its root cause: the members' logs say whether etcd was
        // without a leader while the daemon's keep-alives went unanswered.
        let etcd_files = etcd.keep_files();
        let daemon_files = dir.keep();
        let warnings: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("WARN") || l.contains("registered") || l.contains("handed over"))
            .collect();
        panic!(
            "the daemon registered {registrations} times (1 expected), handed partitions over: \
             {handed_over}; etcd members' data and logs kept in {}, the daemon's log in {}:\n{}",
            etcd_files.display(),
            daemon_files.display(),
            warnings.join("\n")
        );
    }
}
