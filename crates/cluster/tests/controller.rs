//! The controller quorum end to end, in-process, with voters on 127.0.0.1 ports.
//!
//! Waits are bounded with generous timeouts; nothing asserts on elapsed time.

// It waits on real time-outs (clippy.toml's clock seam binds the code under test).
#![allow(clippy::disallowed_methods)]

use std::collections::BTreeMap;
use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use ferry_cluster::image::{Applied, Image, MetadataRecord};
use ferry_cluster::{ClusterError, Controller, ControllerConfig};
use tokio::net::TcpListener;
use uuid::Uuid;

const WAIT: Duration = Duration::from_secs(30);

async fn wait_until<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + WAIT;
    while !check().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn register(id: i32) -> MetadataRecord {
    MetadataRecord::RegisterBroker {
        id,
        rack: Some(format!("az{id}")),
        host: "127.0.0.1".into(),
        port: 9000 + id as u16,
        endpoints: Vec::new(),
    }
}

fn create_topic(name: &str, n: u128) -> MetadataRecord {
    MetadataRecord::CreateTopic {
        name: name.into(),
        id: Uuid::from_u128(n),
        configs: BTreeMap::new(),
        assignments: vec![vec![1]],
    }
}

/// The parts of an image that records change (not `applied_index`, which blank entries of new
/// leaders also move).
fn content(image: &Image) -> (Option<String>, String, String, i64) {
    (
        image.cluster_id.clone(),
        format!("{:?}", image.brokers),
        format!("{:?}", image.topics),
        image.next_producer_id,
    )
}

async fn start_single(dir: &Path) -> Controller {
    let c = Controller::start_with(ControllerConfig::single_node(1, dir), None)
        .await
        .unwrap();
    c.wait_for_leader(WAIT).await.unwrap();
    c
}

#[tokio::test]
async fn t10_single_node_proposes_applies_and_keeps_the_image_across_restart() {
    let dir = tempfile::tempdir().unwrap();
    let c = start_single(dir.path()).await;
    assert!(c.is_leader());
    c.propose(MetadataRecord::InitCluster {
        cluster_id: "ferry-test".into(),
    })
    .await
    .unwrap();
    let reg = c.propose(register(1)).await.unwrap();
    assert_eq!(reg.applied, Applied::BrokerEpoch(1));
    c.propose(MetadataRecord::UnfenceBroker { id: 1 })
        .await
        .unwrap();
    c.propose(create_topic("orders", 1)).await.unwrap();
    let pids = c
        .propose(MetadataRecord::AllocateProducerIds {
            broker: 1,
            count: 1000,
        })
        .await
        .unwrap();
    assert_eq!(
        pids.applied,
        Applied::ProducerIds {
            first: 0,
            count: 1000
        }
    );
    // A rejected record is an error to the proposer and changes nothing.
    let err = c.propose(create_topic("orders", 2)).await.unwrap_err();
    assert!(matches!(err, ClusterError::Rejected(_)), "{err:?}");

    let image = c.image();
    assert_eq!(image.topic("orders").unwrap().partitions[0].leader, 1);
    let before = content(&image);
    let applied = image.applied_index;
    let mut rx = c.subscribe();
    assert!(rx.borrow_and_update().applied_index >= applied);
    c.shutdown().await;

    let c = start_single(dir.path()).await;
    let image = c.wait_applied(applied, WAIT).await.unwrap();
    assert_eq!(content(&image), before);
    let next = c
        .propose(MetadataRecord::AllocateProducerIds {
            broker: 1,
            count: 10,
        })
        .await
        .unwrap();
    assert_eq!(
        next.applied,
        Applied::ProducerIds {
            first: 1000,
            count: 10
        }
    );
    c.shutdown().await;
}

