//! The global allocator of the `ferry` binary: mimalloc, except that very large allocations
//! are reserved lazily (`mmap` with `MAP_NORESERVE`) instead of committed up front.
//!
//! Why mimalloc: a broker allocates and frees buffers of hundreds of KB to MBs per request
//! (fetch responses, produce requests, object bodies). glibc's malloc hands such sizes back to
//! the kernel and takes them again, so every request paid page faults and zeroing of fresh
//! pages; mimalloc keeps and reuses them. On one node it more than doubled consume throughput
//! (about 600-850 to 1,300-1,800 MB/s) at a third of the broker CPU per GB.
//!
//! Why: the `kafka-protocol` codecs size a `Vec` from the element count a request claims
//! before reading any element. A 30-byte frame claiming 2^31 elements asks for hundreds of
//! gigabytes; the allocator refuses, and Rust aborts the whole process on a failed
//! allocation. Reserving address space costs nothing until pages are touched, and decoding
//! such a frame fails on its first missing element, so the reservation is released untouched
//! and only that connection is closed. No allocation ferry makes on purpose reaches the
//! threshold (requests are capped by `socket.request.max.bytes`).

use std::alloc::{GlobalAlloc, Layout};
use std::cell::Cell;
use std::time::Duration;

use tokio::time::Instant;

use mimalloc::MiMalloc;

/// Where every allocation below the lazy threshold goes.
static INNER: MiMalloc = MiMalloc;
use std::ptr;

/// Allocations at or above this size are reserved lazily.
pub const LAZY_THRESHOLD: usize = 1 << 30;

pub struct FerryAlloc;

fn is_lazy(layout: &Layout) -> bool {
    // mmap returns page-aligned memory; larger alignments go to the system allocator.
    layout.size() >= LAZY_THRESHOLD && layout.align() <= 4096
}

unsafe fn reserve(size: usize) -> *mut u8 {
    // SAFETY: an anonymous private mapping with no address hint has no preconditions; the
    // result is checked against MAP_FAILED.
    let p = unsafe {
        libc::mmap(
            ptr::null_mut(),
            size,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        ptr::null_mut()
    } else {
        p.cast()
    }
}

// SAFETY: every pointer handed out comes either from `INNER` (and goes back to it) or from
// `reserve` (and goes back to `munmap` with the same size); `is_lazy` of the layout, which the
// caller must pass back unchanged, decides which.
unsafe impl GlobalAlloc for FerryAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if is_lazy(&layout) {
            unsafe { reserve(layout.size()) }
        } else {
            unsafe { INNER.alloc(layout) }
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if is_lazy(&layout) {
            // Anonymous mappings are zero-filled.
            unsafe { reserve(layout.size()) }
        } else {
            unsafe { INNER.alloc_zeroed(layout) }
        }
    }

    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        if is_lazy(&layout) {
            unsafe {
                libc::munmap(p.cast(), layout.size());
            }
        } else {
            unsafe { INNER.dealloc(p, layout) }
        }
    }

    unsafe fn realloc(&self, p: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let Ok(new_layout) = Layout::from_size_align(new_size, layout.align()) else {
            return ptr::null_mut();
        };
        if !is_lazy(&layout) && !is_lazy(&new_layout) {
            return unsafe { INNER.realloc(p, layout, new_size) };
        }
        let fresh = unsafe { self.alloc(new_layout) };
        if !fresh.is_null() {
            unsafe {
                ptr::copy_nonoverlapping(p, fresh, layout.size().min(new_size));
                self.dealloc(p, layout);
            }
        }
        fresh
    }
}

/// Turns transparent huge pages off for this process (`PR_SET_THP_DISABLE`); returns whether
/// the kernel took it.
///
/// Why: mimalloc asks for huge pages on its arenas (`madvise`), so every fresh 2 MiB of a
/// buffer the broker churns through (WAL objects being built, GET bodies, fetch responses)
/// was zeroed whole by the kernel on first touch. A profile of three brokers at full acks=1
/// load on the remote WAL put 22 % of their CPU in that zeroing (`clear_page_erms`); with
/// huge pages off it left the profile and the brokers' CPU per GB fell by about a seventh
/// (docs/benchmarks.md). Ordinary 4 KiB pages are zeroed too, but only those touched.
pub fn disable_transparent_huge_pages() -> bool {
    // SAFETY: PR_SET_THP_DISABLE takes one integer argument and touches no memory of ours.
    unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) == 0 }
}

/// How often, at most, a worker thread hands mimalloc a chance to return memory.
const COLLECT_EVERY: Duration = Duration::from_secs(1);

/// Called when a runtime worker thread goes idle: at most once per [`COLLECT_EVERY`] per thread,
/// makes mimalloc return the pages its heap freed (`mi_collect(true)`).
///
/// Why: mimalloc returns freed pages to the kernel after a short delay, but only the next time
/// the thread that freed them calls into it, and not always then. A thread that goes quiet
/// after a burst (the produce of a GB, a consumer's catch-up) kept them: a broker's RSS after
/// 20 GB varied by a few MB with where in such bursts it was read (docs/benchmarks.md, "Memory
/// after 20 GB"). The unforced collect does not purge them (tests/idle_collect.rs); the forced
/// one walks the thread's heap, which once a second is cheap next to a busy thread's work.
pub fn collect_when_idle() {
    thread_local! {
        static LAST: Cell<Option<Instant>> = const { Cell::new(None) };
    }
    let now = Instant::now();
    let due = LAST.with(|last| {
        let due = last
            .get()
            .is_none_or(|t| now.duration_since(t) >= COLLECT_EVERY);
        if due {
            last.set(Some(now));
        }
        due
    });
    if due {
        // SAFETY: mi_collect takes no pointers; it only walks this thread's own heap.
        unsafe { libmimalloc_sys::mi_collect(true) };
    }
}
