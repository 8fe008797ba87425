pub mod placeholder;
