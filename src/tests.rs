//! `#[pg_test]`s: each runs inside a transaction that is rolled back, so these
//! check single-session behaviour. Commit, concurrency and privileges are
//! tested from real clients in tests/cluster.
