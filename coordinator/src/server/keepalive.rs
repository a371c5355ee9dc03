#![cfg(feature = "etcd")]
//! The keep-alive rounds of the membership lease, over a [`KeepAliveSource`]: etcd in
//! production (`membership.rs`), a script in the tests (on tokio's paused clock).
//!
//! A round starts once the previous round's pause is over, or earlier when woken (a member
//! key changed). It keeps the lease alive, or registers a new one once etcd said the lease is
//! gone, and passes the outcome to the [`LeaseRules`]. A keep-alive tries the endpoints one
//! at a time, starting with the one that answered last, each for at most a ninth of the TTL
//! and all of them for at most a third.

use std::time::Duration;

use tokio::time::Instant;

use super::membership::{LeaseRules, LeaseStep, RoundPlan};

/// Where the keep-alives and registrations of the lease go.
pub(super) trait KeepAliveSource {
    /// Why a keep-alive got no answer.
    type Error: std::fmt::Display;

    /// How many endpoints there are.
    fn endpoints(&self) -> usize;

    /// Endpoint `i`'s name, for the logs.
    fn endpoint(&self, i: usize) -> &str;

    /// One keep-alive of `lease` through `endpoint`: `Ok(true)` if acknowledged, `Ok(false)`
    /// if etcd answered that the lease is gone. The caller bounds its time.
    async fn keep_alive(&mut self, endpoint: usize, lease: i64) -> Result<bool, Self::Error>;

    /// Grants a lease and registers this member under it, through `endpoint` (the one that
    /// answered last); returns the lease id.
    async fn register(&mut self, endpoint: usize) -> anyhow::Result<i64>;
}

/// How long a keep-alive may take on one endpoint: a ninth of the TTL.
pub(super) fn endpoint_bound(ttl: Duration) -> Duration {
    ttl / 9
}

/// The lease of this member and its keep-alive rounds.
#[derive(Debug)]
pub(super) struct Keeper<S> {
    source: S,
    ttl: Duration,
    /// The endpoint that answered the last keep-alive.
    current: usize,
    /// The lease registered last.
    lease: i64,
    /// When the next round may start (`None`: at once).
    next: Option<Instant>,
}

impl<S: KeepAliveSource> Keeper<S> {
    /// A keeper of a lease of `ttl` through `source`, not registered yet.
    pub(super) fn new(source: S, ttl: Duration) -> Self {
        Self {
            source,
            ttl,
            current: 0,
            lease: 0,
            next: None,
        }
    }

    /// The source.
    pub(super) fn source(&self) -> &S {
        &self.source
    }

    /// The endpoint that answered the last keep-alive (the first one until then).
    pub(super) fn current(&self) -> usize {
        self.current
    }

    /// Registers under a new lease, through the endpoint that answered last.
    pub(super) async fn register(&mut self) -> anyhow::Result<()> {
        self.lease = self.source.register(self.current).await?;
        Ok(())
    }

    /// One round: waits out the previous round's pause (or until `woken` completes), keeps
    /// the lease alive (or registers again if `rules` say so) and returns the step with the
    /// `rules`' plan.
    pub(super) async fn round(
        &mut self,
        rules: &mut LeaseRules,
        woken: impl Future<Output = ()>,
    ) -> (LeaseStep, RoundPlan) {
        if let Some(at) = self.next {
            tokio::select! {
                () = tokio::time::sleep_until(at) => {}
                () = woken => {}
            }
        }
        let sent = Instant::now();
        let step = if rules.registered() {
            match self.keep_alive().await {
                Some(true) => LeaseStep::Acked,
                Some(false) => {
                    tracing::warn!(
                        lease = self.lease,
                        "membership lease gone in etcd; registering again"
                    );
                    LeaseStep::Gone
                }
                None => LeaseStep::NoAnswer,
            }
        } else {
            match self.register().await {
                Ok(()) => LeaseStep::Acked,
                Err(e) => {
                    tracing::warn!(error = %format!("{e:#}"), "registering in etcd failed; retrying");
                    LeaseStep::NoAnswer
                }
            }
        };
        let plan = rules.after(step, sent, Instant::now());
        self.next = Some(sent + plan.pause);
        (step, plan)
    }

