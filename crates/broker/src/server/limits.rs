//! How many connections the broker serves, as Kafka's `ConnectionQuotas` decides it:
//! - `max.connections` (broker-wide) and `listener.name.<l>.max.connections` (per listener): at
//!   the limit the listener stops accepting until a connection closes, so new clients wait in
//!   the kernel's backlog instead of being refused; the inter-broker listener is exempt from the
//!   broker-wide limit, so other brokers always get in;
//! - `max.connections.per.ip` with `max.connections.per.ip.overrides`: one connection too many
//!   from an address is closed at once.
//!
//! A [`ConnectionPermit`] is held for a connection's whole life; dropping it frees its slots.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

/// The broker-wide counts.
pub struct ConnectionLimits {
    max_total: usize,
    per_ip: usize,
    per_ip_overrides: HashMap<IpAddr, usize>,
    total: AtomicUsize,
    by_ip: Mutex<HashMap<IpAddr, usize>>,
    /// Woken whenever a connection closes.
    freed: Notify,
}

/// One listener's count and its own limit, if any.
pub struct ListenerSlots {
    max: Option<usize>,
    open: AtomicUsize,
    /// The inter-broker listener: not held to the broker-wide limit.
    exempt: bool,
}

impl ListenerSlots {
    pub fn new(max: Option<usize>, exempt: bool) -> Arc<Self> {
        Arc::new(Self {
            max,
            open: AtomicUsize::new(0),
            exempt,
        })
    }
}

/// Holds one connection's slots; dropping it frees them.
pub struct ConnectionPermit {
    limits: Arc<ConnectionLimits>,
    listener: Arc<ListenerSlots>,
    ip: IpAddr,
}

impl Drop for ConnectionPermit {
    fn drop(&mut self) {
        self.limits.total.fetch_sub(1, Ordering::AcqRel);
        self.listener.open.fetch_sub(1, Ordering::AcqRel);
        {
            let mut by_ip = self.limits.by_ip.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(n) = by_ip.get_mut(&self.ip) {
                *n -= 1;
                if *n == 0 {
                    by_ip.remove(&self.ip);
                }
            }
        }
        self.limits.freed.notify_waiters();
    }
}

impl ConnectionLimits {
    pub fn new(max_total: usize, per_ip: usize, overrides: Vec<(IpAddr, usize)>) -> Arc<Self> {
        Arc::new(Self {
            max_total,
            per_ip,
            per_ip_overrides: overrides.into_iter().collect(),
            total: AtomicUsize::new(0),
            by_ip: Mutex::new(HashMap::new()),
            freed: Notify::new(),
        })
    }

    /// Whether `listener` may take one more connection now.
    fn has_slot(&self, listener: &ListenerSlots) -> bool {
        let own = listener
            .max
            .is_none_or(|max| listener.open.load(Ordering::Acquire) < max);
        let broker_wide = listener.exempt || self.total.load(Ordering::Acquire) < self.max_total;
        own && broker_wide
    }

    /// Waits until `listener` may take one more connection (returns at once below the limits).
    pub async fn wait_for_slot(&self, listener: &ListenerSlots) {
        loop {
            let freed = self.freed.notified();
            tokio::pin!(freed);
            // Registered before the check, so a close in between is not missed.
            freed.as_mut().enable();
            if self.has_slot(listener) {
                return;
            }
            freed.await;
        }
    }

    /// Counts an accepted connection from `ip` on `listener`; `None` when `ip` already has
    /// `max.connections.per.ip` (the caller closes the connection).
    pub fn admit(
        self: &Arc<Self>,
        listener: &Arc<ListenerSlots>,
        ip: IpAddr,
    ) -> Option<ConnectionPermit> {
        {
            let limit = self
                .per_ip_overrides
                .get(&ip)
                .copied()
                .unwrap_or(self.per_ip);
            let mut by_ip = self.by_ip.lock().unwrap_or_else(|p| p.into_inner());
            let n = by_ip.entry(ip).or_insert(0);
            if *n >= limit {
                if *n == 0 {
                    by_ip.remove(&ip);
                }
                return None;
            }
            *n += 1;
        }
        self.total.fetch_add(1, Ordering::AcqRel);
        listener.open.fetch_add(1, Ordering::AcqRel);
        Some(ConnectionPermit {
            limits: self.clone(),
            listener: listener.clone(),
            ip,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;
    use std::time::Duration;

    const A: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
    const B: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));

    #[test]
    fn one_connection_over_the_per_ip_limit_is_refused_and_overrides_apply() {
        let limits = ConnectionLimits::new(usize::MAX, 2, vec![(B, 3)]);
        let l = ListenerSlots::new(None, false);
        let a1 = limits.admit(&l, A).unwrap();
        let _a2 = limits.admit(&l, A).unwrap();
        assert!(limits.admit(&l, A).is_none());
        let _b: Vec<_> = (0..3).map(|_| limits.admit(&l, B).unwrap()).collect();
        assert!(limits.admit(&l, B).is_none());
        drop(a1);
        assert!(limits.admit(&l, A).is_some());
    }

    #[tokio::test]
    async fn at_the_broker_wide_limit_a_listener_waits_and_the_inter_broker_one_does_not() {
        let limits = ConnectionLimits::new(2, usize::MAX, vec![]);
        let clients = ListenerSlots::new(None, false);
        let brokers = ListenerSlots::new(None, true);
        let c1 = limits.admit(&clients, A).unwrap();
        let c2 = limits.admit(&clients, A).unwrap();
        // Other brokers still get in, and count.
        tokio::time::timeout(Duration::from_secs(1), limits.wait_for_slot(&brokers))
            .await
            .unwrap();
        let _broker = limits.admit(&brokers, B).unwrap();
        let l2 = limits.clone();
        let waiting_clients = clients.clone();
        let mut waiter = tokio::spawn(async move { l2.wait_for_slot(&waiting_clients).await });
        tokio::time::sleep(Duration::from_millis(30)).await;
        assert!(!waiter.is_finished());
        // Three open, two allowed: one close is not enough.
        drop(c1);
        assert!(tokio::time::timeout(Duration::from_millis(50), &mut waiter)
            .await
            .is_err());
        drop(c2);
        tokio::time::timeout(Duration::from_secs(1), waiter)
            .await
            .unwrap()
            .unwrap();
    }

    #[tokio::test]
    async fn a_listeners_own_limit_applies_to_it_alone() {
        let limits = ConnectionLimits::new(usize::MAX, usize::MAX, vec![]);
        let small = ListenerSlots::new(Some(1), false);
        let other = ListenerSlots::new(None, false);
        let _one = limits.admit(&small, A).unwrap();
        let waiting = tokio::time::timeout(Duration::from_millis(50), limits.wait_for_slot(&small));
        assert!(waiting.await.is_err());
        tokio::time::timeout(Duration::from_secs(1), limits.wait_for_slot(&other))
            .await
            .unwrap();
    }
}
