//! Being built (see export/mod.rs).
