//! The classic consumer-group protocol (JoinGroup, SyncGroup, Heartbeat, LeaveGroup) and the
//! offset APIs (OffsetCommit, OffsetFetch, TxnOffsetCommit).
//!
//! Membership lives in memory (a restart makes consumers rejoin, as after a coordinator
//! failover); committed offsets live in the `__consumer_offsets` partition log (see
//! [`super::offsets`]). The broker leads group `g` iff it leads
//! `__consumer_offsets-<abs(javaStringHash(g)) % offsets_partitions>`.
//!
//! Rebalance: a join moves the group to PreparingRebalance; the round completes when every
//! known member has rejoined (after `group.initial.rebalance.delay.ms` for an empty group), or
//! at the largest rebalance timeout, when members that did not rejoin are dropped. The
//! generation then increases, the leader receives every member's subscription, and the
//! assignment it sends in SyncGroup is handed out (the client computes it, e.g. range).
//! Members whose session times out are removed and trigger a rebalance.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::ResponseError;
use kafka_protocol::messages::{
    HeartbeatRequest, HeartbeatResponse, JoinGroupRequest, JoinGroupResponse, LeaveGroupRequest,
    LeaveGroupResponse, OffsetCommitRequest, OffsetCommitResponse, OffsetFetchRequest,
    OffsetFetchResponse, SyncGroupRequest, SyncGroupResponse, TopicName, TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
};
use kafka_protocol::protocol::StrBytes;
use markers::verify::{Operation, TxnSupport, VerifyTxn};

use super::handlers::{ADD_RETRY_BACKOFF, ADD_RETRY_FOR};
use tokio::sync::{Mutex, oneshot};
use tokio::time::Instant;
use txn_log::{ProducerEpoch, ProducerId, TopicPartition, java_string_hash, kafka_partition_for};

use super::offsets::{OffsetKey, OffsetValue};
use super::server::Broker;
use super::{CONSUMER_OFFSETS, Config};

fn sb(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_owned())
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// The `__consumer_offsets` partition of `group`.
pub(crate) fn offsets_partition_for(broker: &Broker, group: &str) -> i32 {
    let n = u32::try_from(broker.config.offsets_partitions).unwrap_or(1);
    i32::try_from(kafka_partition_for(java_string_hash(group), n)).unwrap_or(0)
}

fn is_coordinator(broker: &Broker, group: &str) -> bool {
    broker
        .partition(CONSUMER_OFFSETS, offsets_partition_for(broker, group))
        .is_some()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Empty,
    PreparingRebalance,
    CompletingRebalance,
    Stable,
}

#[derive(Debug)]
struct Member {
    group_instance_id: Option<StrBytes>,
    protocols: Vec<(String, Bytes)>,
    session_timeout_ms: i32,
    rebalance_timeout_ms: i32,
    last_seen: Instant,
    join_waiter: Option<(oneshot::Sender<JoinGroupResponse>, i16)>,
    sync_waiter: Option<(oneshot::Sender<SyncGroupResponse>, i16)>,
    assignment: Bytes,
}

#[derive(Debug)]
struct Group {
    generation: i32,
    phase: Phase,
    protocol_type: Option<String>,
    protocol: Option<String>,
    leader: Option<String>,
    members: BTreeMap<String, Member>,
    /// Incremented per rebalance round; a round's timer only acts on its own round.
    round: u64,
    /// Before this instant an all-joined round of a formerly empty group does not complete.
    not_before: Instant,
}

impl Group {
    fn new() -> Self {
        Self {
            generation: 0,
            phase: Phase::Empty,
            protocol_type: None,
            protocol: None,
            leader: None,
            members: BTreeMap::new(),
            round: 0,
            not_before: Instant::now(),
        }
    }
}

/// The group coordinator of this broker.
#[derive(Debug)]
pub(crate) struct Groups {
    groups: Mutex<BTreeMap<String, Group>>,
    next_member: Mutex<u64>,
    initial_delay_ms: u64,
    min_session_ms: i32,
    max_session_ms: i32,
}

fn join_error(e: ResponseError, member_id: &str, v: i16) -> JoinGroupResponse {
    JoinGroupResponse::default()
        .with_error_code(e.code())
        .with_generation_id(-1)
        .with_member_id(sb(member_id))
        .with_protocol_name(if v >= 7 { None } else { Some(sb("")) })
}

