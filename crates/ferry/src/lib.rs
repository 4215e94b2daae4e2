//! Process-wide pieces of the `ferry` binary.

pub mod alloc;
