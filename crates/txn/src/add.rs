//! AddPartitionsToTxn (v0-v3 from producers; v4+ batched per transactional id, from brokers,
//! with the KIP-890 verify-only form), AddOffsetsToTxn, and the produce-side check that a
//! partition is in its producer's transaction.

use std::collections::HashSet;
use std::sync::Arc;

use ferry_common::TopicPartition;
use kafka_protocol::error::ResponseError::{self, *};
use kafka_protocol::messages::add_partitions_to_txn_request::{
    AddPartitionsToTxnTopic, AddPartitionsToTxnTransaction,
};
use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnResult, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::{
    AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use crate::coordinator::{Core, OnFailure, PendingWrite, TransactionCoordinator};
use crate::init::{code, fenced_for_version};
use crate::state::TransactionState::*;

/// The internal topic of committed offsets; AddOffsetsToTxn adds one of its partitions.
pub const CONSUMER_OFFSETS_TOPIC: &str = "__consumer_offsets";

/// Where one transaction of a batch stands once its change has begun.
enum AddStep {
    /// Answered already: one error (or none) for every partition.
    Done(Result<(), ResponseError>),
    /// Answered already, partition by partition.
    PerPartition(Vec<(TopicPartition, Option<ResponseError>)>),
    Writing(PendingWrite),
}

/// The partitions of a request, each once, in request order.
fn requested(topics: &[AddPartitionsToTxnTopic]) -> Vec<TopicPartition> {
    let mut seen = HashSet::new();
    topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(|p| TopicPartition::new(t.name.as_str(), *p))
        })
        .filter(|tp| seen.insert(tp.clone()))
        .collect()
}

/// The result of one transaction, topics in first-seen order.
fn result_for(
    transactional_id: StrBytes,
    answers: Vec<(TopicPartition, Option<ResponseError>)>,
) -> AddPartitionsToTxnResult {
    let mut topics: Vec<AddPartitionsToTxnTopicResult> = Vec::new();
    for (tp, error) in answers {
        let partition = AddPartitionsToTxnPartitionResult::default()
            .with_partition_index(tp.partition)
            .with_partition_error_code(error.map_or(0, |e| e.code()));
        match topics.iter_mut().find(|t| t.name.as_str() == tp.topic) {
            Some(t) => t.results_by_partition.push(partition),
            None => topics.push(
                AddPartitionsToTxnTopicResult::default()
                    .with_name(TopicName(StrBytes::from_string(tp.topic)))
                    .with_results_by_partition(vec![partition]),
            ),
        }
    }
    AddPartitionsToTxnResult::default()
        .with_transactional_id(transactional_id.into())
        .with_topic_results(topics)
}

impl TransactionCoordinator {
    pub async fn add_partitions_to_txn(
        &self,
        req: AddPartitionsToTxnRequest,
        version: i16,
    ) -> AddPartitionsToTxnResponse {
        let response = AddPartitionsToTxnResponse::default();
        if version >= 4 {
            let results = self
                .core
                .add_partitions_batch(req.transactions, version)
                .await;
            return response.with_results_by_transaction(results);
        }
        let single = AddPartitionsToTxnTransaction::default()
            .with_transactional_id(req.v3_and_below_transactional_id)
            .with_producer_id(req.v3_and_below_producer_id)
            .with_producer_epoch(req.v3_and_below_producer_epoch)
            .with_topics(req.v3_and_below_topics);
        let mut results = self.core.add_partitions_batch(vec![single], version).await;
        let topics = results.pop().map(|r| r.topic_results).unwrap_or_default();
        response.with_results_by_topic_v3_and_below(topics)
    }

    pub async fn add_offsets_to_txn(
        &self,
        req: AddOffsetsToTxnRequest,
        version: i16,
    ) -> AddOffsetsToTxnResponse {
        let partition = ferry_group::offsets_topic::partition_for(
            &req.group_id,
            self.core.config.offsets_topic_partitions,
        );
        let offsets = TopicPartition::new(CONSUMER_OFFSETS_TOPIC, partition);
        let id = req.transactional_id.as_str();
        let result =
            match self
                .core
                .begin_add(id, req.producer_id.0, req.producer_epoch, vec![offsets])
            {
                Ok(None) => Ok(()),
                Ok(Some(w)) => self.core.finish_write(w).await,
                Err(e) => Err(e),
            };
        let result = result.map_err(|e| fenced_for_version(e, version, 2));
        AddOffsetsToTxnResponse::default().with_error_code(code(&result))
    }

    /// Whether `topic`-`partition` is in the ongoing transaction of `transactional_id` for this
    /// producer (KIP-890's check before a transactional produce is appended):
    /// INVALID_PRODUCER_ID_MAPPING for another producer id, PRODUCER_FENCED for another epoch,
    /// CONCURRENT_TRANSACTIONS while the transaction ends, TRANSACTION_ABORTABLE if the
    /// partition was not added.
    pub fn verify_partition(
        &self,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        topic: &str,
        partition: i32,
    ) -> Result<(), ResponseError> {
        let tp = TopicPartition::new(topic, partition);
        let answers = self
            .core
            .verify(transactional_id, producer_id, producer_epoch, &[tp])?;
        answers.into_iter().find_map(|(_, e)| e).map_or(Ok(()), Err)
    }
}