fn sync_error(e: ResponseError) -> SyncGroupResponse {
    SyncGroupResponse::default().with_error_code(e.code())
}

impl Groups {
    pub(crate) fn new(config: &Config) -> Self {
        Self {
            groups: Mutex::new(BTreeMap::new()),
            next_member: Mutex::new(0),
            initial_delay_ms: u64::try_from(
                config.setting_i64("group.initial.rebalance.delay.ms", 0),
            )
            .unwrap_or(0),
            min_session_ms: i32::try_from(config.setting_i64("group.min.session.timeout.ms", 1000))
                .unwrap_or(1000),
            max_session_ms: i32::try_from(
                config.setting_i64("group.max.session.timeout.ms", 300_000),
            )
            .unwrap_or(300_000),
        }
    }

    /// Starts the session-expiry task.
    pub(crate) fn start(broker: &Arc<Broker>) {
        let weak = Arc::downgrade(broker);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(200));
            loop {
                tick.tick().await;
                let Some(broker) = weak.upgrade() else { return };
                broker.groups.expire_sessions().await;
            }
        });
    }

    async fn expire_sessions(&self) {
        let now = Instant::now();
        let mut groups = self.groups.lock().await;
        for (name, g) in groups.iter_mut() {
            let expired: Vec<String> = g
                .members
                .iter()
                .filter(|(_, m)| {
                    m.join_waiter.is_none()
                        && now.saturating_duration_since(m.last_seen)
                            > Duration::from_millis(
                                u64::try_from(m.session_timeout_ms).unwrap_or(0),
                            )
                })
                .map(|(id, _)| id.clone())
                .collect();
            if expired.is_empty() {
                continue;
            }
            tracing::info!(group = %name, ?expired, "member sessions expired");
            for id in &expired {
                g.members.remove(id);
            }
            Self::member_left(g);
        }
    }

    /// After members were removed: rebalance the rest, or empty the group.
    fn member_left(g: &mut Group) {
        if g.members.is_empty() {
            g.phase = Phase::Empty;
            g.generation += 1;
            g.leader = None;
            g.protocol = None;
            return;
        }
        if g.phase != Phase::PreparingRebalance {
            Self::prepare_rebalance(g);
        }
        Self::try_complete_join(g, false);
    }

    fn prepare_rebalance(g: &mut Group) {
        // Pending syncs of the old generation learn that a new round started.
        for m in g.members.values_mut() {
            if let Some((tx, _)) = m.sync_waiter.take() {
                let _ = tx.send(sync_error(ResponseError::RebalanceInProgress));
            }
        }
        g.phase = Phase::PreparingRebalance;
        g.round += 1;
    }

    /// Completes the join round if every member rejoined (or `force`: the round timed out).
    fn try_complete_join(g: &mut Group, force: bool) {
        if g.phase != Phase::PreparingRebalance {
            return;
        }
        let all_joined = g.members.values().all(|m| m.join_waiter.is_some());
        if !force && (!all_joined || Instant::now() < g.not_before) {
            return;
        }
        g.members.retain(|_, m| m.join_waiter.is_some());
        g.generation += 1;
        if g.members.is_empty() {
            g.phase = Phase::Empty;
            g.leader = None;
            return;
        }
        // The first protocol (in the leader's preference order) every member supports.
        let leader = g
            .leader
            .clone()
            .filter(|l| g.members.contains_key(l))
            .or_else(|| g.members.keys().next().cloned())
            .unwrap_or_default();
        let candidates: Vec<String> = g.members[&leader]
            .protocols
            .iter()
            .map(|(n, _)| n.clone())
            .collect();
        let chosen = candidates.into_iter().find(|p| {
            g.members
                .values()
                .all(|m| m.protocols.iter().any(|(n, _)| n == p))
        });
        let Some(protocol) = chosen else {
            for m in g.members.values_mut() {
                if let Some((tx, v)) = m.join_waiter.take() {
                    let _ = tx.send(join_error(ResponseError::InconsistentGroupProtocol, "", v));
                }
            }
            g.members.clear();
            g.phase = Phase::Empty;
            return;
        };
        g.leader = Some(leader.clone());
        g.protocol = Some(protocol.clone());
        g.phase = Phase::CompletingRebalance;
        let everyone: Vec<(String, Option<StrBytes>, Bytes)> = g
            .members
            .iter()
            .map(|(id, m)| {
                let meta = m
                    .protocols
                    .iter()
                    .find(|(n, _)| *n == protocol)
                    .map(|(_, b)| b.clone())
                    .unwrap_or_default();
                (id.clone(), m.group_instance_id.clone(), meta)
            })
            .collect();
        let generation = g.generation;
        let protocol_type = g.protocol_type.clone();
        for (id, m) in g.members.iter_mut() {
            m.last_seen = Instant::now();
            let Some((tx, v)) = m.join_waiter.take() else {
                continue;
            };
            use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
            let members = if *id == leader {
                everyone
                    .iter()
                    .map(|(mid, inst, meta)| {
                        let mut jm = JoinGroupResponseMember::default()
                            .with_member_id(sb(mid))
                            .with_metadata(meta.clone());
                        if v >= 5 {
                            jm.group_instance_id = inst.clone();
                        }
                        jm
                    })
                    .collect()
            } else {
                Vec::new()
            };
            let mut resp = JoinGroupResponse::default()
                .with_generation_id(generation)
                .with_protocol_name(Some(sb(&protocol)))
                .with_leader(sb(&leader))
                .with_member_id(sb(id))
                .with_members(members);
            if v >= 7 {
                resp.protocol_type = protocol_type.as_deref().map(sb);
            }
            let _ = tx.send(resp);
        }
    }

    async fn new_member_id(&self, client: &str) -> String {
        let mut n = self.next_member.lock().await;
        *n += 1;
        format!("{client}-{:016x}-{}", java_string_hash(client), *n)
    }

    /// JoinGroup.
    pub(crate) async fn join(
        &self,
        broker: &Arc<Broker>,
        r: JoinGroupRequest,
        v: i16,
    ) -> JoinGroupResponse {
        let group_id = r.group_id.0.to_string();
        let member_id = r.member_id.to_string();
        if group_id.is_empty() {
            return join_error(ResponseError::InvalidGroupId, &member_id, v);
        }
        if !is_coordinator(broker, &group_id) {
            return join_error(ResponseError::NotCoordinator, &member_id, v);
        }
        if r.session_timeout_ms < self.min_session_ms || r.session_timeout_ms > self.max_session_ms
        {
            return join_error(ResponseError::InvalidSessionTimeout, &member_id, v);
        }
        let rebalance_timeout_ms = if v >= 1 {
            r.rebalance_timeout_ms
        } else {
            r.session_timeout_ms
        };
        let protocol_type = r.protocol_type.to_string();
        let protocols: Vec<(String, Bytes)> = r
            .protocols
            .iter()
            .map(|p| (p.name.to_string(), p.metadata.clone()))
            .collect();
        if protocols.is_empty() || protocol_type.is_empty() {
            return join_error(ResponseError::InconsistentGroupProtocol, &member_id, v);
        }
        let new_id = if member_id.is_empty() {
            Some(self.new_member_id("member").await)
        } else {
            None
        };
        let (tx, rx) = oneshot::channel();
        let (round, wait) = {
            let mut groups = self.groups.lock().await;
            let g = groups.entry(group_id.clone()).or_insert_with(Group::new);
            let id = match &new_id {
                Some(id) => id.clone(),
                None if g.members.contains_key(&member_id) => member_id.clone(),
                None => return join_error(ResponseError::UnknownMemberId, &member_id, v),
            };
            if !g.members.is_empty()
                && g.protocol_type
                    .as_deref()
                    .is_some_and(|t| t != protocol_type)
            {
                return join_error(ResponseError::InconsistentGroupProtocol, &id, v);
            }
            let was_empty = g.members.is_empty();
            g.protocol_type = Some(protocol_type);
            let member = g.members.entry(id.clone()).or_insert_with(|| Member {
                group_instance_id: r.group_instance_id.clone(),
                protocols: Vec::new(),
                session_timeout_ms: r.session_timeout_ms,
                rebalance_timeout_ms,
                last_seen: Instant::now(),
                join_waiter: None,
                sync_waiter: None,
                assignment: Bytes::new(),
            });
            member.protocols = protocols;
            member.session_timeout_ms = r.session_timeout_ms;
            member.rebalance_timeout_ms = rebalance_timeout_ms;
            member.last_seen = Instant::now();
            if let Some((old, ov)) = member.join_waiter.replace((tx, v)) {
                let _ = old.send(join_error(ResponseError::UnknownMemberId, &id, ov));
            }
            // Every join starts (or joins) a round, even a rejoin with an unchanged
            // subscription: that is how a client asks for a rebalance. Kafka answers a
            // follower's unchanged rejoin of a stable group without a round; clients accept both.
            if g.phase != Phase::PreparingRebalance {
                if was_empty {
                    g.not_before = Instant::now() + Duration::from_millis(self.initial_delay_ms);
                }
                Self::prepare_rebalance(g);
            }
            Self::try_complete_join(g, false);
            let wait = g
                .members
                .values()
                .map(|m| m.rebalance_timeout_ms)
                .max()
                .unwrap_or(rebalance_timeout_ms)
                .max(0);
            let wait = Duration::from_millis(u64::try_from(wait).unwrap_or(0))
                .max(Duration::from_millis(self.initial_delay_ms));
            (g.round, wait)
        };
        // The round's deadline: complete it with whoever rejoined.
        let weak = Arc::downgrade(broker);
        let gid = group_id.clone();
        tokio::spawn(async move {
            tokio::time::sleep(wait).await;
            let Some(broker) = weak.upgrade() else { return };
            let mut groups = broker.groups.groups.lock().await;
            if let Some(g) = groups.get_mut(&gid)
                && g.round == round
            {
                Self::try_complete_join(g, true);
            }
        });
        if self.initial_delay_ms > 0 {
            let weak = Arc::downgrade(broker);
            let gid = group_id.clone();
            let delay = Duration::from_millis(self.initial_delay_ms);
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                let Some(broker) = weak.upgrade() else { return };
                let mut groups = broker.groups.groups.lock().await;
                if let Some(g) = groups.get_mut(&gid) {
                    Self::try_complete_join(g, false);
                }
            });
        }
        rx.await
            .unwrap_or_else(|_| join_error(ResponseError::UnknownServerError, &member_id, v))
    }

    /// SyncGroup.
    pub(crate) async fn sync(
        &self,
        broker: &Broker,
        r: SyncGroupRequest,
        v: i16,
    ) -> SyncGroupResponse {
        let mut resp = self.sync_inner(broker, r).await;
        if v < 5 {
            resp.protocol_type = None;
            resp.protocol_name = None;
        }
        resp
    }

    async fn sync_inner(&self, broker: &Broker, r: SyncGroupRequest) -> SyncGroupResponse {
        let group_id = r.group_id.0.to_string();
        let member_id = r.member_id.to_string();
        if !is_coordinator(broker, &group_id) {
            return sync_error(ResponseError::NotCoordinator);
        }
        let rx = {
            let mut groups = self.groups.lock().await;
            let Some(g) = groups.get_mut(&group_id) else {
                return sync_error(ResponseError::UnknownMemberId);
            };
            if !g.members.contains_key(&member_id) {
                return sync_error(ResponseError::UnknownMemberId);
            }
            if r.generation_id != g.generation {
                return sync_error(ResponseError::IllegalGeneration);
            }
            let protocol_type = g.protocol_type.clone();
            let protocol = g.protocol.clone();
            let ok = |assignment: Bytes| {
                SyncGroupResponse::default()
                    .with_assignment(assignment)
                    .with_protocol_type(protocol_type.as_deref().map(sb))
                    .with_protocol_name(protocol.as_deref().map(sb))
            };
            match g.phase {
                Phase::PreparingRebalance | Phase::Empty => {
                    return sync_error(ResponseError::RebalanceInProgress);
                }
                Phase::Stable => {
                    return ok(g.members[&member_id].assignment.clone());
                }
                Phase::CompletingRebalance => {}
            }
            if let Some(m) = g.members.get_mut(&member_id) {
                m.last_seen = Instant::now();
            }
            if g.leader.as_deref() == Some(member_id.as_str()) {
                for a in &r.assignments {
                    if let Some(m) = g.members.get_mut(a.member_id.as_str()) {
                        m.assignment = a.assignment.clone();
                    }
                }
                g.phase = Phase::Stable;
                for m in g.members.values_mut() {
                    if let Some((tx, _)) = m.sync_waiter.take() {
                        let _ = tx.send(ok(m.assignment.clone()));
                    }
                }
                return ok(g.members[&member_id].assignment.clone());
            }
            let (tx, rx) = oneshot::channel();
            if let Some(m) = g.members.get_mut(&member_id) {
                m.sync_waiter = Some((tx, 0));
            }
            rx
        };
        rx.await
            .unwrap_or_else(|_| sync_error(ResponseError::RebalanceInProgress))
    }

    /// Heartbeat.
    pub(crate) async fn heartbeat(
        &self,
        broker: &Broker,
        r: HeartbeatRequest,
    ) -> HeartbeatResponse {
        let group_id = r.group_id.0.to_string();
        let e = if !is_coordinator(broker, &group_id) {
            Some(ResponseError::NotCoordinator)
        } else {
            let mut groups = self.groups.lock().await;
            match groups.get_mut(&group_id) {
                None => Some(ResponseError::UnknownMemberId),
                Some(g) => {
                    let phase = g.phase;
                    let generation = g.generation;
                    match g.members.get_mut(r.member_id.as_str()) {
                        None => Some(ResponseError::UnknownMemberId),
                        Some(m) => {
                            m.last_seen = Instant::now();
                            if r.generation_id != generation {
                                Some(ResponseError::IllegalGeneration)
                            } else if phase == Phase::PreparingRebalance {
                                Some(ResponseError::RebalanceInProgress)
                            } else {
                                None
                            }
                        }
                    }
                }
            }
        };
        HeartbeatResponse::default().with_error_code(e.map_or(0, |e| e.code()))
    }

    /// LeaveGroup.
    pub(crate) async fn leave(
        &self,
        broker: &Broker,
        r: LeaveGroupRequest,
        v: i16,
    ) -> LeaveGroupResponse {
        use kafka_protocol::messages::leave_group_response::MemberResponse;
        let group_id = r.group_id.0.to_string();
        if !is_coordinator(broker, &group_id) {
            return LeaveGroupResponse::default()
                .with_error_code(ResponseError::NotCoordinator.code());
        }
        let ids: Vec<(StrBytes, Option<StrBytes>)> = if v >= 3 {
            r.members
                .iter()
                .map(|m| (m.member_id.clone(), m.group_instance_id.clone()))
                .collect()
        } else {
            vec![(r.member_id.clone(), None)]
        };
        let mut groups = self.groups.lock().await;
        let mut results = Vec::with_capacity(ids.len());
        let mut top = None;
        match groups.get_mut(&group_id) {
            None => top = Some(ResponseError::UnknownMemberId),
            Some(g) => {
                let mut removed = false;
                for (id, inst) in &ids {
                    let err = match g.members.remove(id.as_str()) {
                        Some(m) => {
                            if let Some((tx, jv)) = m.join_waiter {
                                let _ = tx.send(join_error(ResponseError::UnknownMemberId, id, jv));
                            }
                            removed = true;
                            0
                        }
                        None => ResponseError::UnknownMemberId.code(),
                    };
                    if v < 3 && err != 0 {
                        top = Some(ResponseError::UnknownMemberId);
                    }
                    results.push(
                        MemberResponse::default()
                            .with_member_id(id.clone())
                            .with_group_instance_id(inst.clone())
                            .with_error_code(err),
                    );
                }
                if removed {
                    Self::member_left(g);
                }
            }
        }
        let mut resp = LeaveGroupResponse::default().with_error_code(top.map_or(0, |e| e.code()));
        if v >= 3 {
            resp.members = results;
        }
        resp
    }

    /// Checks `member`/`generation` for an offset commit; `None` if acceptable.
    async fn check_member(
        &self,
        group: &str,
        member: &str,
        generation: i32,
    ) -> Option<ResponseError> {
        if generation < 0 && member.is_empty() {
            return None; // a "simple" (non-group) commit
        }
        let groups = self.groups.lock().await;
        let Some(g) = groups.get(group) else {
            return Some(if generation < 0 {
                ResponseError::UnknownMemberId
            } else {
                ResponseError::IllegalGeneration
            });
        };
        if !g.members.contains_key(member) {
            return Some(ResponseError::UnknownMemberId);
        }
        if generation != g.generation {
            return Some(ResponseError::IllegalGeneration);
        }
        if g.phase == Phase::PreparingRebalance {
            return Some(ResponseError::RebalanceInProgress);
        }
        None
    }
}