#[tokio::test]
async fn t20_single_node_snapshot_compacts_the_log_and_restarts_from_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = ControllerConfig::single_node(1, dir.path());
    config.snapshot_after_entries = 20;
    config.entries_kept_after_snapshot = 0;
    let c = Controller::start_with(config.clone(), None).await.unwrap();
    c.wait_for_leader(WAIT).await.unwrap();
    c.propose(register(1)).await.unwrap();
    for i in 0..60u128 {
        c.propose(create_topic(&format!("t{i}"), i + 1))
            .await
            .unwrap();
    }
    c.trigger_snapshot().await.unwrap();
    let last = c.image().applied_index;
    let mut metrics = c.metrics();
    tokio::time::timeout(
        WAIT,
        metrics.wait_for(|m| m.snapshot.is_some_and(|s| s.index >= last) && m.purged.is_some()),
    )
    .await
    .expect("snapshot and purge")
    .unwrap();
    let before = content(&c.image());
    c.shutdown().await;
    let log_len = std::fs::metadata(dir.path().join("raft-log.dat"))
        .unwrap()
        .len();
    assert_eq!(log_len, 0, "the log is purged up to the snapshot");

    let c = Controller::start_with(config, None).await.unwrap();
    // The image is there before any new entry is committed: it comes from the snapshot.
    assert_eq!(content(&c.image()), before);
    assert_eq!(c.image().topics.len(), 60);
    c.wait_for_leader(WAIT).await.unwrap();
    c.propose(create_topic("after-restart", 1000))
        .await
        .unwrap();
    c.shutdown().await;
}

struct Voter {
    config: ControllerConfig,
}

async fn three_voters(dir: &Path) -> (Vec<Voter>, Vec<Option<Controller>>) {
    let mut listeners = Vec::new();
    let mut voters = BTreeMap::new();
    for id in 1..=3u64 {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        voters.insert(id, l.local_addr().unwrap().to_string());
        listeners.push(l);
    }
    let mut configs = Vec::new();
    let mut controllers = Vec::new();
    for (id, listener) in (1..=3u64).zip(listeners) {
        let mut config = ControllerConfig::new(id, voters.clone(), dir.join(format!("n{id}")));
        // Small, so a restarted voter has to catch up from a snapshot.
        config.snapshot_after_entries = 10;
        config.entries_kept_after_snapshot = 0;
        let c = Controller::start_with(config.clone(), Some(listener))
            .await
            .unwrap();
        configs.push(Voter { config });
        controllers.push(Some(c));
    }
    (configs, controllers)
}

/// Waits until every running voter knows the same leader, other than `not`.
async fn agreed_leader(nodes: &[Option<Controller>], not: Option<u64>) -> u64 {
    let mut leader = 0;
    wait_until("one leader known to every running voter", || {
        let leaders: Vec<Option<u64>> = nodes.iter().flatten().map(|c| c.leader()).collect();
        let first = leaders.first().copied().flatten();
        let ok = first.is_some() && first != not && leaders.iter().all(|l| *l == first);
        if ok {
            leader = first.unwrap_or_default();
        }
        async move { ok }
    })
    .await;
    leader
}

