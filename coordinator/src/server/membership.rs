//! Several daemons on one log in etcd: membership under a lease, the partitions spread over
//! the live members by rendezvous hashing, and each daemon loading what it owns.
//!
//! - Each daemon keeps `{prefix}/members/{node id}` = `host:port` alive under a lease of
//!   `etcd.lease.ttl.ms` (refreshed every sixth of it).
//! - Every sixth of the TTL it reads the members and computes the owner of each log partition:
//!   the member with the highest `score(node, partition)` (rendezvous hashing: a join or a
//!   leave moves only the partitions the member gains or loses).
//! - It loads (claiming the next coordinator epoch, which fences the previous owner in etcd)
//!   the partitions it owns and unloads the others, through the ownership hook
//!   (`Coordinator::became_leader(p, LeaderEpoch::NextInLog)` / `lost_leadership(p, None)`,
//!   `coordinator/src/shell/ownership.rs`); FindCoordinator answers the owner.
//! - When the last acknowledged keep-alive was sent five sixths of the TTL ago (monotonic
//!   clock), it stops serving every partition before the lease can have expired and others
//!   take over. A daemon that was paused past its lease finds its appends fenced in etcd.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, GetOptions, PutOptions, Txn, TxnOp, TxnOpResponse,
};
use txn_log::LogPartition;
use txn_log::sync::Mutex;

use super::{Settings, SettingsError};
use crate::UnloadReason;
use crate::shell::{Coordinator, LeaderEpoch};

/// A live member: node id and advertised address (a daemon, or a broker that embeds the
/// coordinator).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// `--node-id`.
    pub node_id: i32,
    /// Advertised host.
    pub host: String,
    /// Advertised port.
    pub port: u16,
}

/// The membership view of this daemon.
#[derive(Debug)]
pub struct Membership {
    partitions: u32,
    /// This daemon's node id.
    node_id: i32,
    /// Live members by node id (this one included while its lease holds).
    live: Mutex<BTreeMap<i32, Member>>,
    /// Partitions this daemon has loaded or is loading.
    owned: Mutex<BTreeSet<u32>>,
}

