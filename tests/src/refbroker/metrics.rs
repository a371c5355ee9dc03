//! The broker's `/metrics` (`--metrics-listen`): the standard `process_*` metrics and the
//! counters of its KIP-890 verifier ([`markers::verify::VerifierStats`]), read at each scrape.
//!
//! | metric | what |
//! |---|---|
//! | `refbroker_verification_calls_total` | verification calls to the coordinators |
//! | `refbroker_verification_transactions_sent_total` | transactions those calls carried |
//! | `refbroker_verification_merged_total` | questions that joined a transaction already queued |
//! | `refbroker_verification_cache_hits_total` | partitions answered from the cache of yeses |
//! | `refbroker_verification_partitions_verified_total` | partitions verified (cache hits included) |
//! | `refbroker_verification_partitions_refused_total` | partitions refused |
//! | `refbroker_verification_adds_sent_total` | transactions sent as TV2 adds (KIP-890 part 2) |

use std::sync::{Arc, Weak};

use coordinator::prometheus_client::collector::Collector;
use coordinator::prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use coordinator::prometheus_client::metrics::MetricType;
use coordinator::prometheus_client::metrics::counter::ConstCounter;
use coordinator::prometheus_client::registry::Registry;
use coordinator::server::process::ProcessCollector;
use tokio::net::TcpListener;

use super::server::Broker;

/// Encodes the verifier's counters at each scrape (nothing once the broker is gone).
#[derive(Debug)]
struct VerifierCollector(Weak<Broker>);

impl Collector for VerifierCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(broker) = self.0.upgrade() else {
            return Ok(());
        };
        let s = broker.verifier.stats();
        let counters = [
            (
                "refbroker_verification_calls",
                "Verification calls to the coordinators",
                s.calls,
            ),
            (
                "refbroker_verification_transactions_sent",
                "Transactions carried by the verification calls",
                s.transactions_sent,
            ),
            (
                "refbroker_verification_merged",
                "Verification questions that joined a transaction already queued",
                s.merged,
            ),
            (
                "refbroker_verification_cache_hits",
                "Partitions answered from the cache of positive answers",
                s.cache_hits,
            ),
            (
                "refbroker_verification_partitions_verified",
                "Partitions verified, cache hits included",
                s.verified,
            ),
            (
                "refbroker_verification_partitions_refused",
                "Partitions refused",
                s.refused,
            ),
            (
                "refbroker_verification_adds_sent",
                "Transactions sent as transaction version 2 adds",
                s.adds_sent,
            ),
        ];
        for (name, help, value) in counters {
            let m = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
            ConstCounter::new(value).encode(m)?;
        }
        Ok(())
    }
}

/// Serves `/metrics`, `/health` and `/ready` (ready once listening) on `listener` for as long
/// as the broker runs.
pub(crate) fn serve(listener: TcpListener, broker: &Arc<Broker>) {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(ProcessCollector));
    registry.register_collector(Box::new(VerifierCollector(Arc::downgrade(broker))));
    let (stop, stopped) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        // The sender lives as long as the server: it is never told to stop.
        let _stop = stop;
        coordinator::server::http::serve_metrics(
            listener,
            Arc::new(registry),
            || {},
            || Ok(()),
            stopped,
        )
        .await;
    });
}
