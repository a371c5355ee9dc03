//! Typed requests and responses of the coordinator APIs, decoupled from the wire codec.
//!
//! Transactional ids arrive as raw strings (`Option<String>` where Kafka allows null) so that
//! the engine, not the codec, answers null/empty ids with Kafka's codes. The `version` fields
//! carry the API version where behaviour depends on it.

use txn_log::{ProducerEpoch, ProducerId, TopicPartition, TxnState};

use crate::ErrorCode;

/// A request to the coordinator.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Request {
    /// InitProducerId (api 22), v0-6.
    InitProducerId(InitProducerIdRequest),
    /// AddPartitionsToTxn (api 24), v0-5.
    AddPartitionsToTxn(AddPartitionsToTxnRequest),
    /// AddOffsetsToTxn (api 25), v0-4.
    AddOffsetsToTxn(AddOffsetsToTxnRequest),
    /// EndTxn (api 26), v0-5.
    EndTxn(EndTxnRequest),
    /// DescribeTransactions (api 65), v0.
    DescribeTransactions(DescribeTransactionsRequest),
    /// ListTransactions (api 66), v0-1.
    ListTransactions(ListTransactionsRequest),
}

/// InitProducerId request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InitProducerIdRequest {
    /// API version (v<4: PRODUCER_FENCED is answered as INVALID_PRODUCER_EPOCH).
    pub version: i16,
    /// `TransactionalId` (null = idempotent producer).
    pub transactional_id: Option<String>,
    /// `TransactionTimeoutMs`.
    pub transaction_timeout_ms: i32,
    /// `ProducerId` (v3+, -1 = none).
    pub producer_id: ProducerId,
    /// `ProducerEpoch` (v3+, -1 = none).
    pub producer_epoch: ProducerEpoch,
    /// `Enable2Pc` (v6+, KIP-939): the id's transactions are ended only by a producer, never
    /// timed out by the coordinator. Needs `transaction.two.phase.commit.enable`.
    pub enable_2pc: bool,
    /// `KeepPreparedTxn` (v6+, KIP-939, with `enable_2pc`): keep the id's open transaction
    /// for this producer to end, instead of aborting it.
    pub keep_prepared_txn: bool,
}

impl InitProducerIdRequest {
    /// The InitProducerId of a producer starting afresh for `transactional_id` at `version`:
    /// no producer id or epoch yet, no two-phase commit.
    pub fn new_producer(version: i16, transactional_id: &str, transaction_timeout_ms: i32) -> Self {
        Self {
            version,
            transactional_id: Some(transactional_id.to_owned()),
            transaction_timeout_ms,
            producer_id: ProducerId::NONE,
            producer_epoch: ProducerEpoch::NONE,
            enable_2pc: false,
            keep_prepared_txn: false,
        }
    }
}

/// InitProducerId response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InitProducerIdResponse {
    /// Error code.
    pub error: ErrorCode,
    /// Assigned producer id (-1 on error).
    pub producer_id: ProducerId,
    /// Assigned epoch (-1 on error).
    pub producer_epoch: ProducerEpoch,
    /// `OngoingTxnProducerId` (v6+): the producer id of the transaction kept by
    /// `KeepPreparedTxn`, -1 if none.
    pub ongoing_txn_producer_id: ProducerId,
    /// `OngoingTxnProducerEpoch` (v6+): that transaction's epoch, -1 if none.
    pub ongoing_txn_producer_epoch: ProducerEpoch,
}

/// One transaction of an AddPartitionsToTxn request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddPartitionsTxn {
    /// `TransactionalId`.
    pub transactional_id: String,
    /// `ProducerId`.
    pub producer_id: ProducerId,
    /// `ProducerEpoch`.
    pub producer_epoch: ProducerEpoch,
    /// `VerifyOnly` (v4+; always false below v4): check membership, write nothing.
    pub verify_only: bool,
    /// Partitions to add or verify.
    pub partitions: Vec<TopicPartition>,
}

/// AddPartitionsToTxn request. v0-3 carry exactly one transaction; v4+ a batch.
///
/// A v4+ batch may span several log partitions: the shell splits it by
/// [`crate::partition_for`] and merges the engines' [`AddPartitionsToTxnResponse`]s.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddPartitionsToTxnRequest {
    /// API version (v<2: PRODUCER_FENCED is answered as INVALID_PRODUCER_EPOCH).
    pub version: i16,
    /// The transactions.
    pub transactions: Vec<AddPartitionsTxn>,
}