/// Rendezvous score of `node` for `partition` (splitmix64 of both).
fn score(node: i32, partition: u32) -> u64 {
    let mut z = (u64::from(node.cast_unsigned()) << 32 | u64::from(partition))
        .wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The owner of `partition` among `nodes`: the highest score, ties to the lower id.
fn owner_among(nodes: impl IntoIterator<Item = i32>, partition: u32) -> Option<i32> {
    nodes
        .into_iter()
        .max_by_key(|&n| (score(n, partition), std::cmp::Reverse(n)))
}

impl Membership {
    /// The member owning `partition` in this daemon's view.
    pub fn owner(&self, partition: LogPartition) -> Option<Member> {
        let live = self.live.lock();
        owner_among(live.keys().copied(), partition.0).and_then(|n| live.get(&n).cloned())
    }

    /// The live members.
    pub fn members(&self) -> Vec<Member> {
        self.live.lock().values().cloned().collect()
    }

    /// The log partitions this daemon owns in its current view (the members it last read),
    /// or `None` while it is not a live member itself (not registered yet, or its lease is
    /// not known to hold): then it serves nothing.
    pub fn owned_partitions(&self) -> Option<Vec<u32>> {
        let live = self.live.lock();
        if !live.contains_key(&self.node_id) {
            return None;
        }
        Some(
            (0..self.partitions)
                .filter(|&p| owner_among(live.keys().copied(), p) == Some(self.node_id))
                .collect(),
        )
    }
}

fn member_key(prefix: &str, node: i32) -> String {
    format!("{prefix}/members/{node}")
}

/// Records `transaction.state.log.num.partitions` under `{prefix}/config/` on first use and
/// refuses to start with another count: daemons that disagree on it would map a transactional
/// id to different log partitions, and two owners would serve the same id.
async fn check_partition_count(client: &Client, prefix: &str, n: u32) -> anyhow::Result<()> {
    let key = format!("{prefix}/config/transaction.state.log.num.partitions");
    let value = n.to_string();
    let put_if_absent = Txn::new()
        .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
        .and_then([TxnOp::put(key.clone(), value.clone(), None)])
        .or_else([TxnOp::get(key.clone(), None)]);
    let resp = client
        .clone()
        .txn(put_if_absent)
        .await
        .with_context(|| format!("checking {key} in etcd"))?;
    if resp.succeeded() {
        return Ok(());
    }
    let stored = resp.op_responses().into_iter().find_map(|op| match op {
        TxnOpResponse::Get(g) => g
            .kvs()
            .first()
            .map(|kv| kv.value_str().unwrap_or("?").to_owned()),
        _ => None,
    });
    match stored {
        Some(v) if v == value => Ok(()),
        Some(v) => Err(anyhow::Error::new(SettingsError::Invalid(format!(
            "transaction.state.log.num.partitions is {n}, but the log in etcd under {prefix} was written with {v}; \
             every daemon must use the same count, and it cannot change once the log holds data"
        )))),
        None => anyhow::bail!("{key} vanished while being checked; retry"),
    }
}

/// Registers `me` and runs membership and ownership for `coordinator` until the process ends:
/// the coordinator loads the log partitions `me` owns and unloads the others.
pub async fn start(
    settings: &Settings,
    me: Member,
    coordinator: Coordinator,
) -> anyhow::Result<Arc<Membership>> {
    let endpoints = settings.etcd_endpoints.clone();
    let prefix = settings.etcd_key_prefix.clone();
    let ttl = Duration::from_millis(settings.etcd_lease_ttl_ms);
    let options = ConnectOptions::new()
        .with_connect_timeout(ttl)
        .with_timeout(ttl);
    let client = Client::connect(endpoints.clone(), Some(options))
        .await
        .with_context(|| format!("connecting to etcd at {}", endpoints.join(",")))?;
    check_partition_count(
        &client,
        &prefix,
        coordinator.config().transaction_state_log_num_partitions,
    )
    .await?;
    let membership = Arc::new(Membership {
        partitions: coordinator.config().transaction_state_log_num_partitions,
        node_id: me.node_id,
        live: Mutex::new(BTreeMap::new()),
        owned: Mutex::new(BTreeSet::new()),
    });
    // A partition lost to a fence, an unavailable log or fenced markers is no longer loaded:
    // the next round loads it again if this daemon still owns it.
    let mut unloads = coordinator.subscribe_unloads();
    let m = membership.clone();
    tokio::spawn(async move {
        while let Ok(u) = unloads.recv().await {
            if !matches!(u.reason, UnloadReason::Requested) {
                m.owned.lock().remove(&u.partition.0);
            }
        }
    });
    let runner = Runner {
        client,
        endpoints: endpoints.into_iter().map(|e| (e, None)).collect(),
        current: 0,
        prefix,
        ttl,
        me,
        coordinator,
        membership: membership.clone(),
    };
    let sent = Instant::now();
    let lease = runner.register().await?;
    tokio::spawn(runner.run(lease, sent));
    Ok(membership)
}

/// One keep-alive round trip through `client`: whether the lease still lives.
///
/// etcd answers a keep-alive of an expired or revoked lease with a TTL of 0, and etcd-client
/// turns that answer into `Error::LeaseKeepAliveError("lease not found")`, both when it opens
/// the keep-alive stream (which sends the first keep-alive) and on the stream's messages. That
/// error is etcd's answer, not a failed call, so it is `Ok(false)`: the membership loop then
/// registers again. Every other error (the same variant carries a closed channel's message)
/// is a call that got no answer.
async fn keep_alive_once(client: &Client, lease: i64) -> Result<bool, etcd_client::Error> {
    let answer = async {
        let (mut keeper, mut stream) = client.clone().lease_keep_alive(lease).await?;
        keeper.keep_alive().await?;
        Ok(stream.message().await?.is_some_and(|r| r.ttl() > 0))
    };
    match answer.await {
        Err(etcd_client::Error::LeaseKeepAliveError(m)) if m == LEASE_NOT_FOUND => Ok(false),
        other => other,
    }
}

/// etcd-client's message for a keep-alive that etcd answered with a TTL of 0.
const LEASE_NOT_FOUND: &str = "lease not found";

/// What a round's lease step gave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LeaseStep {
    /// A member acknowledged the keep-alive, or a new lease was registered.
    Acked,
    /// etcd answered that the lease is gone.
    Gone,
    /// No member answered the keep-alive, or registering failed.
    NoAnswer,
}

