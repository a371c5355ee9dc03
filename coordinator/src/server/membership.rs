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
//!
//! The keep-alive rounds run in `keepalive.rs` over a `KeepAliveSource`; here are its etcd
//! implementation, the `LeaseRules` the rounds follow, and what each round does with the view.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, GetOptions, PutOptions, Txn, TxnOp, TxnOpResponse,
    WatchOptions,
};
use tokio::sync::Notify;
use tokio::time::Instant;
use txn_log::LogPartition;
use txn_log::sync::Mutex;

use super::keepalive::{self, KeepAliveSource, Keeper};
use super::peers::{self, Peers, Probe};
use super::{Settings, SettingsError};
use crate::UnloadReason;
use crate::shell::{Coordinator, LeaderEpoch};

/// A live member: node id and advertised address (a daemon, or a broker that embeds the
/// coordinator).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// `--node-id`.
    pub node_id: i32,
    /// Advertised host (of its first listener).
    pub host: String,
    /// Advertised port (of its first listener).
    pub port: u16,
    /// Every listener of a member with several (empty: one, at `host:port`, of unknown
    /// protocol). A client is given the owner's address on the listener it connected through,
    /// as Kafka does.
    pub listeners: Vec<MemberListener>,
}

/// One advertised listener of a member.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MemberListener {
    /// The listener's name (`PLAINTEXT`, `SASL_SSL`, `INTERNAL`, ...).
    pub name: String,
    /// Its security protocol's Kafka name.
    pub protocol: String,
    /// Advertised host.
    pub host: String,
    /// Advertised port.
    pub port: u16,
}

impl Member {
    /// The member's address on the listener named `listener`, else its first one.
    pub fn address_for(&self, listener: &str) -> (String, u16) {
        self.listeners
            .iter()
            .find(|l| l.name == listener)
            .map_or_else(
                || (self.host.clone(), self.port),
                |l| (l.host.clone(), l.port),
            )
    }

    /// Where the other members probe this one: its listener named `listener` (the
    /// inter-broker listener), or `host:port` when it registered a single listener (whose name
    /// is not registered: it is the inter-broker listener of a daemon with one). `None` when it
    /// has several listeners and none of that name.
    pub fn probe_address(&self, listener: &str) -> Option<(String, u16)> {
        if self.listeners.is_empty() {
            return Some((self.host.clone(), self.port));
        }
        self.listeners
            .iter()
            .find(|l| l.name == listener)
            .map(|l| (l.host.clone(), l.port))
    }

    /// The value registered under `{prefix}/members/{node id}`: `host:port` for a single
    /// listener (as before listeners existed), else the JSON list of listeners.
    fn registration(&self) -> String {
        if self.listeners.len() <= 1 {
            return format!("{}:{}", self.host, self.port);
        }
        serde_json::to_string(&self.listeners)
            .unwrap_or_else(|_| format!("{}:{}", self.host, self.port))
    }

    /// The member registered as `value` (either form of [`Member::registration`]).
    fn parse(node_id: i32, value: &str) -> Option<Self> {
        if value.starts_with('[') {
            let listeners: Vec<MemberListener> = serde_json::from_str(value).ok()?;
            let first = listeners.first()?.clone();
            return Some(Self {
                node_id,
                host: first.host,
                port: first.port,
                listeners,
            });
        }
        let (host, port) = value.rsplit_once(':')?;
        Some(Self {
            node_id,
            host: host.to_owned(),
            port: port.parse().ok()?,
            listeners: Vec::new(),
        })
    }
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
    /// Until when this daemon's lease is known to hold (monotonic): the send time of its last
    /// acknowledged keep-alive plus the TTL less one tick.
    serving_until: Mutex<Instant>,
    /// Which other members answer their probes.
    peers: Arc<Peers>,
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