/// The offsets of one commit request, keyed for `group`, stamped with the current time. Each
/// item is `(topic, partition, offset, leader epoch, metadata)`.
/// Defines `$fn`: the answer of every partition of `$req` topics with one error code, as the
/// `$topic`/`$part` entries of the response (OffsetCommit and TxnOffsetCommit have the same
/// shape over different types).
macro_rules! every_partition_answer {
    ($fn:ident, $req:ty, $topic:ty, $part:ty) => {
        /// The answer of every partition of `topics` with error `code`.
        pub(crate) fn $fn(topics: &[$req], code: i16) -> Vec<$topic> {
            topics
                .iter()
                .map(|t| {
                    <$topic>::default()
                        .with_name(t.name.clone())
                        .with_partitions(
                            t.partitions
                                .iter()
                                .map(|p| {
                                    <$part>::default()
                                        .with_partition_index(p.partition_index)
                                        .with_error_code(code)
                                })
                                .collect(),
                        )
                })
                .collect()
        }
    };
}

every_partition_answer!(
    offset_commit_answers,
    kafka_protocol::messages::offset_commit_request::OffsetCommitRequestTopic,
    kafka_protocol::messages::offset_commit_response::OffsetCommitResponseTopic,
    kafka_protocol::messages::offset_commit_response::OffsetCommitResponsePartition
);
every_partition_answer!(
    txn_offset_commit_answers,
    kafka_protocol::messages::txn_offset_commit_request::TxnOffsetCommitRequestTopic,
    kafka_protocol::messages::txn_offset_commit_response::TxnOffsetCommitResponseTopic,
    kafka_protocol::messages::txn_offset_commit_response::TxnOffsetCommitResponsePartition
);

