//! exitq: a lock-free thread-exit cleanup queue with RCU-style deferred,
//! batched reclamation. (Being built: see issue "exitq".)
#![warn(missing_docs, unsafe_op_in_unsafe_fn)]
pub mod pool;
