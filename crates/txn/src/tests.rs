//! Coordinator tests, from Kafka's semantics, driven with a manual clock, paused Tokio time and
//! in-memory fakes of the store, the marker writer, the producer id source and the catalog.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use ferry_common::TopicPartition;
use kafka_protocol::error::ResponseError::{self, *};
use kafka_protocol::messages::add_partitions_to_txn_request::{
    AddPartitionsToTxnTopic, AddPartitionsToTxnTransaction,
};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

use crate::fakes::*;
use crate::metadata::TransactionMetadata;
use crate::seams::{MarkerOutcome, TxnResult};
use crate::txn_log::{encode_key, encode_value, TxnLogValue};
use crate::{TransactionState, TxnConfig};

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

fn tp(topic: &str, p: i32) -> TopicPartition {
    TopicPartition::new(topic, p)
}

fn err(code: i16) -> Option<ResponseError> {
    (code != 0).then(|| ResponseError::try_from_code(code).unwrap())
}

fn init_req(id: &str, timeout_ms: i32) -> InitProducerIdRequest {
    InitProducerIdRequest::default()
        .with_transactional_id(Some(TransactionalId(s(id))))
        .with_transaction_timeout_ms(timeout_ms)
}

fn topics(parts: &[(&str, i32)]) -> Vec<AddPartitionsToTxnTopic> {
    let mut out: Vec<AddPartitionsToTxnTopic> = Vec::new();
    for (t, p) in parts {
        match out.iter_mut().find(|x| x.name.as_str() == *t) {
            Some(x) => x.partitions.push(*p),
            None => out.push(
                AddPartitionsToTxnTopic::default()
                    .with_name(TopicName(s(t)))
                    .with_partitions(vec![*p]),
            ),
        }
    }
    out
}

impl Harness {
    async fn init_as(&self, id: &str, version: i16) -> Result<(i64, i16), ResponseError> {
        let r = self
            .coord
            .init_producer_id(init_req(id, 60_000), version)
            .await;
        match err(r.error_code) {
            None => Ok((r.producer_id.0, r.producer_epoch)),
            Some(e) => {
                assert_eq!((r.producer_id.0, r.producer_epoch), (-1, -1));
                Err(e)
            }
        }
    }

    async fn init(&self, id: &str) -> (i64, i16) {
        self.init_as(id, 4).await.unwrap()
    }

    /// AddPartitionsToTxn v3: one error per partition.
    async fn add_v(
        &self,
        v: i16,
        id: &str,
        ids: (i64, i16),
        parts: &[(&str, i32)],
    ) -> Vec<Option<ResponseError>> {
        let req = AddPartitionsToTxnRequest::default()
            .with_v3_and_below_transactional_id(TransactionalId(s(id)))
            .with_v3_and_below_producer_id(ProducerId(ids.0))
            .with_v3_and_below_producer_epoch(ids.1)
            .with_v3_and_below_topics(topics(parts));
        let r = self.coord.add_partitions_to_txn(req, v).await;
        assert!(r.results_by_transaction.is_empty());
        r.results_by_topic_v3_and_below
            .iter()
            .flat_map(|t| {
                t.results_by_partition
                    .iter()
                    .map(|p| err(p.partition_error_code))
            })
            .collect()
    }

    async fn add(
        &self,
        id: &str,
        ids: (i64, i16),
        parts: &[(&str, i32)],
    ) -> Result<(), ResponseError> {
        let errors = self.add_v(3, id, ids, parts).await;
        assert_eq!(errors.len(), parts.len());
        errors[0].map_or(Ok(()), Err)
    }

    async fn end_v(
        &self,
        v: i16,
        id: &str,
        ids: (i64, i16),
        commit: bool,
    ) -> Result<(), ResponseError> {
        let req = EndTxnRequest::default()
            .with_transactional_id(TransactionalId(s(id)))
            .with_producer_id(ProducerId(ids.0))
            .with_producer_epoch(ids.1)
            .with_committed(commit);
        let r = self.coord.end_txn(req, v).await;
        err(r.error_code).map_or(Ok(()), Err)
    }

    async fn end(&self, id: &str, ids: (i64, i16), commit: bool) -> Result<(), ResponseError> {
        self.end_v(3, id, ids, commit).await
    }