    /// Refreshes the lease: whether it still lives (`Some(false)`: etcd says it is gone), or
    /// `None` if no member answered within a third of the TTL. Tries the members one at a
    /// time, each for at most a ninth of the TTL, starting with the one that answered last,
    /// so that one dead etcd member out of three does not cost this daemon its lease.
    async fn keep_alive(&mut self) -> Option<bool> {
        let deadline = Instant::now() + self.ttl / 3;
        let each = endpoint_bound(self.ttl);
        let n = self.source.endpoints();
        let mut last = String::new();
        for k in 0..n {
            let i = (self.current + k) % n;
            let bound = deadline.min(Instant::now() + each);
            match tokio::time::timeout_at(bound, self.source.keep_alive(i, self.lease)).await {
                Ok(Ok(alive)) => {
                    self.current = i;
                    return Some(alive);
                }
                Ok(Err(e)) => last = format!("{}: {e}", self.source.endpoint(i)),
                Err(_) => last = format!("{}: timed out", self.source.endpoint(i)),
            }
            if Instant::now() >= deadline {
                break;
            }
        }
        tracing::warn!(error = %last, "membership keep-alive failed on every etcd endpoint tried");
        None
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeSet, VecDeque};

    use super::*;
    use LeaseStep::{Acked, Gone, NoAnswer};

    /// A ninth of it is a whole second: each endpoint gets 1 s, a round 3 s; rounds start
    /// every 1.5 s (0.15 s after a failed keep-alive); serving lasts 7.5 s after the send of
    /// the last acknowledged keep-alive.
    const TTL: Duration = Duration::from_secs(9);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[derive(Debug, Clone, Copy)]
    enum Answer {
        /// Keep-alive acknowledged, or registered.
        Ok,
        /// etcd says the lease is gone.
        Gone,
        /// The call failed.
        Error,
        /// No answer ever.
        Never,
    }

    /// A scripted answer, given `after` the call.
    #[derive(Debug, Clone, Copy)]
    struct Reply {
        after: Duration,
        answer: Answer,
    }

    fn now(answer: Answer) -> Reply {
        after(0, answer)
    }

    fn after(millis: u64, answer: Answer) -> Reply {
        Reply {
            after: ms(millis),
            answer,
        }
    }

    fn times(n: usize, reply: Reply) -> impl Iterator<Item = Reply> {
        std::iter::repeat_n(reply, n)
    }

    /// Keep-alives and registrations answered by their scripts, in call order (then `then`
    /// and an immediate registration), and recorded.
    #[derive(Debug)]
    struct Scripted {
        t0: Instant,
        names: Vec<String>,
        keep_alives: VecDeque<Reply>,
        then: Reply,
        registrations: VecDeque<Reply>,
        leases: i64,
        /// Keep-alives: when (since `t0`), through which endpoint, of which lease.
        calls: Vec<(Duration, usize, i64)>,
        /// Registrations: when, through which endpoint.
        registered: Vec<(Duration, usize)>,
    }

    impl Scripted {
        async fn answer(reply: Reply) -> Answer {
            tokio::time::sleep(reply.after).await;
            if let Answer::Never = reply.answer {
                std::future::pending::<()>().await;
            }
            reply.answer
        }
    }

    impl KeepAliveSource for Scripted {
        type Error = &'static str;

        fn endpoints(&self) -> usize {
            self.names.len()
        }

        fn endpoint(&self, i: usize) -> &str {
            &self.names[i]
        }

        async fn keep_alive(&mut self, endpoint: usize, lease: i64) -> Result<bool, Self::Error> {
            self.calls.push((self.t0.elapsed(), endpoint, lease));
            let reply = self.keep_alives.pop_front().unwrap_or(self.then);
            match Self::answer(reply).await {
                Answer::Ok => Ok(true),
                Answer::Gone => Ok(false),
                Answer::Error | Answer::Never => Err("scripted error"),
            }
        }

        async fn register(&mut self, endpoint: usize) -> anyhow::Result<i64> {
            self.registered.push((self.t0.elapsed(), endpoint));
            let reply = self.registrations.pop_front().unwrap_or(now(Answer::Ok));
            match Self::answer(reply).await {
                Answer::Ok => {
                    self.leases += 1;
                    Ok(self.leases)
                }
                _ => anyhow::bail!("scripted registration error"),
            }
        }
    }

    /// The membership loop's lease part over `n` scripted endpoints, registered at `t0`.
    struct Loop {
        keeper: Keeper<Scripted>,
        rules: LeaseRules,
    }

