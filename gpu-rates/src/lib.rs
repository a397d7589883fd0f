//! GPU rate tables and provider ids, with no processor or host around them.
//!
//! - [`provider`]: the many spellings of a cloud provider normalised to one id (`aws`,
//!   `AWS`, `Amazon Web Services` -> `ec2`), and inference from OpenTelemetry resource
//!   attributes.
//! - [`rates`]: the `gpu_rates.yaml` table (currency units per GPU-hour, per provider and
//!   GPU model), the built-in table and a user file merged over it.
//!
//! The `provider_lookup` processor prices barrier waits with it; Echo's `get_cost` prices
//! stored history with the same table, so the two always agree.

pub mod provider;
pub mod rates;