/// What a round does after its lease step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct RoundPlan {
    /// Whether the lease is known to hold, so this daemon may serve what it owns.
    valid: bool,
    /// How long after its start the next round begins.
    pause: Duration,
}

/// The lease rules of the membership loop, apart from etcd and the clock (the caller passes
/// `now`), so that they are tested on their own.
///
/// - The lease is given up only when etcd says it is gone. A keep-alive that no member
///   answered keeps it: etcd renews every lease when it elects a new leader, so an election
///   longer than the TTL does not end it.
/// - Serving stops once the last acknowledged keep-alive was sent the TTL less one tick ago.
///   etcd renewed the lease after that send, so it cannot have expired yet, and nobody else
///   can have taken over.
/// - Rounds start once per tick (a sixth of the TTL); a failed keep-alive is tried again after
///   a tenth of a tick, so that a dead member's timeouts do not use up the TTL. An etcd leader
///   election that starts just after an acknowledged keep-alive then has about 60% of the TTL
///   before this daemon stops serving.
#[derive(Debug)]
struct LeaseRules {
    ttl: Duration,
    tick: Duration,
    registered: bool,
    acked: Instant,
}

impl LeaseRules {
    /// Rules for a lease of `ttl` whose registration was sent at `sent`.
    fn new(ttl: Duration, sent: Instant) -> Self {
        Self {
            ttl,
            tick: ttl / 6,
            registered: true,
            acked: sent,
        }
    }

    /// Whether the next round keeps the current lease alive (else it registers a new one).
    fn registered(&self) -> bool {
        self.registered
    }

    /// Takes the outcome of a round's lease step, whose requests were sent from `sent` on, at
    /// `now`.
    fn after(&mut self, step: LeaseStep, sent: Instant, now: Instant) -> RoundPlan {
        let keeping = self.registered;
        match step {
            LeaseStep::Acked => {
                self.registered = true;
                self.acked = sent;
            }
            LeaseStep::Gone => self.registered = false,
            LeaseStep::NoAnswer => {}
        }
        let acked = step == LeaseStep::Acked;
        let valid = acked || now.saturating_duration_since(self.acked) < self.ttl - self.tick;
        let pause = if keeping && !acked {
            self.tick / 10
        } else {
            self.tick
        };
        RoundPlan { valid, pause }
    }
}

struct Runner {
    client: Client,
    /// Every endpoint, with a client of its own once connected: keep-alives go to one member
    /// at a time, the one that answered last first, so a dead member is skipped at once (the
    /// shared client may keep choosing it).
    endpoints: Vec<(String, Option<Client>)>,
    /// The endpoint that answered the last keep-alive.
    current: usize,
    prefix: String,
    ttl: Duration,
    me: Member,
    coordinator: Coordinator,
    membership: Arc<Membership>,
}

impl Runner {
    /// The client of the endpoint that answered the last keep-alive (the shared one until
    /// then), so that reads and registration do not wait on a dead member either.
    fn live_client(&self) -> Client {
        self.endpoints[self.current]
            .1
            .clone()
            .unwrap_or_else(|| self.client.clone())
    }

    /// Grants a lease and puts this member's key under it; returns the lease id.
    async fn register(&self) -> anyhow::Result<i64> {
        let secs = i64::try_from(self.ttl.as_millis().div_ceil(1000).max(1)).unwrap_or(i64::MAX);
        let lease = self
            .live_client()
            .lease_grant(secs, None)
            .await
            .context("granting the membership lease")?
            .id();
        self.live_client()
            .put(
                member_key(&self.prefix, self.me.node_id),
                format!("{}:{}", self.me.host, self.me.port),
                Some(PutOptions::new().with_lease(lease)),
            )
            .await
            .context("registering this member")?;
        tracing::info!(
            node_id = self.me.node_id,
            lease,
            ttl_ms = self.ttl.as_millis() as u64,
            "registered in etcd"
        );
        Ok(lease)
    }