    impl Loop {
        async fn start(
            n: usize,
            keep_alives: impl IntoIterator<Item = Reply>,
            then: Reply,
            registrations: impl IntoIterator<Item = Reply>,
        ) -> Self {
            let t0 = Instant::now();
            let source = Scripted {
                t0,
                names: (0..n).map(|i| format!("etcd{i}")).collect(),
                keep_alives: keep_alives.into_iter().collect(),
                then,
                registrations: registrations.into_iter().collect(),
                leases: 0,
                calls: Vec::new(),
                registered: Vec::new(),
            };
            let mut keeper = Keeper::new(source, TTL);
            keeper.register().await.expect("registered");
            Self {
                keeper,
                rules: LeaseRules::new(TTL, t0),
            }
        }

        /// Runs `n` rounds: when each ended (since `t0`), its step, whether it serves.
        async fn rounds(&mut self, n: usize) -> Vec<(Duration, LeaseStep, bool)> {
            let mut seen = Vec::new();
            for _ in 0..n {
                let never = std::future::pending();
                let (step, plan) = self.keeper.round(&mut self.rules, never).await;
                seen.push((self.keeper.source.t0.elapsed(), step, plan.valid));
            }
            seen
        }

        /// The keep-alives so far: when, through which endpoint.
        fn calls(&self) -> Vec<(Duration, usize)> {
            let calls = &self.keeper.source.calls;
            calls.iter().map(|&(at, i, _)| (at, i)).collect()
        }

        /// The leases the keep-alives were for.
        fn leases(&self) -> BTreeSet<i64> {
            self.keeper.source.calls.iter().map(|c| c.2).collect()
        }
    }

    /// Keep-alives answered after 0.9 of the per-endpoint bound are acknowledgements: the
    /// lease is kept, serving never stops, rounds start every tick.
    #[tokio::test(start_paused = true)]
    async fn delayed_keep_alives_keep_the_lease_and_serving() {
        let mut l = Loop::start(3, [], after(900, Answer::Ok), []).await;
        let seen = l.rounds(8).await;
        let expected: Vec<_> = (0..8).map(|k| (ms(1_500 * k + 900), Acked, true)).collect();
        assert_eq!(seen, expected);
        let calls: Vec<_> = (0..8).map(|k| (ms(1_500 * k), 0)).collect();
        assert_eq!(l.calls(), calls);
        assert_eq!(
            l.keeper.source.registered,
            [(ms(0), 0)],
            "never registered again"
        );
    }

    /// A wake-up (a member key changed) starts the next round before its pause is over.
    #[tokio::test(start_paused = true)]
    async fn a_wake_up_starts_the_next_round_at_once() {
        let mut l = Loop::start(3, [], now(Answer::Ok), []).await;
        l.rounds(1).await;
        tokio::time::sleep(ms(200)).await;
        let (step, _) = l.keeper.round(&mut l.rules, async {}).await;
        assert_eq!(step, Acked);
        assert_eq!(l.calls(), [(ms(0), 0), (ms(200), 0)]);
    }

    /// A member that does not answer is left after its ninth of the TTL for the next one,
    /// which acknowledges in the same round; the next round starts with that one.
    #[tokio::test(start_paused = true)]
    async fn a_keep_alive_lost_on_one_endpoint_is_answered_by_another() {
        let script = [now(Answer::Ok), now(Answer::Never), now(Answer::Ok)];
        let mut l = Loop::start(3, script, now(Answer::Ok), []).await;
        let seen = l.rounds(4).await;
        assert_eq!(
            seen,
            [
                (ms(0), Acked, true),
                (ms(2_500), Acked, true),
                (ms(3_000), Acked, true),
                (ms(4_500), Acked, true),
            ]
        );
        assert_eq!(
            l.calls(),
            [
                (ms(0), 0),
                (ms(1_500), 0),
                (ms(2_500), 1),
                (ms(3_000), 1),
                (ms(4_500), 1),
            ]
        );
        assert_eq!(l.keeper.source.registered.len(), 1);
    }