/// The OffsetFetch answer of every partition of `topics` with error `code` (no offset, empty
/// metadata).
pub(crate) fn offset_fetch_answers(
    topics: &[kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic],
    code: i16,
) -> Vec<kafka_protocol::messages::offset_fetch_response::OffsetFetchResponseTopic> {
    use kafka_protocol::messages::offset_fetch_response::{
        OffsetFetchResponsePartition, OffsetFetchResponseTopic,
    };
    topics
        .iter()
        .map(|t| {
            OffsetFetchResponseTopic::default()
                .with_name(t.name.clone())
                .with_partitions(
                    t.partition_indexes
                        .iter()
                        .map(|&p| {
                            OffsetFetchResponsePartition::default()
                                .with_partition_index(p)
                                .with_committed_offset(-1)
                                .with_metadata(Some(sb("")))
                                .with_error_code(code)
                        })
                        .collect(),
                )
        })
        .collect()
}

/// The offsets `topics` (of an OffsetCommit or a TxnOffsetCommit request) commit for `group`.
macro_rules! requested_offsets {
    ($group:expr, $topics:expr) => {
        offset_entries(
            $group,
            $topics.iter().flat_map(|t| {
                t.partitions.iter().map(|p| {
                    (
                        t.name.0.as_str(),
                        p.partition_index,
                        p.committed_offset,
                        p.committed_leader_epoch,
                        p.committed_metadata.as_deref(),
                    )
                })
            }),
        )
    };
}