impl AddPartitionsToTxnRequest {
    /// The request of one producer adding `partitions` to its transaction (not verify-only),
    /// as a client sends it at `version`.
    pub fn add(
        version: i16,
        transactional_id: &str,
        producer_id: ProducerId,
        producer_epoch: ProducerEpoch,
        partitions: &[TopicPartition],
    ) -> Self {
        Self {
            version,
            transactions: vec![AddPartitionsTxn {
                transactional_id: transactional_id.to_owned(),
                producer_id,
                producer_epoch,
                verify_only: false,
                partitions: partitions.to_vec(),
            }],
        }
    }
}

/// The per-transaction result of AddPartitionsToTxn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddPartitionsTxnResult {
    /// `TransactionalId`.
    pub transactional_id: String,
    /// Error per partition, in request order.
    pub partitions: Vec<(TopicPartition, ErrorCode)>,
}

/// AddPartitionsToTxn response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddPartitionsToTxnResponse {
    /// Top-level error (v4+; NONE unless the whole request was malformed).
    pub error: ErrorCode,
    /// One result per transaction, in request order (v0-3: exactly one).
    pub results: Vec<AddPartitionsTxnResult>,
}

/// AddOffsetsToTxn request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddOffsetsToTxnRequest {
    /// API version (v<2: PRODUCER_FENCED is answered as INVALID_PRODUCER_EPOCH).
    pub version: i16,
    /// `TransactionalId`.
    pub transactional_id: String,
    /// `ProducerId`.
    pub producer_id: ProducerId,
    /// `ProducerEpoch`.
    pub producer_epoch: ProducerEpoch,
    /// `GroupId`.
    pub group_id: String,
}

/// EndTxn request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndTxnRequest {
    /// API version: v5+ is TV2 (when the cluster `transaction.version` ≥ 2); v<2 maps
    /// PRODUCER_FENCED to INVALID_PRODUCER_EPOCH.
    pub version: i16,
    /// `TransactionalId`.
    pub transactional_id: String,
    /// `ProducerId`.
    pub producer_id: ProducerId,
    /// `ProducerEpoch`.
    pub producer_epoch: ProducerEpoch,
    /// `Committed` (true = commit, false = abort).
    pub committed: bool,
}

/// EndTxn response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EndTxnResponse {
    /// Error code.
    pub error: ErrorCode,
    /// v5+: the producer id the client continues with (-1 on error).
    pub producer_id: ProducerId,
    /// v5+: the producer epoch the client continues with (-1 on error).
    pub producer_epoch: ProducerEpoch,
}

/// DescribeTransactions request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescribeTransactionsRequest {
    /// Ids to describe (the shell sends each engine the ids of its partition).
    pub transactional_ids: Vec<String>,
}

/// One described transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescribedTxn {
    /// Error code.
    pub error: ErrorCode,
    /// `TransactionalId`.
    pub transactional_id: String,
    /// State (None on error; the wire carries its name, empty on error).
    pub state: Option<TxnState>,
    /// Timeout (0 on error).
    pub timeout_ms: i32,
    /// Start timestamp (-1 on error or not started).
    pub start_time_ms: i64,
    /// Producer id (-1 on error).
    pub producer_id: ProducerId,
    /// Producer epoch (-1 on error).
    pub producer_epoch: ProducerEpoch,
    /// Partitions of the transaction, sorted.
    pub partitions: Vec<TopicPartition>,
}

/// ListTransactions request.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ListTransactionsRequest {
    /// `StateFilters` (state names; unknown names are echoed back).
    pub state_filters: Vec<String>,
    /// `ProducerIdFilters`.
    pub producer_id_filters: Vec<ProducerId>,
    /// `DurationFilter` (v1+, -1 = none): keep transactions running longer than this.
    pub duration_filter_ms: i64,
    /// `TransactionalIdPattern` (v2+, KIP-1152): keep the ids it matches.
    pub transactional_id_pattern: Option<TransactionalIdPattern>,
}

/// A ListTransactions `TransactionalIdPattern` (KIP-1152): a regular expression in RE2 syntax,
/// as Kafka's RE2/J, that must match the whole transactional id. Matching takes time linear in
/// the id, and a pattern that compiles to more than [`TransactionalIdPattern::MAX_COMPILED_BYTES`]
/// is refused, so a request cannot make the coordinator spend unbounded time or memory.
#[derive(Debug, Clone)]
pub struct TransactionalIdPattern {
    source: String,
    regex: regex::Regex,
}

impl TransactionalIdPattern {
    /// The largest compiled program accepted.
    pub const MAX_COMPILED_BYTES: usize = 1 << 20;

