//! Process-wide pieces of the `ferry` binary.

pub mod alloc;
pub mod cost_report;
