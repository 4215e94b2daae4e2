//! DescribeTransactions and ListTransactions (KIP-664), with ListTransactions' duration filter
//! (v1, KIP-994) and transactional id pattern (v2, KIP-1152).

use kafka_protocol::error::ResponseError::{self, *};
use kafka_protocol::messages::describe_transactions_response::{self, TopicData};
use kafka_protocol::messages::list_transactions_response;
use kafka_protocol::messages::{
    DescribeTransactionsRequest, DescribeTransactionsResponse, ListTransactionsRequest,
    ListTransactionsResponse, ProducerId, TopicName, TransactionalId,
};
use kafka_protocol::protocol::StrBytes;

use crate::coordinator::TransactionCoordinator;
use crate::metadata::TransactionMetadata;
use crate::state::TransactionState;
use crate::txn_log::TxnLogValue;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

impl TransactionCoordinator {
    pub fn describe_transactions(
        &self,
        req: DescribeTransactionsRequest,
        _version: i16,
    ) -> DescribeTransactionsResponse {
        let states = req
            .transactional_ids
            .into_iter()
            .map(|id| {
                let described = self.describe_one(id.as_str());
                let base = describe_transactions_response::TransactionState::default()
                    .with_transactional_id(id);
                match described {
                    Ok(state) => state.with_transactional_id(base.transactional_id),
                    Err(e) => base.with_error_code(e.code()),
                }
            })
            .collect();
        DescribeTransactionsResponse::default().with_transaction_states(states)
    }

    fn describe_one(
        &self,
        id: &str,
    ) -> Result<describe_transactions_response::TransactionState, ResponseError> {
        if id.is_empty() {
            return Err(InvalidRequest);
        }
        let partition = self.core.partition_for(id);
        let mut shared = self.core.lock();
        let txn = shared.led(partition)?.txns.get(id);
        // An id in the middle of expiring is as good as gone.
        let txn = txn
            .filter(|t| t.state != TransactionState::Dead)
            .ok_or(TransactionalIdNotFound)?;
        let topics = TxnLogValue::group_partitions(&txn.partitions)
            .into_iter()
            .map(|(topic, partitions)| {
                TopicData::default()
                    .with_topic(TopicName(s(&topic)))
                    .with_partitions(partitions)
            })
            .collect();
        Ok(describe_transactions_response::TransactionState::default()
            .with_producer_id(ProducerId(txn.producer_id))
            .with_producer_epoch(txn.producer_epoch)
            .with_transaction_state(s(txn.state.name()))
            .with_transaction_timeout_ms(txn.timeout_ms)
            .with_transaction_start_time_ms(txn.start_ms)
            .with_topics(topics))
    }

    pub fn list_transactions(
        &self,
        req: ListTransactionsRequest,
        version: i16,
    ) -> ListTransactionsResponse {
        let response = ListTransactionsResponse::default();
        let filter = match ListFilter::new(&req, version) {
            Ok(f) => f,
            Err(e) => return response.with_error_code(e.code()),
        };
        let now = self.core.now();
        let shared = self.core.lock();
        if shared.loading() {
            return response.with_error_code(CoordinatorLoadInProgress.code());
        }
        let mut listed: Vec<list_transactions_response::TransactionState> = shared
            .partitions
            .values()
            .flat_map(|p| p.txns.values())
            .filter(|t| filter.includes(t, now))
            .map(|t| {
                list_transactions_response::TransactionState::default()
                    .with_transactional_id(TransactionalId(s(&t.transactional_id)))
                    .with_producer_id(ProducerId(t.producer_id))
                    .with_transaction_state(s(t.state.name()))
            })
            .collect();
        listed.sort_by(|a, b| a.transactional_id.as_str().cmp(b.transactional_id.as_str()));
        response
            .with_unknown_state_filters(filter.unknown_states)
            .with_transaction_states(listed)
    }
}

/// ListTransactions' filters; an empty filter lets everything through.
struct ListFilter {
    states: Vec<TransactionState>,
    unknown_states: Vec<StrBytes>,
    /// Whether any state filter was given (all unknown ones match nothing).
    by_state: bool,
    producer_ids: Vec<i64>,
    /// Only transactions running for longer than this (ms); -1 for all.
    min_duration_ms: i64,
    id_pattern: Option<regex::Regex>,
}

impl ListFilter {
    fn new(req: &ListTransactionsRequest, version: i16) -> Result<Self, ResponseError> {
        let (known, unknown): (Vec<_>, Vec<_>) = req
            .state_filters
            .iter()
            .partition(|n| TransactionState::from_name(n.as_str()).is_some());
        let pattern = match req.transactional_id_pattern.as_deref() {
            Some(p) if version >= 2 && !p.is_empty() => Some(
                // Java's `Matcher.matches`: the whole id must match.
                regex::Regex::new(&format!("^(?:{p})$")).map_err(|_| InvalidRegularExpression)?,
            ),
            _ => None,
        };
        Ok(Self {
            states: known
                .iter()
                .filter_map(|n| TransactionState::from_name(n.as_str()))
                .collect(),
            unknown_states: unknown.into_iter().cloned().collect(),
            by_state: !req.state_filters.is_empty(),
            producer_ids: req.producer_id_filters.iter().map(|p| p.0).collect(),
            min_duration_ms: if version >= 1 {
                req.duration_filter
            } else {
                -1
            },
            id_pattern: pattern,
        })
    }

    fn includes(&self, t: &TransactionMetadata, now: i64) -> bool {
        // Dead is transient: the id is being removed.
        t.state != TransactionState::Dead
            && (self.producer_ids.is_empty() || self.producer_ids.contains(&t.producer_id))
            && (!self.by_state || self.states.contains(&t.state))
            && (self.min_duration_ms < 0 || now - t.start_ms > self.min_duration_ms)
            && self
                .id_pattern
                .as_ref()
                .is_none_or(|p| p.is_match(&t.transactional_id))
    }
}