#[tokio::test]
async fn t30_three_voters_elect_forward_fail_over_and_catch_up() {
    let dir = tempfile::tempdir().unwrap();
    let (voters, mut nodes) = three_voters(dir.path()).await;
    let leader = agreed_leader(&nodes, None).await;

    // Propose through a follower: it is forwarded to the leader.
    let follower = (1..=3u64).find(|id| *id != leader).unwrap();
    let f = nodes[(follower - 1) as usize].as_ref().unwrap();
    assert!(!f.is_leader());
    for id in 1..=3 {
        f.propose(register(id)).await.unwrap();
        f.propose(MetadataRecord::UnfenceBroker { id })
            .await
            .unwrap();
    }
    let mut last = 0;
    for i in 0..15u128 {
        last = f
            .propose(create_topic(&format!("t{i}"), i + 1))
            .await
            .unwrap()
            .index;
    }
    for c in nodes.iter().flatten() {
        c.wait_applied(last, WAIT).await.unwrap();
    }
    let before: Vec<Arc<Image>> = nodes.iter().flatten().map(|c| c.image()).collect();
    assert!(before.windows(2).all(|w| content(&w[0]) == content(&w[1])));

    // Stop the leader: the survivors elect another and keep the image.
    let old = nodes[(leader - 1) as usize].take().unwrap();
    let old_last_log = old.metrics().borrow().last_log_index.unwrap_or(0);
    // Dropped, not shut down: its listener and Raft core go away with the handle.
    drop(old);
    let new_leader = agreed_leader(&nodes, Some(leader)).await;
    assert_ne!(new_leader, leader);
    for c in nodes.iter().flatten() {
        assert_eq!(content(&c.image()), content(&before[0]));
    }
    // The survivors still make progress (two of three is a quorum), enough to compact the log.
    let survivor = nodes.iter().flatten().next().unwrap();
    for i in 100..115u128 {
        last = survivor
            .propose(create_topic(&format!("t{i}"), i + 1))
            .await
            .unwrap()
            .index;
    }
    for c in nodes.iter().flatten() {
        c.trigger_snapshot().await.unwrap();
    }
    let expected = content(&survivor.wait_applied(last, WAIT).await.unwrap());
    // The log the stopped voter would need is gone everywhere: it must take a snapshot.
    for c in nodes.iter().flatten() {
        let mut m = c.metrics();
        tokio::time::timeout(
            WAIT,
            m.wait_for(|m| m.purged.is_some_and(|p| p.index > old_last_log)),
        )
        .await
        .expect("log purged past the stopped voter's end")
        .unwrap();
    }

    // Restart the stopped voter on its old address and directory: it catches up.
    let config = voters[(leader - 1) as usize].config.clone();
    let restarted = Controller::start_with(config, None).await.unwrap();
    let image = restarted.wait_applied(last, WAIT).await.unwrap();
    assert_eq!(content(&image), expected);
    assert_eq!(image.topics.len(), 30);
    nodes[(leader - 1) as usize] = Some(restarted);
    agreed_leader(&nodes, None).await;

    for c in nodes.into_iter().flatten() {
        c.shutdown().await;
    }
}

#[tokio::test]
async fn t40_a_voter_not_in_the_voter_set_is_a_config_error() {
    let dir = tempfile::tempdir().unwrap();
    let voters = BTreeMap::from([(1u64, "127.0.0.1:1".to_string())]);
    let err = Controller::start(2, voters, dir.path())
        .await
        .err()
        .unwrap();
    assert!(matches!(err, ClusterError::Config(_)), "{err:?}");
}

#[tokio::test]
async fn t50_heartbeats_reach_the_leaders_inbox_from_any_voter() {
    use ferry_cluster::{BrokerHeartbeat, HeartbeatError, HeartbeatReply};

    let dir = tempfile::tempdir().unwrap();
    let (_voters, nodes) = three_voters(dir.path()).await;
    let leader = agreed_leader(&nodes, None).await;
    let leader_node = nodes[(leader - 1) as usize].as_ref().unwrap();
    let mut inbox = leader_node.take_heartbeats().unwrap();
    assert!(leader_node.take_heartbeats().is_none(), "taken once");
    // Stands in for the leader's liveness task; `is_fenced` follows the broker id's parity so
    // each sender can tell the answer is its own.
    let answering = tokio::spawn(async move {
        let mut seen = Vec::new();
        while let Some(call) = inbox.recv().await {
            seen.push(call.request.broker_id);
            let _ = call.reply.send(Ok(HeartbeatReply {
                is_caught_up: true,
                is_fenced: call.request.broker_id % 2 == 0,
                should_shut_down: call.request.want_shutdown,
            }));
            if seen.len() == 3 {
                return seen;
            }
        }
        seen
    });
    for id in 1..=3u64 {
        let node = nodes[(id - 1) as usize].as_ref().unwrap();
        let reply = node
            .heartbeat(
                BrokerHeartbeat {
                    broker_id: id as i32,
                    broker_epoch: 1,
                    current_metadata_offset: 0,
                    want_fence: false,
                    want_shutdown: id == 3,
                    offline_replicas: Vec::new(),
                },
                WAIT,
            )
            .await
            .unwrap();
        assert_eq!(reply.is_fenced, id % 2 == 0);
        assert_eq!(reply.should_shut_down, id == 3);
    }
    let mut seen = answering.await.unwrap();
    seen.sort();
    assert_eq!(seen, vec![1, 2, 3]);

    // Nobody answers on the leader any more: a follower's heartbeat is refused, not lost.
    let follower = (1..=3u64).find(|id| *id != leader).unwrap();
    let err = nodes[(follower - 1) as usize]
        .as_ref()
        .unwrap()
        .heartbeat(
            BrokerHeartbeat {
                broker_id: follower as i32,
                broker_epoch: 1,
                current_metadata_offset: 0,
                want_fence: false,
                want_shutdown: false,
                offline_replicas: Vec::new(),
            },
            WAIT,
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, HeartbeatError::NotController { .. }),
        "{err:?}"
    );
    for c in nodes.into_iter().flatten() {
        c.shutdown().await;
    }
}

