//! ferry's micro-benchmarks live in `hot_paths.rs` (run `cargo bench -p ferry-benches`); this
//! crate has no code of its own.