fn offset_entries<'a>(
    group: &str,
    requested: impl Iterator<Item = (&'a str, i32, i64, i32, Option<&'a str>)>,
) -> Vec<(OffsetKey, OffsetValue)> {
    let now = now_ms();
    requested
        .map(|(topic, partition, offset, leader_epoch, metadata)| {
            (
                (group.to_owned(), topic.to_owned(), partition),
                OffsetValue {
                    offset,
                    leader_epoch,
                    metadata: metadata.map(str::to_owned),
                    commit_timestamp_ms: now,
                },
            )
        })
        .collect()
}

/// OffsetCommit: appends the offsets to the group's offsets partition.
pub(crate) async fn offset_commit(
    broker: &Broker,
    r: OffsetCommitRequest,
    _v: i16,
) -> OffsetCommitResponse {
    let group = r.group_id.0.to_string();
    let mut err = if !is_coordinator(broker, &group) {
        Some(ResponseError::NotCoordinator)
    } else {
        broker
            .groups
            .check_member(
                &group,
                r.member_id.as_str(),
                r.generation_id_or_member_epoch,
            )
            .await
    };
    let entries = requested_offsets!(&group, r.topics);
    if err.is_none() && !entries.is_empty() {
        err = append_offsets(
            broker,
            &group,
            &entries,
            None,
            None,
            TxnSupport::DefaultError,
        )
        .await
        .err();
    }
    let code = err.map_or(0, |e| e.code());
    OffsetCommitResponse::default().with_topics(offset_commit_answers(&r.topics, code))
}