#[tokio::test]
async fn t60_every_voter_describes_the_quorum_as_its_leader_sees_it() {
    use ferry_common::ManualClock;

    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_000);
    let mut listeners = Vec::new();
    let mut voters = BTreeMap::new();
    for id in 1..=3u64 {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        voters.insert(id, l.local_addr().unwrap().to_string());
        listeners.push(l);
    }
    let mut nodes = Vec::new();
    for (id, listener) in (1..=3u64).zip(listeners) {
        let mut config =
            ControllerConfig::new(id, voters.clone(), dir.path().join(format!("n{id}")));
        config.clock = clock.clone();
        nodes.push(Some(
            Controller::start_with(config, Some(listener))
                .await
                .unwrap(),
        ));
    }
    let leader = agreed_leader(&nodes, None).await;
    let node = |id: u64| nodes[(id - 1) as usize].as_ref().unwrap();
    let committed = node(leader).propose(register(1)).await.unwrap().index;
    let end = committed as i64 + 1;

    // Every follower answered the leader's appends at 1000 and holds what it has.
    wait_until("every voter caught up", || {
        let c = node(leader);
        async move {
            let q = c.describe_quorum().await.unwrap();
            q.high_watermark >= end
                && q.voters.iter().all(|v| {
                    v.log_end_offset >= end
                        && v.last_fetch_ms == 1_000
                        && v.last_caught_up_ms == 1_000
                })
        }
    })
    .await;
    // Heartbeats every 100 ms: their answers are fetches too.
    clock.set(5_000);
    wait_until("fetch times move with the heartbeats", || {
        let c = node(leader);
        async move {
            let q = c.describe_quorum().await.unwrap();
            q.voters.iter().all(|v| v.last_fetch_ms == 5_000)
        }
    })
    .await;
    let from_leader = node(leader).describe_quorum().await.unwrap();
    assert_eq!(from_leader.leader_id, leader);
    assert!(from_leader.leader_epoch >= 1);
    assert_eq!(
        from_leader
            .voters
            .iter()
            .map(|v| (v.id, v.addr.clone()))
            .collect::<Vec<_>>(),
        voters.clone().into_iter().collect::<Vec<_>>()
    );
    // A follower asks the leader: the same answer.
    for id in (1..=3u64).filter(|id| *id != leader) {
        let from_follower = node(id).describe_quorum().await.unwrap();
        assert_eq!(from_follower.leader_id, leader);
        assert_eq!(from_follower.voters.len(), 3);
        assert_eq!(from_follower.high_watermark, from_leader.high_watermark);
    }

    // A follower stops: its times stay where they were while the other's go on.
    let stopped = (1..=3u64).find(|id| *id != leader).unwrap();
    let running = (1..=3u64)
        .find(|id| *id != leader && *id != stopped)
        .unwrap();
    drop(nodes[(stopped - 1) as usize].take());
    clock.set(9_000);
    let c = nodes[(leader - 1) as usize].as_ref().unwrap();
    wait_until("the running follower fetches at 9000", || async {
        let q = c.describe_quorum().await.unwrap();
        q.voters
            .iter()
            .any(|v| v.id == running && v.last_fetch_ms == 9_000)
    })
    .await;
    let q = c.describe_quorum().await.unwrap();
    let gone = q.voters.iter().find(|v| v.id == stopped).unwrap();
    assert_eq!((gone.last_fetch_ms, gone.last_caught_up_ms), (5_000, 5_000));

    for c in nodes.into_iter().flatten() {
        c.shutdown().await;
    }
}