    fn txn(&self, id: &str) -> TransactionMetadata {
        self.coord.transaction(id).unwrap().unwrap()
    }

    /// Lets background tasks (markers, retries) run until `id` reaches `state`.
    async fn settle(&self, id: &str, state: TransactionState) {
        for _ in 0..200 {
            let t = self.txn(id);
            if t.state == state && t.pending.is_none() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("{id} never reached {state}: {:?}", self.txn(id));
    }
}

#[tokio::test(start_paused = true)]
async fn commit_writes_markers_then_complete_commit() {
    let h = Harness::leading();
    let ids = h.init("tx").await;
    assert_eq!(ids, (1000, 0));
    h.add("tx", ids, &[("t", 0), ("t", 1), ("u", 0)])
        .await
        .unwrap();
    h.end("tx", ids, true).await.unwrap();
    h.settle("tx", TransactionState::CompleteCommit).await;

    let sent = h.markers.sent();
    assert_eq!(sent.len(), 1);
    let m = &sent[0];
    assert_eq!(
        (m.producer_id, m.producer_epoch, m.coordinator_epoch),
        (1000, 0, 0)
    );
    assert_eq!(m.result, TxnResult::Commit);
    assert_eq!(m.partitions, vec![tp("t", 0), tp("t", 1), tp("u", 0)]);
    assert_eq!(
        h.store.states("tx"),
        ["Empty", "Ongoing", "PrepareCommit", "CompleteCommit"]
    );
    let last = h.store.history("tx").pop().unwrap().unwrap();
    assert_eq!(
        last.partitions,
        Some(vec![]),
        "a completed transaction has no partitions"
    );
    assert!(h.txn("tx").partitions.is_empty());
}

#[tokio::test(start_paused = true)]
async fn abort_writes_abort_markers_then_complete_abort() {
    let h = Harness::leading();
    let ids = h.init("tx").await;
    h.add("tx", ids, &[("t", 0)]).await.unwrap();
    h.end("tx", ids, false).await.unwrap();
    h.settle("tx", TransactionState::CompleteAbort).await;
    assert_eq!(h.markers.sent()[0].result, TxnResult::Abort);
    assert_eq!(
        h.store.states("tx"),
        ["Empty", "Ongoing", "PrepareAbort", "CompleteAbort"]
    );
    // The id is reusable: a new transaction opens on it.
    h.add("tx", ids, &[("t", 1)]).await.unwrap();
    assert_eq!(h.txn("tx").state, TransactionState::Ongoing);
}

#[tokio::test(start_paused = true)]
async fn end_txn_retry_after_completion_succeeds_and_mismatches_are_invalid() {
    let h = Harness::leading();
    let ids = h.init("tx").await;
    assert_eq!(
        h.end("tx", ids, true).await,
        Err(InvalidTxnState),
        "nothing open"
    );
    h.add("tx", ids, &[("t", 0)]).await.unwrap();
    h.markers.gate.close();
    h.end("tx", ids, true).await.unwrap();
    // While the markers are being written the retry must wait.
    assert_eq!(h.end("tx", ids, true).await, Err(ConcurrentTransactions));
    h.markers.gate.open();
    h.settle("tx", TransactionState::CompleteCommit).await;
    assert_eq!(h.end("tx", ids, true).await, Ok(()), "a retried commit");
    assert_eq!(h.end("tx", ids, false).await, Err(InvalidTxnState));
    assert_eq!(h.markers.sent().len(), 1, "a retry writes no new markers");
    // EndTxn v5 reports the producer id and epoch.
    let r = h
        .coord
        .end_txn(
            EndTxnRequest::default()
                .with_transactional_id(TransactionalId(s("tx")))
                .with_producer_id(ProducerId(ids.0))
                .with_producer_epoch(ids.1)
                .with_committed(true),
            5,
        )
        .await;
    assert_eq!(
        (r.error_code, r.producer_id.0, r.producer_epoch),
        (0, ids.0, ids.1)
    );
}

#[tokio::test(start_paused = true)]
async fn second_producer_fences_the_first_after_aborting_its_transaction() {
    let h = Harness::leading();
    let zombie = h.init("tx").await;
    h.add("tx", zombie, &[("t", 0)]).await.unwrap();

    // The new instance's InitProducerId aborts the open transaction first.
    assert_eq!(h.init_as("tx", 4).await, Err(ConcurrentTransactions));
    h.settle("tx", TransactionState::CompleteAbort).await;
    let sent = h.markers.sent();
    assert_eq!(sent.len(), 1);
    assert_eq!(
        (sent[0].result, sent[0].producer_epoch),
        (TxnResult::Abort, 1)
    );
    assert_eq!(
        h.store.states("tx"),
        ["Empty", "Ongoing", "PrepareAbort", "CompleteAbort"]
    );

    // Its retry succeeds with a further bump.
    let fresh = h.init("tx").await;
    assert_eq!(fresh, (zombie.0, 2));

    // The zombie is fenced everywhere, with the error its request version knows.
    assert_eq!(h.add("tx", zombie, &[("t", 1)]).await, Err(ProducerFenced));
    assert_eq!(
        h.add_v(1, "tx", zombie, &[("t", 1)]).await,
        [Some(InvalidProducerEpoch)]
    );
    assert_eq!(h.end("tx", zombie, true).await, Err(ProducerFenced));
    assert_eq!(
        h.end_v(1, "tx", zombie, true).await,
        Err(InvalidProducerEpoch)
    );
    h.add("tx", fresh, &[("t", 1)]).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn timed_out_transaction_is_aborted_with_an_epoch_bump() {
    let h = Harness::leading();
    let r = h.coord.init_producer_id(init_req("tx", 5_000), 4).await;
    let ids = (r.producer_id.0, r.producer_epoch);
    h.add("tx", ids, &[("t", 0)]).await.unwrap();

    // Not yet: within the timeout, nothing happens even if the scan is due.
    h.clock.advance(5_000);
    assert_eq!(h.coord.abort_timed_out_transactions().await, 0);
    // Past it, but tick() scans only every 10 s (the abort interval).
    h.clock.advance(1);
    h.coord.tick().await;
    assert_eq!(h.txn("tx").state, TransactionState::Ongoing);
    h.clock.advance(10_000);
    h.coord.tick().await;
    h.settle("tx", TransactionState::CompleteAbort).await;

    let t = h.txn("tx");
    assert_eq!(t.producer_epoch, 1, "the abort bumped the epoch");
    assert_eq!(h.markers.sent()[0].producer_epoch, 1);
    assert_eq!(h.end("tx", ids, true).await, Err(ProducerFenced));
    assert_eq!(h.init("tx").await, (ids.0, 2));
}

#[tokio::test(start_paused = true)]
async fn failover_resumes_markers_of_a_prepared_commit() {
    let old = Harness::leading();
    let ids = old.init("tx").await;
    old.add("tx", ids, &[("t", 0), ("t", 1)]).await.unwrap();
    // The old coordinator's markers never get through; it loses the partition.
    old.markers.gate.close();
    old.end("tx", ids, true).await.unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    old.coord.on_resignation(0);
    assert_eq!(old.coord.transaction("tx"), Err(NotCoordinator));
    assert_eq!(old.store.states("tx").last(), Some(&"PrepareCommit"));

    let new = Harness::with_store(config(), old.store.clone());
    new.markers
        .plan(tp("t", 1), &[MarkerOutcome::Retry(NotLeaderOrFollower)]);
    assert_eq!(new.coord.on_election(0, 1).unwrap(), 1);
    new.settle("tx", TransactionState::CompleteCommit).await;

    let sent = new.markers.sent();
    assert_eq!(sent.len(), 2, "t-1 retried once");
    assert_eq!(
        (sent[0].result, sent[0].coordinator_epoch),
        (TxnResult::Commit, 1)
    );
    assert_eq!(sent[1].partitions, vec![tp("t", 1)]);
    assert_eq!(new.store.states("tx").last(), Some(&"CompleteCommit"));
    // The old coordinator's task gave up without writing anything.
    old.markers.gate.open();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(new.store.states("tx").last(), Some(&"CompleteCommit"));
    assert_eq!(new.store.states("tx").len(), 4);
}

#[tokio::test(start_paused = true)]
async fn deleted_partitions_are_skipped_and_fenced_markers_stop() {
    let h = Harness::leading();
    let ids = h.init("tx").await;
    h.add("tx", ids, &[("t", 0), ("gone", 0)]).await.unwrap();
    h.markers.plan(tp("gone", 0), &[MarkerOutcome::Skipped]);
    h.end("tx", ids, true).await.unwrap();
    h.settle("tx", TransactionState::CompleteCommit).await;
    assert_eq!(h.markers.sent().len(), 1);

    h.add("tx", ids, &[("t", 0)]).await.unwrap();
    h.markers.plan(
        tp("t", 0),
        &[MarkerOutcome::Fenced(TransactionCoordinatorFenced)],
    );
    h.end("tx", ids, false).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(h.markers.sent().len(), 2, "no retry after a fence");
    assert_eq!(h.txn("tx").state, TransactionState::PrepareAbort);
}

#[tokio::test(start_paused = true)]
async fn verify_only_answers_which_partitions_are_in_the_transaction() {
    let h = Harness::leading();
    let ids = h.init("tx").await;
    h.add("tx", ids, &[("t", 0)]).await.unwrap();
    let other = h.init("other").await;

    let txn = |id: &str, ids: (i64, i16), verify: bool, parts: &[(&str, i32)]| {
        AddPartitionsToTxnTransaction::default()
            .with_transactional_id(TransactionalId(s(id)))
            .with_producer_id(ProducerId(ids.0))
            .with_producer_epoch(ids.1)
            .with_verify_only(verify)
            .with_topics(topics(parts))
    };
    let req = AddPartitionsToTxnRequest::default().with_transactions(vec![
        txn("tx", ids, true, &[("t", 0), ("t", 1)]),
        txn("tx", (ids.0, 9), true, &[("t", 0)]),
        txn("nobody", (1, 0), true, &[("t", 0)]),
        txn("other", other, false, &[("u", 0)]),
    ]);
    let r = h.coord.add_partitions_to_txn(req, 4).await;
    assert!(r.results_by_topic_v3_and_below.is_empty());
    let codes: Vec<Vec<(i32, Option<ResponseError>)>> = r
        .results_by_transaction
        .iter()
        .map(|t| {
            t.topic_results
                .iter()
                .flat_map(|x| x.results_by_partition.iter())
                .map(|p| (p.partition_index, err(p.partition_error_code)))
                .collect()
        })
        .collect();
    assert_eq!(codes[0], [(0, None), (1, Some(TransactionAbortable))]);
    assert_eq!(codes[1], [(0, Some(ProducerFenced))]);
    assert_eq!(codes[2], [(0, Some(InvalidProducerIdMapping))]);
    assert_eq!(codes[3], [(0, None)]);
    assert_eq!(
        h.txn("other").state,
        TransactionState::Ongoing,
        "a batched add is applied"
    );
    assert_eq!(h.txn("tx").partitions.len(), 1, "verifying adds nothing");

    assert_eq!(h.coord.verify_partition("tx", ids.0, ids.1, "t", 0), Ok(()));
    assert_eq!(
        h.coord.verify_partition("tx", ids.0, ids.1, "t", 1),
        Err(TransactionAbortable)
    );
    assert_eq!(
        h.coord.verify_partition("tx", ids.0 + 1, ids.1, "t", 0),
        Err(InvalidProducerIdMapping)
    );
    h.markers.gate.close();
    h.end("tx", ids, true).await.unwrap();
    assert_eq!(
        h.coord.verify_partition("tx", ids.0, ids.1, "t", 0),
        Err(ConcurrentTransactions)
    );
}

#[tokio::test(start_paused = true)]
async fn list_transactions_filters_by_state_producer_duration_and_pattern() {
    let h = Harness::leading();
    let a = h.init("app-a").await;
    h.add("app-a", a, &[("t", 0)]).await.unwrap();
    h.clock.advance(10_000);
    let b = h.init("app-b").await;
    h.add("app-b", b, &[("t", 0)]).await.unwrap();
    h.init("batch-c").await;
    h.clock.advance(1_000);

    let list = |req: ListTransactionsRequest, v: i16| {
        let r = h.coord.list_transactions(req, v);
        let ids: Vec<String> = r
            .transaction_states
            .iter()
            .map(|t| t.transactional_id.to_string())
            .collect();
        (r.error_code, ids, r.unknown_state_filters)
    };
    let (code, all, _) = list(ListTransactionsRequest::default(), 0);
    assert_eq!(
        (code, all),
        (0, vec!["app-a".into(), "app-b".into(), "batch-c".into()])
    );

    let by_state =
        ListTransactionsRequest::default().with_state_filters(vec![s("Ongoing"), s("Bogus")]);
    let (_, ids, unknown) = list(by_state, 0);
    assert_eq!(ids, ["app-a", "app-b"]);
    assert_eq!(unknown, vec![s("Bogus")]);

    let by_pid = ListTransactionsRequest::default().with_producer_id_filters(vec![ProducerId(b.0)]);
    assert_eq!(list(by_pid, 0).1, ["app-b"]);

    // KIP-994: only transactions running longer than 5 s (app-a: 11 s, app-b: 1 s). Ids with no
    // transaction open have no start time and are listed, as Kafka does.
    let long = ListTransactionsRequest::default()
        .with_state_filters(vec![s("Ongoing")])
        .with_duration_filter(5_000);
    assert_eq!(list(long.clone(), 1).1, ["app-a"]);
    assert_eq!(
        list(long, 0).1,
        ["app-a", "app-b"],
        "v0 has no duration filter"
    );

    let pattern =
        ListTransactionsRequest::default().with_transactional_id_pattern(Some(s("app-.")));
    assert_eq!(list(pattern, 2).1, ["app-a", "app-b"]);
    let partial = ListTransactionsRequest::default().with_transactional_id_pattern(Some(s("app")));
    assert!(
        list(partial, 2).1.is_empty(),
        "the pattern must match the whole id"
    );
    let bad = ListTransactionsRequest::default().with_transactional_id_pattern(Some(s("(")));
    assert_eq!(err(list(bad, 2).0), Some(InvalidRegularExpression));
}

/// Writes a value for `id` to partition 0 of `store`, as an earlier coordinator would have.
fn seed(store: &MemStore, id: &str, value: TxnLogValue) {
    let record = (
        encode_key(id).unwrap(),
        Some(encode_value(&value, 1).unwrap()),
    );
    store
        .logs
        .lock()
        .unwrap()
        .entry(0)
        .or_default()
        .push(record);
}

fn completed(producer_id: i64, epoch: i16) -> TxnLogValue {
    TxnLogValue {
        producer_id,
        previous_producer_id: -1,
        next_producer_id: -1,
        producer_epoch: epoch,
        timeout_ms: 60_000,
        state: TransactionState::CompleteCommit,
        partitions: Some(vec![]),
        last_update_ms: START_MS,
        start_ms: START_MS - 10,
        client_transaction_version: 0,
    }
}

#[tokio::test(start_paused = true)]
async fn exhausted_epoch_gets_a_new_producer_id() {
    let h = Harness::new(config());
    seed(&h.store, "tx", completed(7, i16::MAX - 1));
    seed(&h.store, "recovering", completed(8, i16::MAX - 1));
    h.coord.on_election(0, 0).unwrap();

    assert_eq!(h.init("tx").await, (1000, 0));
    let t = h.txn("tx");
    assert_eq!((t.previous_producer_id, t.last_producer_epoch), (7, -1));

    // KIP-360: a producer naming the exhausted epoch gets a new id too, and its retry (naming
    // the old id and epoch, whose answer it lost) is recognised.
    let req = init_req("recovering", 60_000)
        .with_producer_id(ProducerId(8))
        .with_producer_epoch(i16::MAX - 1);
    let r = h.coord.init_producer_id(req.clone(), 3).await;
    assert_eq!(
        (r.error_code, r.producer_id.0, r.producer_epoch),
        (0, 1001, 0)
    );
    let r = h.coord.init_producer_id(req, 3).await;
    assert_eq!(r.error_code, 0, "a retry of the rotation is not fenced");
}

#[tokio::test(start_paused = true)]
async fn kip360_recovery_bumps_the_named_epoch_and_fences_others() {
    let h = Harness::leading();
    let ids = h.init("tx").await;
    let recover = |pid: i64, epoch: i16| {
        init_req("tx", 60_000)
            .with_producer_id(ProducerId(pid))
            .with_producer_epoch(epoch)
    };
    let r = h.coord.init_producer_id(recover(ids.0, ids.1), 3).await;
    assert_eq!((r.error_code, r.producer_epoch), (0, 1));
    // The answer was lost and the producer retries with the epoch it had: same answer.
    let r = h.coord.init_producer_id(recover(ids.0, ids.1), 3).await;
    assert_eq!((r.error_code, r.producer_epoch), (0, 1));
    // Another producer id is a zombie: fenced, in the v3 client's words.
    let r = h.coord.init_producer_id(recover(ids.0 + 5, 0), 3).await;
    assert_eq!(err(r.error_code), Some(InvalidProducerEpoch));
    let r = h.coord.init_producer_id(recover(ids.0 + 5, 0), 4).await;
    assert_eq!(err(r.error_code), Some(ProducerFenced));
    // Only one of producer id and epoch is not a valid request.
    let r = h.coord.init_producer_id(recover(ids.0, -1), 3).await;
    assert_eq!(err(r.error_code), Some(InvalidRequest));
}

#[tokio::test(start_paused = true)]
async fn init_producer_id_validates_its_request() {
    let h = Harness::leading();
    let r = h.coord.init_producer_id(init_req("tx", 900_001), 4).await;
    assert_eq!(err(r.error_code), Some(InvalidTransactionTimeout));
    let r = h.coord.init_producer_id(init_req("tx", 0), 4).await;
    assert_eq!(err(r.error_code), Some(InvalidTransactionTimeout));
    let r = h.coord.init_producer_id(init_req("", 1000), 4).await;
    assert_eq!(err(r.error_code), Some(InvalidRequest));
    // No transactional id: an idempotent producer gets a fresh id at epoch 0.
    let idempotent = InitProducerIdRequest::default().with_transactional_id(None);
    let r = h.coord.init_producer_id(idempotent, 4).await;
    assert_eq!(
        (r.error_code, r.producer_id.0, r.producer_epoch),
        (0, 1000, 0)
    );
}

/// What `TransactionCoordinator::transaction` answered.
type Lookup = Result<Option<TransactionMetadata>, ResponseError>;

#[tokio::test(start_paused = true)]
async fn ids_of_partitions_not_led_or_loading_are_refused() {
    let h = Harness::new(TxnConfig {
        state_log_partitions: 2,
        ..TxnConfig::default()
    });
    let led = (0..50)
        .map(|i| format!("id{i}"))
        .find(|id| h.coord.partition_for(id) == 0)
        .unwrap();
    let other = (0..50)
        .map(|i| format!("id{i}"))
        .find(|id| h.coord.partition_for(id) == 1)
        .unwrap();
    let seen: Arc<Mutex<Option<Lookup>>> = Default::default();
    let (coord, seen_in) = (h.coord.clone(), seen.clone());
    let probe = led.clone();
    *h.store.during_read.lock().unwrap() = Some(Box::new(move || {
        *seen_in.lock().unwrap() = Some(coord.transaction(&probe));
    }));
    h.coord.on_election(0, 3).unwrap();
    assert_eq!(*seen.lock().unwrap(), Some(Err(CoordinatorLoadInProgress)));
    assert_eq!(h.coord.led_partitions(), [(0, 3)]);

    assert_eq!(h.init_as(&other, 4).await, Err(NotCoordinator));
    let ids = h.init(&led).await;
    assert_eq!(h.add(&other, ids, &[("t", 0)]).await, Err(NotCoordinator));
    let r = h.coord.describe_transactions(
        DescribeTransactionsRequest::default()
            .with_transactional_ids(vec![TransactionalId(s(&other))]),
        0,
    );
    assert_eq!(
        err(r.transaction_states[0].error_code),
        Some(NotCoordinator)
    );
}

#[tokio::test(start_paused = true)]
async fn one_change_in_flight_per_transactional_id() {
    let h = Arc::new(Harness::leading());
    let ids = h.init("tx").await;
    h.store.durable_gate.close();
    let first = {
        let h = h.clone();
        tokio::spawn(async move { h.add("tx", ids, &[("t", 0)]).await })
    };
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert_eq!(
        h.add("tx", ids, &[("t", 1)]).await,
        Err(ConcurrentTransactions)
    );
    assert_eq!(h.end("tx", ids, true).await, Err(ConcurrentTransactions));
    assert_eq!(h.init_as("tx", 4).await, Err(ConcurrentTransactions));
    h.store.durable_gate.open();
    first.await.unwrap().unwrap();
    h.add("tx", ids, &[("t", 1)]).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_failed_write_is_answered_and_leaves_nothing_pending() {
    let h = Harness::leading();
    let ids = h.init("tx").await;
    *h.store.fail_next_durable.lock().unwrap() = Some(crate::seams::append_error(
        NotEnoughReplicas,
        "too few in-sync replicas",
    ));
    assert_eq!(
        h.add("tx", ids, &[("t", 0)]).await,
        Err(CoordinatorNotAvailable)
    );
    assert_eq!(h.txn("tx").state, TransactionState::Empty);
    h.add("tx", ids, &[("t", 0)]).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn idle_ids_expire_with_a_tombstone() {
    let h = Harness::leading();
    h.init("idle").await;
    let busy = h.init("busy").await;
    h.add("busy", busy, &[("t", 0)]).await.unwrap();
    h.clock.advance(604_800_000 + 1);
    // Due only after the hourly interval, which has passed too.
    h.coord.tick().await;
    assert_eq!(h.coord.transaction("idle"), Ok(None));
    assert_eq!(h.store.states("idle"), ["Empty", "tombstone"]);
    // An open transaction never expires (it times out and is aborted instead).
    assert!(h.coord.transaction("busy").unwrap().is_some());

    let reloaded = Harness::with_store(config(), h.store.clone());
    assert_eq!(
        reloaded.coord.on_election(0, 1).unwrap(),
        1,
        "only busy is loaded back"
    );
}

#[tokio::test(start_paused = true)]
async fn add_offsets_adds_the_groups_offsets_partition() {
    let h = Harness::leading();
    let ids = h.init("tx").await;
    let req = AddOffsetsToTxnRequest::default()
        .with_transactional_id(TransactionalId(s("tx")))
        .with_producer_id(ProducerId(ids.0))
        .with_producer_epoch(ids.1)
        .with_group_id(GroupId(s("my-group")));
    let r = h.coord.add_offsets_to_txn(req.clone(), 3).await;
    assert_eq!(r.error_code, 0);
    let p = ferry_group::offsets_topic::partition_for("my-group", 50);
    assert!(h
        .txn("tx")
        .partitions
        .contains(&tp("__consumer_offsets", p)));
    let r = h
        .coord
        .add_offsets_to_txn(req.with_producer_epoch(9), 1)
        .await;
    assert_eq!(err(r.error_code), Some(InvalidProducerEpoch));
}

#[tokio::test(start_paused = true)]
async fn unknown_partitions_fail_the_whole_add() {
    let h = Harness::leading();
    let ids = h.init("tx").await;
    h.catalog.0.lock().unwrap().insert("nope".into());
    let errors = h.add_v(3, "tx", ids, &[("t", 0), ("nope", 1)]).await;
    assert_eq!(
        errors,
        [Some(OperationNotAttempted), Some(UnknownTopicOrPartition)]
    );
    assert_eq!(h.txn("tx").state, TransactionState::Empty);
}

#[tokio::test(start_paused = true)]
async fn describe_reports_the_open_transaction() {
    let h = Harness::leading();
    let ids = h.init("tx").await;
    h.clock.advance(5);
    h.add("tx", ids, &[("t", 1), ("t", 0), ("u", 2)])
        .await
        .unwrap();
    let r = h.coord.describe_transactions(
        DescribeTransactionsRequest::default()
            .with_transactional_ids(vec![TransactionalId(s("tx")), TransactionalId(s("none"))]),
        0,
    );
    let t = &r.transaction_states[0];
    assert_eq!((t.error_code, t.transactional_id.as_str()), (0, "tx"));
    assert_eq!(t.transaction_state.as_str(), "Ongoing");
    assert_eq!((t.producer_id.0, t.producer_epoch), ids);
    assert_eq!(
        (t.transaction_timeout_ms, t.transaction_start_time_ms),
        (60_000, START_MS + 5)
    );
    let topics: Vec<(String, Vec<i32>)> = t
        .topics
        .iter()
        .map(|x| (x.topic.to_string(), x.partitions.clone()))
        .collect();
    assert_eq!(
        topics,
        [("t".to_string(), vec![0, 1]), ("u".to_string(), vec![2])]
    );
    let none = &r.transaction_states[1];
    assert_eq!(
        (none.transactional_id.as_str(), err(none.error_code)),
        ("none", Some(TransactionalIdNotFound))
    );
}
