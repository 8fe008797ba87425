pub mod placeholder;
pub mod pool;