    /// The membership loop, on `lease`, whose registration was sent at `registration_sent`.
    async fn run(mut self, mut lease: i64, registration_sent: Instant) {
        let mut rules = LeaseRules::new(self.ttl, registration_sent);
        loop {
            let started = tokio::time::Instant::now();
            let sent = Instant::now();
            // Keep-alive (or a new lease once the old one is gone).
            let step = if rules.registered() {
                match self.keep_alive(lease).await {
                    Some(true) => LeaseStep::Acked,
                    Some(false) => {
                        tracing::warn!(lease, "membership lease gone in etcd; registering again");
                        LeaseStep::Gone
                    }
                    None => LeaseStep::NoAnswer,
                }
            } else {
                match self.register().await {
                    Ok(l) => {
                        lease = l;
                        LeaseStep::Acked
                    }
                    Err(e) => {
                        tracing::warn!(error = %format!("{e:#}"), "registering in etcd failed; retrying");
                        LeaseStep::NoAnswer
                    }
                }
            };
            let round = rules.after(step, sent, Instant::now());
            if step == LeaseStep::Acked {
                self.refresh_members().await;
            } else if !round.valid {
                self.membership.live.lock().clear();
            }
            self.reconcile(round.valid).await;
            tokio::time::sleep_until(started + round.pause).await;
        }
    }

    /// Refreshes the lease: whether it still lives (`Some(false)`: etcd says it is gone), or
    /// `None` if no member answered within a third of the TTL. Tries the members one at a
    /// time, each for at most a ninth of the TTL, starting with the one that answered last,
    /// so that one dead etcd member out of three does not cost this daemon its lease.
    async fn keep_alive(&mut self, lease: i64) -> Option<bool> {
        let deadline = tokio::time::Instant::now() + self.ttl / 3;
        let each = self.ttl / 9;
        let n = self.endpoints.len();
        let mut last = String::new();
        for k in 0..n {
            let i = (self.current + k) % n;
            let (endpoint, slot) = &mut self.endpoints[i];
            let attempt = async {
                let client = match slot.take() {
                    Some(c) => c,
                    None => {
                        let options = ConnectOptions::new()
                            .with_connect_timeout(each)
                            .with_timeout(each);
                        Client::connect([endpoint.as_str()], Some(options)).await?
                    }
                };
                let alive = keep_alive_once(&client, lease).await?;
                Ok::<_, etcd_client::Error>((client, alive))
            };
            let bound = deadline.min(tokio::time::Instant::now() + each);
            match tokio::time::timeout_at(bound, attempt).await {
                Ok(Ok((client, alive))) => {
                    *slot = Some(client);
                    self.current = i;
                    return Some(alive);
                }
                Ok(Err(e)) => last = format!("{endpoint}: {e}"),
                Err(_) => last = format!("{endpoint}: timed out"),
            }
            if tokio::time::Instant::now() >= deadline {
                break;
            }
        }
        tracing::warn!(error = %last, "membership keep-alive failed on every etcd endpoint tried");
        None
    }