    /// The owner of `partition` to name to clients: `None` while no live member owns it, while
    /// its owner does not answer its probes (a client sent there would only back off its
    /// reconnects), or while it is this daemon and its lease is not known to hold.
    pub fn answering_owner(&self, partition: LogPartition) -> Option<Member> {
        let owner = self.owner(partition)?;
        let answers = if owner.node_id == self.node_id {
            self.serving()
        } else {
            self.peers.reachable(&owner)
        };
        answers.then_some(owner)
    }

    /// Whether this daemon's lease is known to hold now, so that it may answer from its
    /// state. False from the moment the last acknowledged keep-alive was sent the TTL less one
    /// tick ago, even before the membership loop runs again (a daemon resumed after a pause
    /// past its lease refuses at once; another daemon may own its partitions by now).
    pub fn serving(&self) -> bool {
        Instant::now() < *self.serving_until.lock()
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
/// the coordinator loads the log partitions `me` owns and unloads the others. The other
/// members are probed as `probe` says ([`super::peers`]).
pub async fn start(
    settings: &Settings,
    me: Member,
    coordinator: Coordinator,
    probe: Probe,
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
    let tick = ttl / 6;
    let membership = Arc::new(Membership {
        partitions: coordinator.config().transaction_state_log_num_partitions,
        node_id: me.node_id,
        live: Mutex::new(BTreeMap::new()),
        owned: Mutex::new(BTreeSet::new()),
        serving_until: Mutex::new(Instant::now()),
        // Probed every tick; a probe gets a third of the TTL, so a stopped member is not named
        // any more well before its lease can expire.
        peers: Arc::new(Peers::new(me.node_id, tick, ttl / 3, probe)),
    });
    peers::spawn(membership.peers.clone(), Arc::downgrade(&membership));
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
    let members_changed = Arc::new(Notify::new());
    tokio::spawn(watch_members(
        client.clone(),
        prefix.clone(),
        members_changed.clone(),
        tick,
    ));
    let source = EtcdLease {
        client,
        endpoints: endpoints.into_iter().map(|e| (e, None)).collect(),
        prefix: prefix.clone(),
        ttl,
        me: me.clone(),
    };
    let mut runner = Runner {
        members_changed,
        keeper: Keeper::new(source, ttl),
        prefix,
        ttl,
        me,
        coordinator,
        membership: membership.clone(),
    };
    let sent = Instant::now();
    runner.keeper.register().await?;
    *membership.serving_until.lock() = sent + (ttl - tick);
    tokio::spawn(runner.run(sent));
    Ok(membership)
}

/// Wakes the membership loop (`changed`) whenever a key under `{prefix}/members/` changes in
/// etcd: a member's lease expired (etcd deletes its key), or a member registered. The
/// survivors then take a dead member's partitions over as soon as etcd expires its lease,
/// not at their next round. A watch that fails is opened again after `retry`; meanwhile the
/// rounds every tick still notice every change.
async fn watch_members(client: Client, prefix: String, changed: Arc<Notify>, retry: Duration) {
    let key = format!("{prefix}/members/");
    loop {
        let opened = client
            .clone()
            .watch(key.clone(), Some(WatchOptions::new().with_prefix()))
            .await;
        match opened {
            Ok(mut stream) => loop {
                match stream.message().await {
                    Ok(Some(r)) if !r.events().is_empty() => changed.notify_one(),
                    Ok(Some(_)) => {}
                    Ok(None) => break,
                    Err(e) => {
                        tracing::debug!(error = %e, "watch of the members ended; opening it again");
                        break;
                    }
                }
            },
            Err(e) => tracing::debug!(error = %e, "watching the members failed; retrying"),
        }
        tokio::time::sleep(retry).await;
    }
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
pub(super) enum LeaseStep {
    /// A member acknowledged the keep-alive, or a new lease was registered.
    Acked,
    /// etcd answered that the lease is gone.
    Gone,
    /// No member answered the keep-alive, or registering failed.
    NoAnswer,
}

/// What a round does after its lease step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct RoundPlan {
    /// Whether the lease is known to hold, so this daemon may serve what it owns.
    pub(super) valid: bool,
    /// How long after its start the next round begins.
    pub(super) pause: Duration,
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
pub(super) struct LeaseRules {
    ttl: Duration,
    tick: Duration,
    registered: bool,
    acked: Instant,
}

impl LeaseRules {
    /// Rules for a lease of `ttl` whose registration was sent at `sent`.
    pub(super) fn new(ttl: Duration, sent: Instant) -> Self {
        Self {
            ttl,
            tick: ttl / 6,
            registered: true,
            acked: sent,
        }
    }

    /// Until when the lease is known to hold: the TTL less one tick after the send of the
    /// last acknowledged keep-alive (or registration).
    fn serving_until(&self) -> Instant {
        self.acked + (self.ttl - self.tick)
    }

    /// Whether the next round keeps the current lease alive (else it registers a new one).
    pub(super) fn registered(&self) -> bool {
        self.registered
    }

    /// Takes the outcome of a round's lease step, whose requests were sent from `sent` on, at
    /// `now`.
    pub(super) fn after(&mut self, step: LeaseStep, sent: Instant, now: Instant) -> RoundPlan {
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

/// The etcd side of the lease: registration, and keep-alives through one endpoint at a time.
struct EtcdLease {
    client: Client,
    /// Every endpoint, with a client of its own once connected: keep-alives go to one member
    /// at a time, the one that answered last first, so a dead member is skipped at once (the
    /// shared client may keep choosing it).
    endpoints: Vec<(String, Option<Client>)>,
    prefix: String,
    ttl: Duration,
    me: Member,
}

impl EtcdLease {
    /// The client of `endpoint`, the one that answered the last keep-alive (the shared one
    /// until then), so that reads and registration do not wait on a dead member either.
    fn live_client(&self, endpoint: usize) -> Client {
        self.endpoints[endpoint]
            .1
            .clone()
            .unwrap_or_else(|| self.client.clone())
    }
}

impl KeepAliveSource for EtcdLease {
    type Error = etcd_client::Error;

    fn endpoints(&self) -> usize {
        self.endpoints.len()
    }

    fn endpoint(&self, i: usize) -> &str {
        &self.endpoints[i].0
    }

    /// Connects to the endpoint first if needed; a failed or abandoned attempt drops its
    /// client, so that the next one connects again.
    async fn keep_alive(&mut self, endpoint: usize, lease: i64) -> Result<bool, Self::Error> {
        let each = keepalive::endpoint_bound(self.ttl);
        let (name, slot) = &mut self.endpoints[endpoint];
        let client = match slot.take() {
            Some(c) => c,
            None => {
                let options = ConnectOptions::new()
                    .with_connect_timeout(each)
                    .with_timeout(each);
                Client::connect([name.as_str()], Some(options)).await?
            }
        };
        let alive = keep_alive_once(&client, lease).await?;
        *slot = Some(client);
        Ok(alive)
    }

    /// Grants a lease and puts this member's key under it; returns the lease id.
    async fn register(&mut self, endpoint: usize) -> anyhow::Result<i64> {
        let secs = i64::try_from(self.ttl.as_millis().div_ceil(1000).max(1)).unwrap_or(i64::MAX);
        let lease = self
            .live_client(endpoint)
            .lease_grant(secs, None)
            .await
            .context("granting the membership lease")?
            .id();
        self.live_client(endpoint)
            .put(
                member_key(&self.prefix, self.me.node_id),
                self.me.registration(),
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
}

struct Runner {
    /// Notified when a member key changes in etcd: the next round starts at once.
    members_changed: Arc<Notify>,
    /// The lease and its keep-alive rounds.
    keeper: Keeper<EtcdLease>,
    prefix: String,
    ttl: Duration,
    me: Member,
    coordinator: Coordinator,
    membership: Arc<Membership>,
}

impl Runner {
    /// The client of the endpoint that answered the last keep-alive (see
    /// [`EtcdLease::live_client`]).
    fn live_client(&self) -> Client {
        self.keeper.source().live_client(self.keeper.current())
    }

    /// The membership loop, on the lease whose registration was sent at `registration_sent`.
    async fn run(mut self, registration_sent: Instant) {
        let mut rules = LeaseRules::new(self.ttl, registration_sent);
        loop {
            // Keep-alive (or a new lease once the old one is gone), after the last round's
            // pause, cut short when a member key changes.
            let woken = self.members_changed.notified();
            let (step, round) = self.keeper.round(&mut rules, woken).await;
            *self.membership.serving_until.lock() = rules.serving_until();
            if step == LeaseStep::Acked {
                self.refresh_members().await;
            } else if !round.valid {
                self.membership.live.lock().clear();
            }
            self.reconcile(round.valid).await;
        }
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
            let Some(member) = Member::parse(node_id, value) else {
                tracing::warn!(node_id, value, "unreadable member registration; ignored");
                continue;
            };
            live.insert(node_id, member);
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

    fn listener(name: &str, protocol: &str, port: u16) -> MemberListener {
        MemberListener {
            name: name.into(),
            protocol: protocol.into(),
            host: "10.0.0.1".into(),
            port,
        }
    }

    #[test]
    fn a_single_listener_registers_as_host_port_and_reads_back() {
        let m = Member {
            node_id: 3,
            host: "10.0.0.1".into(),
            port: 9093,
            listeners: vec![listener("PLAINTEXT", "PLAINTEXT", 9093)],
        };
        assert_eq!(m.registration(), "10.0.0.1:9093");
        let back = Member::parse(3, &m.registration()).expect("parsed");
        assert_eq!((back.host.as_str(), back.port), ("10.0.0.1", 9093));
        assert_eq!(
            back.probe_address("SSL"),
            Some(("10.0.0.1".into(), 9093)),
            "a single listener is the inter-broker one"
        );
        assert_eq!(back.address_for("SASL_SSL"), ("10.0.0.1".into(), 9093));
    }

    #[test]
    fn several_listeners_answer_per_listener_and_probe_the_inter_broker_one() {
        let m = Member {
            node_id: 3,
            host: "10.0.0.1".into(),
            port: 9094,
            listeners: vec![
                listener("SASL_SSL", "SASL_SSL", 9094),
                listener("INTERNAL", "SASL_PLAINTEXT", 9095),
            ],
        };
        let back = Member::parse(3, &m.registration()).expect("parsed");
        assert_eq!(back, m);
        assert_eq!(back.address_for("INTERNAL"), ("10.0.0.1".into(), 9095));
        assert_eq!(back.address_for("SASL_SSL"), ("10.0.0.1".into(), 9094));
        assert_eq!(back.address_for("OTHER"), ("10.0.0.1".into(), 9094));
        assert_eq!(
            back.probe_address("INTERNAL"),
            Some(("10.0.0.1".into(), 9095))
        );
        assert_eq!(
            back.probe_address("SASL_SSL"),
            Some(("10.0.0.1".into(), 9094))
        );
        assert_eq!(back.probe_address("OTHER"), None);
        assert_eq!(Member::parse(1, "[not json"), None);
        assert_eq!(Member::parse(1, "host-without-port"), None);
    }

    #[test]
    fn owned_partitions_are_this_members_share_of_the_view() {
        let m = Membership {
            partitions: 12,
            node_id: 2,
            live: Mutex::new(BTreeMap::new()),
            owned: Mutex::new(BTreeSet::new()),
            serving_until: Mutex::new(Instant::now()),
            peers: Arc::new(Peers::new(
                2,
                TICK,
                TTL / 3,
                Probe {
                    listener: "PLAINTEXT".into(),
                    connector: Arc::new(markers::wire::PlaintextConnector),
                },
            )),
        };
        assert_eq!(m.owned_partitions(), None, "not a live member yet");
        let member = |node_id| Member {
            node_id,
            host: "h".into(),
            port: 1,
            listeners: Vec::new(),
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