    /// Compiles `source`; [`ErrorCode::INVALID_REGULAR_EXPRESSION`] when it is not a valid
    /// pattern or too large. The empty pattern matches every id.
    pub fn new(source: &str) -> Result<Self, ErrorCode> {
        // Kafka lists every id for an empty pattern, as for none.
        let whole = if source.is_empty() {
            "(?s:.*)".to_owned()
        } else {
            format!("^(?:{source})$")
        };
        let regex = regex::RegexBuilder::new(&whole)
            .size_limit(Self::MAX_COMPILED_BYTES)
            .build()
            .map_err(|_| ErrorCode::INVALID_REGULAR_EXPRESSION)?;
        Ok(Self {
            source: source.to_owned(),
            regex,
        })
    }

    /// The pattern as the client sent it.
    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// Whether `transactional_id` matches the pattern as a whole.
    pub fn matches(&self, transactional_id: &str) -> bool {
        self.regex.is_match(transactional_id)
    }
}

impl PartialEq for TransactionalIdPattern {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}

impl Eq for TransactionalIdPattern {}

/// One listed transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedTxn {
    /// `TransactionalId`.
    pub transactional_id: String,
    /// Producer id.
    pub producer_id: ProducerId,
    /// State.
    pub state: TxnState,
}

/// ListTransactions response (of one engine; see [`merge_list_responses`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListTransactionsResponse {
    /// Error code.
    pub error: ErrorCode,
    /// State filters that name no known state.
    pub unknown_state_filters: Vec<String>,
    /// The matching transactions, sorted by id.
    pub transactions: Vec<ListedTxn>,
}

/// A response from the coordinator.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Response {
    /// InitProducerId.
    InitProducerId(InitProducerIdResponse),
    /// AddPartitionsToTxn.
    AddPartitionsToTxn(AddPartitionsToTxnResponse),
    /// AddOffsetsToTxn.
    AddOffsetsToTxn(ErrorCode),
    /// EndTxn.
    EndTxn(EndTxnResponse),
    /// DescribeTransactions.
    DescribeTransactions(Vec<DescribedTxn>),
    /// ListTransactions.
    ListTransactions(ListTransactionsResponse),
}

impl Response {
    /// The InitProducerId answer `error` as a client of `version` knows it (PRODUCER_FENCED is
    /// INVALID_PRODUCER_EPOCH before v4).
    pub fn init_producer_id_error(version: i16, error: ErrorCode) -> Self {
        let error = error.for_version(version, ErrorCode::INIT_PRODUCER_ID_FENCED_SINCE);
        Self::InitProducerId(InitProducerIdResponse::error(error))
    }

    /// The AddOffsetsToTxn answer `error` as a client of `version` knows it.
    pub fn add_offsets_error(version: i16, error: ErrorCode) -> Self {
        Self::AddOffsetsToTxn(error.for_version(version, ErrorCode::TXN_REQUEST_FENCED_SINCE))
    }

    /// The EndTxn answer `error` as a client of `version` knows it.
    pub fn end_txn_error(version: i16, error: ErrorCode) -> Self {
        let error = error.for_version(version, ErrorCode::TXN_REQUEST_FENCED_SINCE);
        Self::EndTxn(EndTxnResponse::error(error))
    }
}

impl Request {
    /// The answer to this request carrying only `error` (for every transaction and partition
    /// it names), as a client of its version knows the code.
    pub fn error_response(&self, error: ErrorCode) -> Response {
        match self {
            Self::InitProducerId(r) => Response::init_producer_id_error(r.version, error),
            Self::AddPartitionsToTxn(r) => {
                Response::AddPartitionsToTxn(AddPartitionsToTxnResponse::all(
                    r,
                    error.for_version(r.version, ErrorCode::TXN_REQUEST_FENCED_SINCE),
                ))
            }
            Self::AddOffsetsToTxn(r) => Response::add_offsets_error(r.version, error),
            Self::EndTxn(r) => Response::end_txn_error(r.version, error),
            Self::DescribeTransactions(r) => Response::DescribeTransactions(
                r.transactional_ids
                    .iter()
                    .map(|id| DescribedTxn::error(id, error))
                    .collect(),
            ),
            Self::ListTransactions(r) => Response::ListTransactions(ListTransactionsResponse {
                error,
                unknown_state_filters: unknown_state_filters(&r.state_filters),
                transactions: Vec::new(),
            }),
        }
    }
}

impl InitProducerIdResponse {
    /// An error response (pid and epoch -1).
    pub fn error(error: ErrorCode) -> Self {
        Self::ok(ProducerId::NONE, ProducerEpoch::NONE).with_error(error)
    }

    /// A success for `producer_id` / `producer_epoch`, with no kept transaction.
    pub fn ok(producer_id: ProducerId, producer_epoch: ProducerEpoch) -> Self {
        Self {
            error: ErrorCode::NONE,
            producer_id,
            producer_epoch,
            ongoing_txn_producer_id: ProducerId::NONE,
            ongoing_txn_producer_epoch: ProducerEpoch::NONE,
        }
    }

