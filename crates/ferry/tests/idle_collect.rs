//! A runtime worker that goes idle lets mimalloc hand the pages it freed back to the kernel
//! (`ferry::alloc::collect_when_idle`, the runtime's `on_thread_park`). One test in this file:
//! it reads the whole process's resident memory.

use std::time::Duration;

#[global_allocator]
static ALLOC: ferry::alloc::FerryAlloc = ferry::alloc::FerryAlloc;

/// Resident bytes of this process (`/proc/self/statm`, in pages).
fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("/proc/self/statm");
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .expect("resident pages");
    // SAFETY: sysconf reads a constant of the system.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    pages * u64::try_from(page).expect("page size")
}

#[test]
fn an_idle_thread_hands_back_the_pages_it_freed() {
    std::thread::spawn(|| {
        // 64 buffers of 1 MiB, written then freed, as a burst of requests leaves them.
        let buffers: Vec<Vec<u8>> = (0..64).map(|i| vec![i as u8; 1 << 20]).collect();
        let touched: u64 = buffers.iter().map(|b| u64::from(b[b.len() - 1])).sum();
        assert_eq!(touched, (0..64).sum::<u64>());
        drop(buffers);
        // mimalloc returns freed pages after its purge delay (10 ms), but only when this thread
        // calls into it again; an idle thread does not.
        std::thread::sleep(Duration::from_millis(100));
        let held = resident_bytes();
        ferry::alloc::collect_when_idle();
        let after = resident_bytes();
        assert!(
            held.saturating_sub(after) >= 32 << 20,
            "resident {} MB before the idle collect, {} MB after",
            held >> 20,
            after >> 20
        );
    })
    .join()
    .unwrap();
}
