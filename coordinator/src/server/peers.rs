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
use markers::wire::KafkaConnection;
use tokio::net::TcpStream;
use tokio::task::JoinHandle;
use txn_log::sync::Mutex;

use super::membership::{Member, Membership};

/// The reachability of the other members, kept up to date by one probe task per member.
#[derive(Debug)]
pub struct Peers {
    /// This daemon's node id (never probed).
    me: i32,
    /// How often each member is probed (the membership tick).
    interval: Duration,
    /// How long a probe (connect, or one ApiVersions call) may take.
    timeout: Duration,
    /// Members whose last probe failed.
    unreachable: Mutex<HashMap<i32, Member>>,
}

impl Peers {
    /// Peers of node `me`, probed every `interval`, each probe bounded by `timeout`.
    pub fn new(me: i32, interval: Duration, timeout: Duration) -> Self {
        Self {
            me,
            interval,
            timeout,
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

    fn set(&self, member: &Member, reachable: bool) {
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
                    address = %member.probe_address().map(|(h, p)| format!("{h}:{p}")).unwrap_or_default(),
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

/// Keeps one connection to `member` (at its [`Member::probe_address`]) and probes it every
/// interval, recording the outcome. A member with no such address is left alone (reachable).
async fn probe(peers: Arc<Peers>, member: Member) {
    let Some((host, port)) = member.probe_address() else {
        return;
    };
    let request = ApiVersionsRequest::default();
    loop {
        let connect = TcpStream::connect((host.as_str(), port));
        match tokio::time::timeout(peers.timeout, connect).await {
            Ok(Ok(stream)) => {
                let _ = stream.set_nodelay(true);
                let mut conn = KafkaConnection::new(stream, "txn-coordinator-peer-probe");
                loop {
                    let answered = matches!(
                        tokio::time::timeout(peers.timeout, conn.call(&request, 0)).await,
                        Ok(Ok(_))
                    );
                    peers.set(&member, answered);
                    if !answered {
                        break;
                    }
                    // Between probes, a peer that closes the connection (its process died)
                    // is noticed at once rather than at the next probe.
                    if closed_within(conn.get_ref(), peers.interval).await {
                        peers.set(&member, false);
                        break;
                    }
                }
            }
            _ => peers.set(&member, false),
        }
        tokio::time::sleep(peers.interval).await;
    }
}

/// Waits up to `wait` for `stream` to be closed by its peer; whether it was. Nothing else is
/// sent on a probe connection between calls, so readable means end of stream or an error.
async fn closed_within(stream: &TcpStream, wait: Duration) -> bool {
    match tokio::time::timeout(wait, stream.readable()).await {
        Err(_) => false,
        Ok(Err(_)) => true,
        Ok(Ok(())) => {
            let mut one = [0u8; 1];
            match stream.try_read(&mut one) {
                // Spurious readiness: still open.
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => false,
                // End of stream, an error, or bytes nobody asked for.
                _ => true,
            }
        }
    }
}
