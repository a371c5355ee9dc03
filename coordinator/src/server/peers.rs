//! Which other members answer: each daemon keeps a Kafka connection to every other live member
//! and probes it with ApiVersions once per membership tick.
//!
//! A member's lease outlives its process by up to the lease TTL, so until it expires the
//! survivors' membership still names a dead member as the owner of its partitions. Naming it
//! in FindCoordinator sends clients to a dead address, and librdkafka then backs off its
//! reconnects exponentially (`reconnect.backoff.ms` doubling up to `reconnect.backoff.max.ms`,
//! 10 s by default) and only asks for the coordinator again after each failed attempt: the
//! seconds a real client loses after a failover are those back-offs, not the lease. A member
//! that does not answer is therefore never named: FindCoordinator answers
//! COORDINATOR_NOT_AVAILABLE for its partitions, which librdkafka asks again about every
//! 500 ms, until the lease expires and a survivor takes the partitions over.
//!
//! The probes go to each member's inter-broker listener (`inter.broker.listener.name`, as
//! Kafka's brokers talk to each other) with that listener's TLS settings as a client
//! ([`super::outgoing::ClientSecurity::inter_broker`]); on a SASL listener the
//! ApiVersions comes before any SASL exchange, as Kafka allows, so a probe never
//! authenticates. A probe whose TLS handshake fails (an untrusted or misnamed certificate)
//! counts as unanswered, and the log says why.
//!
//! A member is *unreachable* from the moment its probe connection fails: refused or reset
//! (a killed process; its kernel closes the sockets at once), closed by the peer between
//! probes, or no answer within [`Peers::timeout`] (a stopped process or machine). It is
//! reachable again with its next answered probe. This is only a hint for clients: ownership
//! still moves only with the lease, so a member that is merely slow to answer costs its clients
//! a few more lookups, never a second owner.

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use kafka_protocol::messages::ApiVersionsRequest;
use markers::wire::{Connector, KafkaStream};
use tokio::io::AsyncReadExt as _;
use tokio::task::JoinHandle;
use txn_log::sync::Mutex;

use super::membership::{Member, Membership};

/// How the other members are probed.
#[derive(Debug, Clone)]
pub struct Probe {
    /// The listener probed on each member (`inter.broker.listener.name`).
    pub listener: String,
    /// That listener's client side (plain TCP, or TLS).
    pub connector: Arc<dyn Connector>,
}

/// The client id of the probes.
const CLIENT_ID: &str = "txn-coordinator-peer-probe";

/// The reachability of the other members, kept up to date by one probe task per member.
#[derive(Debug)]
pub struct Peers {
    /// This daemon's node id (never probed).
    me: i32,
    /// How often each member is probed (the membership tick).
    interval: Duration,
    /// How long a probe (connect, or one ApiVersions call) may take.
    timeout: Duration,
    /// Where and how.
    probe: Probe,
    /// Members whose last probe failed.
    unreachable: Mutex<HashMap<i32, Member>>,
}

impl Peers {
    /// Peers of node `me`, probed as `probe` says every `interval`, each probe bounded by
    /// `timeout`.
    pub fn new(me: i32, interval: Duration, timeout: Duration, probe: Probe) -> Self {
        Self {
            me,
            interval,
            timeout,
            probe,
            unreachable: Mutex::new(HashMap::new()),
        }
    }

    /// Whether `member` answered its last probe (or has not been probed yet). Always true for
    /// this daemon itself.
    pub fn reachable(&self, member: &Member) -> bool {
        member.node_id == self.me
            || self
                .unreachable
                .lock()
                .get(&member.node_id)
                .is_none_or(|m| m != member)
    }