impl Core {
    async fn add_partitions_batch(
        self: &Arc<Self>,
        txns: Vec<AddPartitionsToTxnTransaction>,
        version: i16,
    ) -> Vec<AddPartitionsToTxnResult> {
        // Every transaction's record is appended before any is awaited, so their durability
        // is awaited together.
        let begun: Vec<(AddStep, Vec<TopicPartition>, StrBytes)> = txns
            .into_iter()
            .map(|t| {
                let partitions = requested(&t.topics);
                let step = self.begin_add_step(&t, &partitions);
                (step, partitions, t.transactional_id.0)
            })
            .collect();
        let mut results = Vec::with_capacity(begun.len());
        for (step, partitions, id) in begun {
            let answers = match step {
                AddStep::PerPartition(answers) => answers,
                AddStep::Done(r) => all(partitions, r, version),
                AddStep::Writing(w) => all(partitions, self.finish_write(w).await, version),
            };
            results.push(result_for(id, answers));
        }
        results
    }

    fn begin_add_step(
        &self,
        t: &AddPartitionsToTxnTransaction,
        partitions: &[TopicPartition],
    ) -> AddStep {
        let id = t.transactional_id.as_str();
        if id.is_empty() {
            return AddStep::Done(Err(InvalidRequest));
        }
        let catalog = &self.seams.catalog;
        if partitions
            .iter()
            .any(|tp| !catalog.partition_exists(&tp.topic, tp.partition))
        {
            // One unknown partition fails the whole transaction's request.
            let answers = partitions
                .iter()
                .map(|tp| {
                    let known = catalog.partition_exists(&tp.topic, tp.partition);
                    let e = if known {
                        OperationNotAttempted
                    } else {
                        UnknownTopicOrPartition
                    };
                    (tp.clone(), Some(e))
                })
                .collect();
            return AddStep::PerPartition(answers);
        }
        let (pid, epoch) = (t.producer_id.0, t.producer_epoch);
        if t.verify_only {
            return match self.verify(id, pid, epoch, partitions) {
                Ok(answers) => AddStep::PerPartition(answers),
                Err(e) => AddStep::Done(Err(e)),
            };
        }
        match self.begin_add(id, pid, epoch, partitions.to_vec()) {
            Ok(None) => AddStep::Done(Ok(())),
            Ok(Some(w)) => AddStep::Writing(w),
            Err(e) => AddStep::Done(Err(e)),
        }
    }

    /// Adds partitions to the producer's transaction. `None`: they are all in it already.
    pub(crate) fn begin_add(
        &self,
        id: &str,
        producer_id: i64,
        producer_epoch: i16,
        partitions: Vec<TopicPartition>,
    ) -> Result<Option<PendingWrite>, ResponseError> {
        if id.is_empty() {
            return Err(InvalidRequest);
        }
        let now = self.now();
        let partition = self.partition_for(id);
        let mut shared = self.lock();
        let led = shared.led(partition)?;
        let load = led.load;
        let txn = led.owned_txn(id, producer_id, producer_epoch)?;
        if txn.transition_in_progress() || txn.state.is_prepared() {
            return Err(ConcurrentTransactions);
        }
        if txn.state == Ongoing && partitions.iter().all(|tp| txn.partitions.contains(tp)) {
            return Ok(None);
        }
        let transit = txn
            .prepare_add_partitions(partitions, now)
            .map_err(|e| e.response_error())?;
        self.begin_write(partition, load, txn, transit, OnFailure::ClearPending)
            .map(Some)
    }

    /// Kafka's verify-only check: which of `partitions` are in the producer's transaction.
    pub(crate) fn verify(
        &self,
        id: &str,
        producer_id: i64,
        producer_epoch: i16,
        partitions: &[TopicPartition],
    ) -> Result<Vec<(TopicPartition, Option<ResponseError>)>, ResponseError> {
        if id.is_empty() {
            return Err(InvalidRequest);
        }
        let partition = self.partition_for(id);
        let mut shared = self.lock();
        let txn = shared
            .led(partition)?
            .owned_txn(id, producer_id, producer_epoch)?;
        if txn.state.is_prepared() {
            return Err(ConcurrentTransactions);
        }
        Ok(partitions
            .iter()
            .map(|tp| {
                let missing = (!txn.partitions.contains(tp)).then_some(TransactionAbortable);
                (tp.clone(), missing)
            })
            .collect())
    }
}

/// One answer for every partition.
fn all(
    partitions: Vec<TopicPartition>,
    result: Result<(), ResponseError>,
    version: i16,
) -> Vec<(TopicPartition, Option<ResponseError>)> {
    let error = result.err().map(|e| fenced_for_version(e, version, 2));
    partitions.into_iter().map(|tp| (tp, error)).collect()
}