async fn append_offsets(
    broker: &Broker,
    group: &str,
    entries: &[(OffsetKey, OffsetValue)],
    producer: Option<(ProducerId, ProducerEpoch)>,
    transactional_id: Option<&str>,
    support: TxnSupport,
) -> Result<(), ResponseError> {
    let index = offsets_partition_for(broker, group);
    let Some(part) = broker.partition(CONSUMER_OFFSETS, index) else {
        return Err(ResponseError::NotCoordinator);
    };
    // KIP-890 part 1: a TxnOffsetCommit's first write to this partition in its transaction
    // is verified with the coordinator first, as a Produce (Kafka's group coordinator does
    // the same through the replica manager). Part 2 (v5+, a TV2 client that sent no
    // AddOffsetsToTxn): the coordinator adds the partition, also with verification off; a
    // completing previous transaction (CONCURRENT_TRANSACTIONS) is waited out for a while,
    // as for a Produce.
    let mut guard = None;
    let add = support.operation() == Operation::Add;
    let start = Instant::now();
    if let (Some(producer), Some(transactional_id)) = (producer, transactional_id)
        && (broker.verifier.config().enable || add)
    {
        loop {
            let started = part.lock().await.start_offsets_verification(
                producer,
                entries.len(),
                now_ms(),
                add,
            )?;
            let Some(g) = started else {
                break;
            };
            let answer = broker
                .verifier
                .verify(VerifyTxn {
                    transactional_id: transactional_id.to_owned(),
                    producer_id: producer.0,
                    producer_epoch: producer.1,
                    partitions: vec![TopicPartition::new(CONSUMER_OFFSETS, index)],
                    operation: support.operation(),
                })
                .await;
            match answer.first().map(|(_, v)| *v) {
                Some(v) if v.allows_append() => {
                    guard = g;
                    break;
                }
                Some(v) => {
                    let code = v.client_code(support);
                    if code == markers::verify::codes::CONCURRENT_TRANSACTIONS
                        && start.elapsed() + ADD_RETRY_BACKOFF <= ADD_RETRY_FOR
                    {
                        tokio::time::sleep(ADD_RETRY_BACKOFF).await;
                        continue;
                    }
                    // Kafka's offset append maps NOT_ENOUGH_REPLICAS to COORDINATOR_NOT_AVAILABLE
                    // (GroupMetadataManager.storeOffsets), which clients retry.
                    let code = match code {
                        markers::verify::codes::NOT_ENOUGH_REPLICAS => {
                            markers::verify::codes::COORDINATOR_NOT_AVAILABLE
                        }
                        c => c,
                    }
                    .0;
                    return Err(
                        ResponseError::try_from_code(code).unwrap_or(ResponseError::Unknown(code))
                    );
                }
                None => return Err(ResponseError::UnknownServerError),
            }
        }
    }
    // The offset store shows the commit at once, so the lock is kept until it is durable.
    let mut part = part.lock().await;
    let end = part.append_offsets(entries, producer, now_ms(), guard)?;
    part.make_durable_locked(end)
        .await
        .map_err(|_| ResponseError::KafkaStorageError)
}