    /// The bound of one probe.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Records the outcome of a probe of `member`: `Err` says why it was not answered.
    fn set(&self, member: &Member, outcome: Result<(), String>) {
        let reachable = outcome.is_ok();
        let mut unreachable = self.unreachable.lock();
        let was = !unreachable.contains_key(&member.node_id);
        if reachable {
            unreachable.remove(&member.node_id);
        } else {
            unreachable.insert(member.node_id, member.clone());
        }
        drop(unreachable);
        if was != reachable {
            if reachable {
                tracing::info!(node_id = member.node_id, "member answers again");
            } else {
                tracing::warn!(
                    node_id = member.node_id,
                    listener = %self.probe.listener,
                    address = %member.probe_address(&self.probe.listener).map(|(h, p)| format!("{h}:{p}")).unwrap_or_default(),
                    reason = %outcome.err().unwrap_or_default(),
                    "member does not answer; FindCoordinator will not name it until it does"
                );
            }
        }
    }

    fn forget(&self, node_id: i32) {
        self.unreachable.lock().remove(&node_id);
    }
}

/// Probes the members of `membership` until it is dropped: every interval, one probe task is
/// started for each new member (or a member at a new address) and stopped for each member
/// that left.
pub fn spawn(peers: Arc<Peers>, membership: Weak<Membership>) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut probes: HashMap<i32, (Member, JoinHandle<()>)> = HashMap::new();
        while let Some(m) = membership.upgrade() {
            let members: Vec<Member> = m
                .members()
                .into_iter()
                .filter(|x| x.node_id != peers.me)
                .collect();
            drop(m);
            probes.retain(|node, (member, task)| {
                let keep = members.iter().any(|x| x == member);
                if !keep {
                    task.abort();
                    peers.forget(*node);
                }
                keep
            });
            for member in members {
                if let std::collections::hash_map::Entry::Vacant(slot) =
                    probes.entry(member.node_id)
                {
                    let task = tokio::spawn(probe(peers.clone(), member.clone()));
                    slot.insert((member, task));
                }
            }
            tokio::time::sleep(peers.interval).await;
        }
        for (_, (_, task)) in probes {
            task.abort();
        }
    })
}

/// Keeps one connection to `member` (at its [`Member::probe_address`] on the probed listener)
/// and probes it every interval, recording the outcome. A member without that listener is
/// left alone (reachable), with a warning.
async fn probe(peers: Arc<Peers>, member: Member) {
    let listener = &peers.probe.listener;
    let Some((host, port)) = member.probe_address(listener) else {
        tracing::warn!(
            node_id = member.node_id,
            listener = %listener,
            "member has no listener of this name (inter.broker.listener.name); it is not probed"
        );
        return;
    };
    let request = ApiVersionsRequest::default();
    loop {
        let connect = peers.probe.connector.connect(&host, port, CLIENT_ID);
        match tokio::time::timeout(peers.timeout, connect).await {
            Ok(Ok(mut conn)) => loop {
                let outcome =
                    match tokio::time::timeout(peers.timeout, conn.call(&request, 0)).await {
                        Ok(Ok(_)) => Ok(()),
                        Ok(Err(e)) => Err(format!("ApiVersions: {e}")),
                        Err(_) => Err(format!(
                            "no answer to ApiVersions within {:?}",
                            peers.timeout
                        )),
                    };
                let answered = outcome.is_ok();
                peers.set(&member, outcome);
                if !answered {
                    break;
                }
                // Between probes, a peer that closes the connection (its process died)
                // is noticed at once rather than at the next probe.
                if closed_within(conn.get_mut(), peers.interval).await {
                    peers.set(&member, Err("closed the probe connection".to_owned()));
                    break;
                }
            },
            Ok(Err(e)) => peers.set(&member, Err(e.to_string())),
            Err(_) => peers.set(
                &member,
                Err(format!("no connection within {:?}", peers.timeout)),
            ),
        }
        tokio::time::sleep(peers.interval).await;
    }
}

/// Waits up to `wait` for `stream` to be closed by its peer; whether it was. Nothing else is
/// sent on a probe connection between calls, so any read that ends means end of stream, an
/// error, or bytes nobody asked for. (Reading is cancel-safe: a timed-out read consumed
/// nothing; TLS records that carry no data, such as session tickets, are not data.)
async fn closed_within(stream: &mut Box<dyn KafkaStream>, wait: Duration) -> bool {
    let mut one = [0u8; 1];
    tokio::time::timeout(wait, stream.read(&mut one))
        .await
        .is_ok()
}
