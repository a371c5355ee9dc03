//! KIP-890 against the coordinator in process: [`::markers::verify::TxnVerifier`] for
//! [`Coordinator`], so a broker that hosts the coordinator hands it to
//! [`::markers::verify::Verifier`] without converting anything.
//!
//! A verification ([`Operation::Verify`]) is `add_partitions_to_txn` with `verify_only`; an add
//! (transaction version 2, [`Operation::Add`]) the same without it, at the version
//! [`request_version`] gives; each partition's error code becomes its [`Verdict`] by
//! [`Verdict::from_coordinator_code`], as a wire answer would ([`::markers::verify::verdicts_of`]).
//!
//! ```no_run
//! # async fn f(coordinator: coordinator::shell::Coordinator) {
//! use std::sync::Arc;
//! use markers::verify::{VerificationConfig, Verifier};
//!
//! let verifier = Verifier::new(Arc::new(coordinator), VerificationConfig::default());
//! # let _ = verifier; }
//! ```

use ::markers::verify::{
    CallError, CoordinatorNode, Operation, TxnVerifier, Verdict, VerifyTxn, request_version,
};
use async_trait::async_trait;

use super::Coordinator;
use crate::{AddPartitionsToTxnRequest, AddPartitionsTxn, ErrorCode};

/// The node [`Coordinator`]'s [`TxnVerifier::coordinator`] names for every transactional id:
/// the one coordinator in this process. (A broker of a cluster, whose ids are coordinated on
/// several nodes, implements `TxnVerifier` itself: it finds the owner, and calls
/// [`Coordinator::verify_txns`] when that is this node.)
pub const IN_PROCESS_NODE: CoordinatorNode = CoordinatorNode(0);

impl Coordinator {
    /// Asks this coordinator about `txns` in one call: one `Vec` per transaction, in order,
    /// with one verdict per partition, in order. A partition of a log partition this node does
    /// not own comes back NOT_COORDINATOR (`Verdict::CoordinatorUnavailable`).
    pub async fn verify_txns(&self, txns: &[VerifyTxn]) -> Result<Vec<Vec<Verdict>>, CallError> {
        let request = AddPartitionsToTxnRequest {
            version: request_version(txns),
            transactions: txns
                .iter()
                .map(|t| AddPartitionsTxn {
                    transactional_id: t.transactional_id.clone(),
                    producer_id: t.producer_id,
                    producer_epoch: t.producer_epoch,
                    verify_only: t.operation == Operation::Verify,
                    partitions: t.partitions.clone(),
                })
                .collect(),
        };
        let response = self.add_partitions_to_txn(request).await;
        if !response.error.is_none() {
            return Err(CallError::Refused {
                code: response.error,
            });
        }
        Ok(txns
            .iter()
            .map(|t| {
                let result = response
                    .results
                    .iter()
                    .find(|r| r.transactional_id == t.transactional_id);
                t.partitions
                    .iter()
                    .map(|tp| {
                        result
                            .and_then(|r| r.partitions.iter().find(|(p, _)| p == tp))
                            .map_or(
                                Verdict::Other {
                                    code: ErrorCode::UNKNOWN_SERVER_ERROR,
                                },
                                |&(_, code)| Verdict::from_coordinator_code(code),
                            )
                    })
                    .collect()
            })
            .collect())
    }
}

#[async_trait]
impl TxnVerifier for Coordinator {
    async fn coordinator(&self, _transactional_id: &str) -> Result<CoordinatorNode, CallError> {
        Ok(IN_PROCESS_NODE)
    }

    async fn verify(
        &self,
        _node: CoordinatorNode,
        txns: &[VerifyTxn],
    ) -> Result<Vec<Vec<Verdict>>, CallError> {
        self.verify_txns(txns).await
    }
}
