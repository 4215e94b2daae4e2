//! Blocking work spread over a few threads: each thread takes the next item not yet taken, so a
//! slow item (a log recovering its segments, an fsync) does not hold up a fixed share of others.

use std::sync::atomic::{AtomicUsize, Ordering};

/// Calls `f` on every item of `items` on up to `threads` threads, the caller's among them, and
/// returns the results in no particular order. A helper thread that cannot be started is logged
/// and its share done by the threads already running; a panic in `f` reaches the caller.
pub fn map_on_threads<T: Sync, R: Send>(
    items: &[T],
    threads: usize,
    name: &str,
    f: impl Fn(&T) -> R + Sync,
) -> Vec<R> {
    let next = AtomicUsize::new(0);
    let work = || {
        let mut done = Vec::new();
        while let Some(item) = items.get(next.fetch_add(1, Ordering::Relaxed)) {
            done.push(f(item));
        }
        done
    };
    std::thread::scope(|scope| {
        let mut helpers = Vec::new();
        for i in 1..threads.min(items.len()) {
            match std::thread::Builder::new()
                .name(format!("{name}-{i}"))
                .spawn_scoped(scope, work)
            {
                Ok(helper) => helpers.push(helper),
                Err(e) => {
                    tracing::warn!(error = %e, threads = name, "cannot start a worker thread");
                    break;
                }
            }
        }
        let mut done = work();
        for helper in helpers {
            match helper.join() {
                Ok(mut theirs) => done.append(&mut theirs),
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        done
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_item_is_mapped_once_whatever_the_thread_count() {
        let items: Vec<u32> = (0..100).collect();
        for threads in [0, 1, 3, 200] {
            let mut out = map_on_threads(&items, threads, "test", |i| i * 2);
            out.sort_unstable();
            assert_eq!(
                out,
                items.iter().map(|i| i * 2).collect::<Vec<_>>(),
                "{threads}"
            );
        }
        assert!(map_on_threads(&[] as &[u32], 4, "test", |i| *i).is_empty());
    }
}