/// OffsetFetch (v1–v7: one group per request).
pub(crate) async fn offset_fetch(
    broker: &Broker,
    r: OffsetFetchRequest,
    v: i16,
) -> OffsetFetchResponse {
    use kafka_protocol::messages::offset_fetch_response::{
        OffsetFetchResponsePartition, OffsetFetchResponseTopic,
    };
    let group = r.group_id.0.to_string();
    let Some(part) = broker
        .partition(CONSUMER_OFFSETS, offsets_partition_for(broker, &group))
        .filter(|_| !group.is_empty())
    else {
        let e = if group.is_empty() {
            ResponseError::InvalidGroupId
        } else {
            ResponseError::NotCoordinator
        };
        let mut resp = OffsetFetchResponse::default();
        if v >= 2 {
            resp.error_code = e.code();
        } else {
            // v1 has no top-level error: put it on every partition
            resp.topics = offset_fetch_answers(r.topics.as_deref().unwrap_or_default(), e.code());
        }
        return resp;
    };
    let part = part.lock().await;
    let store = part.offsets();
    let wanted: Vec<(String, Vec<i32>)> = match &r.topics {
        Some(list) => list
            .iter()
            .map(|t| (t.name.0.to_string(), t.partition_indexes.clone()))
            .collect(),
        None => {
            let mut by_topic: BTreeMap<String, Vec<i32>> = BTreeMap::new();
            for (t, p, _) in store.map(|s| s.group_offsets(&group)).unwrap_or_default() {
                by_topic.entry(t).or_default().push(p);
            }
            by_topic.into_iter().collect()
        }
    };
    let topics = wanted
        .into_iter()
        .map(|(topic, parts)| {
            let partitions = parts
                .into_iter()
                .map(|p| {
                    let key = (group.clone(), topic.clone(), p);
                    let mut out = OffsetFetchResponsePartition::default()
                        .with_partition_index(p)
                        .with_committed_offset(-1)
                        .with_metadata(Some(sb("")));
                    if v >= 7 && r.require_stable && store.is_some_and(|s| s.has_pending(&key)) {
                        out.error_code = ResponseError::UnstableOffsetCommit.code();
                    } else if let Some(val) = store.and_then(|s| s.get(&key)) {
                        out.committed_offset = val.offset;
                        out.metadata = Some(sb(val.metadata.as_deref().unwrap_or("")));
                        if v >= 5 {
                            out.committed_leader_epoch = val.leader_epoch;
                        }
                    }
                    out
                })
                .collect();
            OffsetFetchResponseTopic::default()
                .with_name(TopicName(sb(&topic)))
                .with_partitions(partitions)
        })
        .collect();
    OffsetFetchResponse::default().with_topics(topics)
}

