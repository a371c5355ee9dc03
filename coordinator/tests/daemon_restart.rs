//! Restart after SIGKILL: durable states intact, PrepareCommit completed after restart (markers
//! delivered to a fake broker), producer ids never reused; SIGTERM exits 0.
#![cfg(feature = "daemon")]

mod daemon_support;

use daemon_support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_then_restart_keeps_states_completes_prepare_commit_and_never_reuses_pids() {
    let dir = tempfile::tempdir().expect("tmp");
    // First life: no brokers, so the markers of a commit cannot be delivered.
    let mut d = Daemon::start(dir.path(), &[]);
    let mut c = d.conn().await;
    let (p_commit, e_commit) = init_ok(&mut c, "committer", 60_000).await;
    let r = c
        .call(
            &add_req_v3("committer", p_commit, e_commit, &[("t", 0), ("t2", 1)]),
            0,
        )
        .await
        .expect("add");
    assert!(add_errors(&r).iter().all(|(_, _, e)| *e == 0));
    let r = c
        .call(&end_req("committer", p_commit, e_commit, true), 1)
        .await
        .expect("end");
    assert_eq!(r.error_code, 0);
    assert_eq!(
        describe(&mut c, "committer")
            .await
            .transaction_state
            .as_str(),
        "PrepareCommit"
    );

    let (p_open, e_open) = init_ok(&mut c, "open", 600_000).await;
    let r = c
        .call(&add_req_v3("open", p_open, e_open, &[("t", 2)]), 0)
        .await
        .expect("add");
    assert!(add_errors(&r).iter().all(|(_, _, e)| *e == 0));
    let (p_idle, e_idle) = init_ok(&mut c, "idle", 60_000).await;
    let mut seen = vec![p_commit, p_open, p_idle];
    for i in 0..20 {
        seen.push(init_ok(&mut c, &format!("many-{i}"), 60_000).await.0);
    }
    d.kill();

    // Second life: a broker that acknowledges markers.
    let broker = FakeBroker::start().await;
    let bs = broker.addr.to_string();
    let d2 = Daemon::start(dir.path(), &["--bootstrap-servers", &bs]);
    let mut c = d2.conn().await;
    wait_state(&mut c, "committer", "CompleteCommit").await;
    let sent: Vec<_> = broker
        .markers()
        .into_iter()
        .flat_map(|m| m.markers)
        .collect();
    let mine: Vec<_> = sent
        .iter()
        .filter(|m| m.producer_id.0 == p_commit)
        .collect();
    assert!(
        !mine.is_empty(),
        "no marker for the prepared commit: {sent:?}"
    );
    assert!(
        mine.iter()
            .all(|m| m.transaction_result && m.producer_epoch == e_commit)
    );
    // Re-driven with a newer coordinator epoch than the first life used (the first life had none
    // delivered, so any epoch > 0 shows the bump: the first life claimed epoch 0).
    assert!(mine.iter().all(|m| m.coordinator_epoch >= 1), "{mine:?}");

    let open = describe(&mut c, "open").await;
    assert_eq!(open.transaction_state.as_str(), "Ongoing");
    assert_eq!((open.producer_id.0, open.producer_epoch), (p_open, e_open));
    assert_eq!(open.topics.len(), 1);
    assert_eq!(open.topics[0].partitions, vec![2]);
    assert_eq!(open.transaction_timeout_ms, 600_000);
    let idle = describe(&mut c, "idle").await;
    assert_eq!(idle.transaction_state.as_str(), "Empty");
    assert_eq!((idle.producer_id.0, idle.producer_epoch), (p_idle, e_idle));

    // The open transaction can still be committed by its producer after the restart.
    let r = c
        .call(&end_req("open", p_open, e_open, true), 1)
        .await
        .expect("end");
    assert_eq!(r.error_code, 0);
    wait_state(&mut c, "open", "CompleteCommit").await;

    // Fresh ids never reuse a producer id of the first life.
    for i in 0..20 {
        let (p, e) = init_ok(&mut c, &format!("fresh-{i}"), 60_000).await;
        assert_eq!(e, 0);
        assert!(!seen.contains(&p), "producer id {p} reused");
        seen.push(p);
    }
    // An existing id gets its epoch bumped, not a new identity.
    let (p, e) = init_ok(&mut c, "idle", 60_000).await;
    assert_eq!((p, e), (p_idle, e_idle + 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_and_exits_zero_and_state_survives() {
    let dir = tempfile::tempdir().expect("tmp");
    let mut d = Daemon::start(
        dir.path(),
        &["--set", "transaction.state.log.num.partitions=4"],
    );
    let mut c = d.conn().await;
    let (p, e) = init_ok(&mut c, "graceful", 60_000).await;
    let status = d.terminate();
    assert!(
        status.success(),
        "exit status {status:?}; stderr:\n{}",
        d.stderr()
    );
    assert!(
        d.stderr().contains("transaction log flushed and closed"),
        "{}",
        d.stderr()
    );
    let d2 = Daemon::start(
        dir.path(),
        &["--set", "transaction.state.log.num.partitions=4"],
    );
    let mut c = d2.conn().await;
    let got = describe(&mut c, "graceful").await;
    assert_eq!((got.producer_id.0, got.producer_epoch), (p, e));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigint_also_exits_zero_with_an_open_connection() {
    let dir = tempfile::tempdir().expect("tmp");
    let mut d = Daemon::start(
        dir.path(),
        &["--set", "transaction.state.log.num.partitions=2"],
    );
    let mut c = d.conn().await;
    init_ok(&mut c, "interrupted", 60_000).await;
    // The client keeps its connection open: shutdown must not wait for it to go away.
    let status = d.signal("-INT");
    assert!(
        status.success(),
        "exit status {status:?}; stderr:\n{}",
        d.stderr()
    );
    assert!(d.stderr().contains("SIGINT received"), "{}", d.stderr());
    drop(c);
}