    async fn refresh_members(&self) {
        let prefix = format!("{}/members/", self.prefix);
        let mut client = self.live_client();
        let read = client.get(prefix.clone(), Some(GetOptions::new().with_prefix()));
        // Bounded: a round must not outlast the keep-alives it is between.
        let resp = match tokio::time::timeout(self.ttl / 3, read).await {
            Ok(Ok(r)) => r,
            Err(_) => {
                tracing::warn!("reading the members timed out");
                return;
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "reading the members failed");
                return;
            }
        };
        let mut live = BTreeMap::new();
        for kv in resp.kvs() {
            let (Ok(key), Ok(value)) = (kv.key_str(), kv.value_str()) else {
                continue;
            };
            let Ok(node_id) = key[prefix.len()..].parse::<i32>() else {
                continue;
            };
            let Some((host, port)) = value.rsplit_once(':') else {
                continue;
            };
            let Ok(port) = port.parse() else {
                continue;
            };
            live.insert(
                node_id,
                Member {
                    node_id,
                    host: host.to_owned(),
                    port,
                },
            );
        }
        let mut current = self.membership.live.lock();
        if *current != live {
            tracing::info!(members = ?live.keys().collect::<Vec<_>>(), "members changed");
            *current = live;
        }
    }

    /// Loads the partitions this daemon owns and unloads the others (all of them when its
    /// lease is not known to hold).
    async fn reconcile(&self, valid: bool) {
        let n = self.membership.partitions;
        let mut load = Vec::new();
        let mut unload = Vec::new();
        {
            let live = self.membership.live.lock();
            let owned = self.membership.owned.lock();
            for p in 0..n {
                let mine = valid
                    && live.contains_key(&self.me.node_id)
                    && owner_among(live.keys().copied(), p) == Some(self.me.node_id);
                match (mine, owned.contains(&p)) {
                    (true, false) => load.push(p),
                    (false, true) => unload.push(p),
                    _ => {}
                }
            }
        }
        // Through the ownership hook, as a broker's own elections would go: the shared log is
        // the election (`LeaderEpoch::NextInLog`), and a partition this daemon no longer owns is
        // given up whatever epoch it was taken at.
        for p in unload {
            self.membership.owned.lock().remove(&p);
            self.coordinator
                .lost_leadership(LogPartition(p), None)
                .await;
            tracing::info!(partition = p, "log partition handed over");
        }
        for p in load {
            self.membership.owned.lock().insert(p);
            let (c, m) = (self.coordinator.clone(), self.membership.clone());
            tokio::spawn(async move {
                match c
                    .became_leader(LogPartition(p), LeaderEpoch::NextInLog)
                    .await
                {
                    Ok(epoch) => {
                        tracing::info!(
                            partition = p,
                            coordinator_epoch = epoch.0,
                            "log partition taken over"
                        );
                    }
                    Err(e) => {
                        tracing::warn!(partition = p, error = %e, "taking over the log partition failed; will retry");
                        m.owned.lock().remove(&p);
                    }
                }
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owned_partitions_are_this_members_share_of_the_view() {
        let m = Membership {
            partitions: 12,
            node_id: 2,
            live: Mutex::new(BTreeMap::new()),
            owned: Mutex::new(BTreeSet::new()),
        };
        assert_eq!(m.owned_partitions(), None, "not a live member yet");
        let member = |node_id| Member {
            node_id,
            host: "h".into(),
            port: 1,
        };
        m.live.lock().insert(1, member(1));
        assert_eq!(m.owned_partitions(), None);
        m.live.lock().insert(2, member(2));
        let mine = m.owned_partitions().expect("live");
        let expected: Vec<u32> = (0..12)
            .filter(|&p| owner_among([1, 2], p) == Some(2))
            .collect();
        assert_eq!(mine, expected);
        m.live.lock().remove(&1);
        assert_eq!(m.owned_partitions(), Some((0..12).collect()));
    }

    const TTL: Duration = Duration::from_secs(3);
    const TICK: Duration = Duration::from_millis(500);
    /// How long serving lasts after the send of the last acknowledged keep-alive.
    const SERVES_FOR: Duration = Duration::from_millis(2_500);

    /// The finding of the suite (etcd_cluster, one etcd member SIGKILLed): rounds whose
    /// keep-alive no member answers, for longer than the TTL, do not give the lease up; serving
    /// stops in time and resumes with the next acknowledgement, on the same lease.
    #[test]
    fn unanswered_keep_alives_keep_the_lease_and_stop_serving_in_time() {
        let t0 = Instant::now();
        let mut rules = LeaseRules::new(TTL, t0);
        let mut at = Duration::ZERO;
        while at < 2 * TTL {
            at += TICK / 10;
            let plan = rules.after(LeaseStep::NoAnswer, t0 + at, t0 + at);
            assert!(
                rules.registered(),
                "lease dropped {at:?} after the last ack"
            );
            assert_eq!(plan.valid, at < SERVES_FOR, "at {at:?}");
            assert_eq!(plan.pause, TICK / 10, "a failed keep-alive is retried soon");
        }
        let plan = rules.after(LeaseStep::Acked, t0 + at, t0 + at);
        assert_eq!(
            plan,
            RoundPlan {
                valid: true,
                pause: TICK
            }
        );
        assert!(rules.registered());
        let plan = rules.after(LeaseStep::NoAnswer, t0 + at + TICK, t0 + at + TICK);
        assert!(plan.valid, "one tick after an ack still serves");
    }

    /// Whether serving stops when no member answers keep-alives during `outage` (each such
    /// round takes `failing_round`, two members timing out), after a keep-alive sent at 0 was
    /// acknowledged 5 ms later: the loop's timing, with the rounds' pauses.
    fn serving_stops(outage: std::ops::Range<Duration>, failing_round: Duration) -> bool {
        let t0 = Instant::now();
        let mut rules = LeaseRules::new(TTL, t0);
        let mut start = Duration::ZERO;
        let mut plan = rules.after(LeaseStep::Acked, t0, t0 + Duration::from_millis(5));
        while start < outage.end + TTL {
            let next = start + plan.pause;
            let (step, end) = if outage.contains(&next) {
                (LeaseStep::NoAnswer, next + failing_round)
            } else {
                (LeaseStep::Acked, next + Duration::from_millis(5))
            };
            plan = rules.after(step, t0 + next, t0 + end);
            if !plan.valid {
                return true;
            }
            start = next.max(end - plan.pause);
        }
        false
    }

    /// The second finding of the suite (same test, 2026-12-04 17:10 UTC): an etcd leader was
    /// killed just after an acknowledged keep-alive, and the election left no member answering
    /// for more than 1.3 s; with rounds every third of the TTL and serving measured from the
    /// ack's arrival the daemon stopped serving. Rounds every sixth of the TTL, with serving
    /// measured from the send, leave such an election about 1.8 s of a 3 s TTL.
    #[test]
    fn an_etcd_election_just_after_an_ack_does_not_stop_serving() {
        let round = Duration::from_millis(670);
        let ms = Duration::from_millis;
        assert!(!serving_stops(ms(10)..ms(1_300), round));
        assert!(!serving_stops(ms(10)..ms(1_800), round));
        // Longer than the TTL allows: serving stops (and the lease is kept).
        assert!(serving_stops(ms(10)..ms(3_000), round));
    }

    /// Only etcd's answer that the lease is gone makes the next round register; a failed
    /// registration is retried a tick later, and serving waits for the new lease.
    #[test]
    fn a_gone_lease_is_registered_again() {
        let t0 = Instant::now();
        let mut rules = LeaseRules::new(TTL, t0);
        let plan = rules.after(LeaseStep::Gone, t0 + TICK, t0 + TICK);
        assert!(!rules.registered());
        assert_eq!(plan.pause, TICK / 10, "registering starts soon");
        assert!(plan.valid, "the last ack was sent one tick ago");
        let plan = rules.after(LeaseStep::NoAnswer, t0 + TTL, t0 + TTL);
        assert!(!rules.registered(), "registering failed");
        assert_eq!(plan.pause, TICK);
        assert!(!plan.valid, "the last ack was sent a TTL ago");
        let plan = rules.after(LeaseStep::Acked, t0 + TTL + TICK, t0 + TTL + TICK);
        assert!(rules.registered() && plan.valid);
    }

    #[test]
    fn rendezvous_moves_only_the_partitions_of_a_leaving_member() {
        let all = [1, 2, 3];
        let before: Vec<Option<i32>> = (0..50).map(|p| owner_among(all, p)).collect();
        for n in all {
            let owned = before.iter().filter(|o| **o == Some(n)).count();
            assert!(owned >= 5, "node {n} owns {owned} of 50");
        }
        let after: Vec<Option<i32>> = (0..50).map(|p| owner_among([1, 3], p)).collect();
        for (p, (b, a)) in before.iter().zip(&after).enumerate() {
            if *b != Some(2) {
                assert_eq!(b, a, "partition {p} moved although its owner stayed");
            }
        }
        assert_eq!(owner_among([], 0), None);
    }
}
