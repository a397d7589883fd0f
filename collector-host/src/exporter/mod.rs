//! Exporters: `prometheus` (pull), `debug` (stderr), `otlp` / `otlphttp` (forward).

pub mod debug;
pub mod otlp;
pub mod prometheus;