    fn with_error(self, error: ErrorCode) -> Self {
        Self { error, ..self }
    }
}

impl EndTxnResponse {
    /// An error response (pid and epoch -1).
    pub fn error(error: ErrorCode) -> Self {
        Self {
            error,
            producer_id: ProducerId::NONE,
            producer_epoch: ProducerEpoch::NONE,
        }
    }
}

impl DescribedTxn {
    /// An error entry for `id`.
    pub fn error(id: &str, error: ErrorCode) -> Self {
        Self {
            error,
            transactional_id: id.to_owned(),
            state: None,
            timeout_ms: 0,
            start_time_ms: -1,
            producer_id: ProducerId::NONE,
            producer_epoch: ProducerEpoch::NONE,
            partitions: Vec::new(),
        }
    }
}

impl AddPartitionsToTxnResponse {
    /// Every partition of every transaction of `req` answered with `error`.
    pub fn all(req: &AddPartitionsToTxnRequest, error: ErrorCode) -> Self {
        Self {
            error: ErrorCode::NONE,
            results: req
                .transactions
                .iter()
                .map(|t| AddPartitionsTxnResult::all(t, error))
                .collect(),
        }
    }
}

impl AddPartitionsTxnResult {
    /// Every partition of `txn` answered with `error`.
    pub fn all(txn: &AddPartitionsTxn, error: ErrorCode) -> Self {
        Self::each(txn, |_| error)
    }

    /// Every partition of `txn` answered with `error_of` it.
    pub fn each(txn: &AddPartitionsTxn, error_of: impl Fn(&TopicPartition) -> ErrorCode) -> Self {
        Self {
            transactional_id: txn.transactional_id.clone(),
            partitions: txn
                .partitions
                .iter()
                .map(|p| (p.clone(), error_of(p)))
                .collect(),
        }
    }
}

/// The state filters of a ListTransactions request that name no state (echoed back).
pub fn unknown_state_filters(filters: &[String]) -> Vec<String> {
    filters
        .iter()
        .filter(|f| TxnState::from_name(f).is_none())
        .cloned()
        .collect()
}

/// Merges the per-engine ListTransactions answers of one process (Kafka lists every owned
/// partition; any partition still loading makes the whole answer COORDINATOR_LOAD_IN_PROGRESS).
pub fn merge_list_responses(
    request: &ListTransactionsRequest,
    parts: impl IntoIterator<Item = ListTransactionsResponse>,
) -> ListTransactionsResponse {
    let mut out = ListTransactionsResponse {
        error: ErrorCode::NONE,
        unknown_state_filters: unknown_state_filters(&request.state_filters),
        transactions: Vec::new(),
    };
    for p in parts {
        if !p.error.is_none() {
            out.error = p.error;
            out.transactions.clear();
            return out;
        }
        out.transactions.extend(p.transactions);
    }
    out.transactions
        .sort_by(|a, b| a.transactional_id.cmp(&b.transactional_id));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transactional_id_pattern_matches_the_whole_id() {
        let p = TransactionalIdPattern::new("app-[0-9]+").unwrap();
        assert!(p.matches("app-1") && p.matches("app-42"));
        assert!(!p.matches("app-") && !p.matches("my-app-1") && !p.matches("app-1x"));
        // An alternation is grouped before the anchors, so each branch matches whole ids.
        let p = TransactionalIdPattern::new("a|b").unwrap();
        assert!(p.matches("a") && p.matches("b") && !p.matches("ab"));
        assert_eq!(p.as_str(), "a|b");
    }

    #[test]
    fn an_empty_pattern_matches_every_id() {
        let p = TransactionalIdPattern::new("").unwrap();
        assert!(p.matches("") && p.matches("anything\nat all"));
    }

    #[test]
    fn an_invalid_or_oversized_pattern_is_invalid_regular_expression() {
        for bad in ["(", "a{2,1}", "[z-a]", "(?<", "\\"] {
            assert_eq!(
                TransactionalIdPattern::new(bad).err(),
                Some(ErrorCode::INVALID_REGULAR_EXPRESSION),
                "{bad:?}"
            );
        }
        // Backreferences and lookaround are not RE2, as in Kafka's RE2/J.
        assert!(TransactionalIdPattern::new("(a)\\1").is_err());
        assert!(TransactionalIdPattern::new("(?=a)").is_err());
        // A counted repetition that would compile past the size limit.
        assert_eq!(
            TransactionalIdPattern::new("(\\w{1000}){1000}").err(),
            Some(ErrorCode::INVALID_REGULAR_EXPRESSION)
        );
    }
}