    /// When no endpoint answers, serving stops with the first round that ends 7.5 s (the TTL
    /// less a tick) after the send of the last acknowledged keep-alive, not before; the lease
    /// is kept and serving resumes with the next acknowledgement. With three endpoints a round
    /// takes 3 s, with one 1 s.
    #[tokio::test(start_paused = true)]
    async fn when_no_endpoint_answers_serving_stops_in_time_and_the_lease_is_kept() {
        let ok = now(Answer::Ok);
        let hang = now(Answer::Never);
        let script = std::iter::once(ok).chain(times(9, hang)).chain([ok]);
        let mut l = Loop::start(3, script, ok, []).await;
        assert_eq!(
            l.rounds(5).await,
            [
                (ms(0), Acked, true),
                (ms(4_500), NoAnswer, true),
                (ms(7_500), NoAnswer, false),
                (ms(10_500), NoAnswer, false),
                (ms(10_500), Acked, true),
            ]
        );
        assert_eq!(l.keeper.source.registered.len(), 1, "the lease is kept");
        assert_eq!(l.leases(), BTreeSet::from([1]));

        let script = std::iter::once(ok).chain(times(6, hang)).chain([ok]);
        let mut l = Loop::start(1, script, ok, []).await;
        let mut expected = vec![(ms(0), Acked, true)];
        expected.extend(
            (2_500..=6_500)
                .step_by(1_000)
                .map(|t| (ms(t), NoAnswer, true)),
        );
        expected.extend([(ms(7_500), NoAnswer, false), (ms(7_500), Acked, true)]);
        assert_eq!(l.rounds(8).await, expected);
        assert_eq!(l.keeper.source.registered.len(), 1, "the lease is kept");
        assert_eq!(l.leases(), BTreeSet::from([1]));
    }

    /// etcd's answer that the lease is gone, from any member, makes the next round register
    /// again (through that member); while registering fails, serving lasts until 7.5 s after
    /// the send of the last acknowledged keep-alive.
    #[tokio::test(start_paused = true)]
    async fn a_gone_lease_is_registered_again_and_serving_lasts_its_time() {
        let script = [now(Answer::Ok), now(Answer::Never), now(Answer::Gone)];
        let failing = after(500, Answer::Error);
        let registrations = std::iter::once(now(Answer::Ok)).chain(times(4, failing));
        let mut l = Loop::start(3, script, now(Answer::Ok), registrations).await;
        assert_eq!(
            l.rounds(8).await,
            [
                (ms(0), Acked, true),
                (ms(2_500), Gone, true),
                (ms(3_000), NoAnswer, true),
                (ms(4_500), NoAnswer, true),
                (ms(6_000), NoAnswer, true),
                (ms(7_500), NoAnswer, false),
                (ms(8_500), Acked, true),
                (ms(10_000), Acked, true),
            ]
        );
        assert_eq!(
            l.keeper.source.registered,
            [
                (ms(0), 0),
                (ms(2_500), 1),
                (ms(4_000), 1),
                (ms(5_500), 1),
                (ms(7_000), 1),
                (ms(8_500), 1),
            ]
        );
        assert_eq!(
            l.keeper.source.calls,
            [
                (ms(0), 0, 1),
                (ms(1_500), 0, 1),
                (ms(2_500), 1, 1),
                (ms(10_000), 1, 2)
            ],
            "no keep-alive of the gone lease; the new one's through the member that answered"
        );
    }

    /// An acknowledgement that arrives after the round's bound (a third of the TTL), though
    /// within its endpoint's, is no acknowledgement, and the next round starts with the
    /// endpoint that answered before; one just within the bound counts.
    #[tokio::test(start_paused = true)]
    async fn an_acknowledgement_after_the_round_bound_does_not_count() {
        let failing = after(900, Answer::Error);
        let script = std::iter::once(now(Answer::Ok))
            .chain(times(3, failing))
            .chain([after(400, Answer::Ok)])
            .chain(times(3, failing))
            .chain([after(290, Answer::Ok)]);
        let mut l = Loop::start(4, script, now(Answer::Ok), []).await;
        assert_eq!(
            l.rounds(4).await,
            [
                (ms(0), Acked, true),
                (ms(4_500), NoAnswer, true),
                (ms(7_490), Acked, true),
                (ms(7_490), Acked, true),
            ]
        );
        let calls = [
            0, 1_500, 2_400, 3_300, 4_200, 4_500, 5_400, 6_300, 7_200, 7_490,
        ];
        let endpoints = [0, 0, 1, 2, 3, 0, 1, 2, 3, 3];
        let expected: Vec<_> = calls.iter().map(|&t| ms(t)).zip(endpoints).collect();
        assert_eq!(l.calls(), expected);
    }
}
