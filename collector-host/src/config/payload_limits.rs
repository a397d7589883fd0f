//! `receivers.otlp.limits`: how large the parts of a decoded metrics export may be. Every
//! attribute and metric name ends up as label text held by the exporters until
//! `metric_expiration`, so the body-size cap alone lets one request hold hundreds of MB.
//! Over-limit points are dropped, counted and answered with partial success
//! (`ingest::screen`).

use component::config::{ConfigErrors, check};
use serde::{Deserialize, Serialize};

/// Longest attribute key, in bytes.
pub const DEFAULT_MAX_ATTRIBUTE_KEY_BYTES: usize = 256;
/// Longest attribute value, in bytes (strings and bytes by length; arrays and maps by the
/// sum of their members' sizes and keys, scalars 8).
pub const DEFAULT_MAX_ATTRIBUTE_VALUE_BYTES: usize = 4096;
/// Most attributes of one series: its resource's attributes plus the point's.
pub const DEFAULT_MAX_ATTRIBUTES_PER_SERIES: usize = 64;
/// Most metrics under one resource (an agent's health push has about 15).
pub const DEFAULT_MAX_METRICS_PER_RESOURCE: usize = 1000;
/// Longest metric name (the OpenTelemetry API's instrument-name limit).
pub const DEFAULT_MAX_METRIC_NAME_BYTES: usize = 255;
/// Longest metric unit (the OpenTelemetry API's unit limit).
pub const DEFAULT_MAX_METRIC_UNIT_BYTES: usize = 63;
/// Longest metric description (the exporter's HELP text).
pub const DEFAULT_MAX_METRIC_DESCRIPTION_BYTES: usize = 1024;

/// The smallest `max_attribute_value_bytes` a config may set: room for any id a request
/// scope accepts (`Components::with_request_scope` checks the scope against it), so a
/// resource stamped with its request's scope is never over the limit.
pub const MIN_ATTRIBUTE_VALUE_BYTES: usize = 256;

/// `receivers.otlp.limits`
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct PayloadLimits {
    pub max_attribute_key_bytes: usize,
    pub max_attribute_value_bytes: usize,
    pub max_attributes_per_series: usize,
    pub max_metrics_per_resource: usize,
    pub max_metric_name_bytes: usize,
    pub max_metric_unit_bytes: usize,
    pub max_metric_description_bytes: usize,
}

impl Default for PayloadLimits {
    fn default() -> Self {
        PayloadLimits {
            max_attribute_key_bytes: DEFAULT_MAX_ATTRIBUTE_KEY_BYTES,
            max_attribute_value_bytes: DEFAULT_MAX_ATTRIBUTE_VALUE_BYTES,
            max_attributes_per_series: DEFAULT_MAX_ATTRIBUTES_PER_SERIES,
            max_metrics_per_resource: DEFAULT_MAX_METRICS_PER_RESOURCE,
            max_metric_name_bytes: DEFAULT_MAX_METRIC_NAME_BYTES,
            max_metric_unit_bytes: DEFAULT_MAX_METRIC_UNIT_BYTES,
            max_metric_description_bytes: DEFAULT_MAX_METRIC_DESCRIPTION_BYTES,
        }
    }
}

impl PayloadLimits {
    /// Every limit must be at least 1; the value limit must hold a scope id
    /// ([`MIN_ATTRIBUTE_VALUE_BYTES`]).
    pub fn validate(&self, e: &mut ConfigErrors, prefix: &str) {
        for (key, v, min) in [
            ("max_attribute_key_bytes", self.max_attribute_key_bytes, 32),
            (
                "max_attribute_value_bytes",
                self.max_attribute_value_bytes,
                MIN_ATTRIBUTE_VALUE_BYTES,
            ),
            (
                "max_attributes_per_series",
                self.max_attributes_per_series,
                8,
            ),
            (
                "max_metrics_per_resource",
                self.max_metrics_per_resource,
                16,
            ),
            ("max_metric_name_bytes", self.max_metric_name_bytes, 32),
            ("max_metric_unit_bytes", self.max_metric_unit_bytes, 1),
            (
                "max_metric_description_bytes",
                self.max_metric_description_bytes,
                1,
            ),
        ] {
            check::at_least_u64(e, &format!("{prefix}.{key}"), v as u64, min as u64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_validate_and_small_values_name_their_key() {
        let mut e = ConfigErrors::new();
        PayloadLimits::default().validate(&mut e, "limits");
        assert!(e.is_empty());
        let l = PayloadLimits {
            max_attribute_value_bytes: 100,
            max_metric_unit_bytes: 0,
            ..PayloadLimits::default()
        };
        let mut e = ConfigErrors::new();
        l.validate(&mut e, "limits");
        let paths: Vec<&str> = e.iter().map(|x| x.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "limits.max_attribute_value_bytes",
                "limits.max_metric_unit_bytes"
            ]
        );
    }
}