/// TxnOffsetCommit: stages the offsets in the offsets partition as a transactional batch of
/// the producer; they become visible with its COMMIT marker. v5+ (a TV2 client, which sent
/// no AddOffsetsToTxn): the offsets partition is added to the transaction here first.
pub(crate) async fn txn_offset_commit(
    broker: &Broker,
    r: TxnOffsetCommitRequest,
    v: i16,
) -> TxnOffsetCommitResponse {
    let group = r.group_id.0.to_string();
    let mut err = if !is_coordinator(broker, &group) {
        Some(ResponseError::NotCoordinator)
    } else if r.producer_id.0 < 0 || r.producer_epoch < 0 {
        Some(ResponseError::InvalidRequest)
    } else if r.generation_id >= 0 || !r.member_id.is_empty() {
        // KIP-447: a commit from the right generation is safe even while rebalancing.
        match broker
            .groups
            .check_member(&group, r.member_id.as_str(), r.generation_id)
            .await
        {
            None | Some(ResponseError::RebalanceInProgress) => None,
            Some(e) => Some(e),
        }
    } else {
        None
    };
    let entries = requested_offsets!(&group, r.topics);
    if err.is_none() && !entries.is_empty() {
        let producer = (ProducerId(r.producer_id.0), ProducerEpoch(r.producer_epoch));
        err = append_offsets(
            broker,
            &group,
            &entries,
            Some(producer),
            Some(r.transactional_id.0.as_str()),
            TxnSupport::from_txn_offset_commit_version(v),
        )
        .await
        .err();
    }
    let code = err.map_or(0, |e| e.code());
    TxnOffsetCommitResponse::default().with_topics(txn_offset_commit_answers(&r.topics, code))
}
