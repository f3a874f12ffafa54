//! Shared helpers live in tests/common; this crate only hosts integration tests.
