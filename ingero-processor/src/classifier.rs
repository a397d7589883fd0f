//! Server-side straggler classification. The classifier's math (the one-sided CUSUM on the
//! shortfall below the threshold, the shallow-drop sum, the tail estimate) lives in
//! `ingero-stats` ([`ingero_stats::cusum`], documented there), shared with the agent; this
//! module re-exports it and maps `processors.ingero.classifier` onto its parameters.

pub use ingero_stats::cusum::*;

use crate::config::IngeroConfig;

/// The classifier parameters of a validated config.
pub fn cusum_params(cfg: &IngeroConfig) -> CusumParams {
    CusumParams {
        drift: cfg.classifier.drift,
        decision: cfg.classifier.decision,
        clear_margin: cfg.classifier.clear_margin,
        // Validated to [0, 255].
        clear_holdoff: u8::try_from(cfg.classifier.clear_holdoff).unwrap_or(u8::MAX),
        // Validated to [0, 3]; 0 (automatic) starts at 1 until the cluster's noise says
        // otherwise.
        evidence: u8::try_from(cfg.classifier.evidence.clamp(1, 3)).unwrap_or(1),
        shallow_decision: cfg.classifier.shallow_decision,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_config_gives_the_default_parameters() {
        assert_eq!(cusum_params(&IngeroConfig::default()), CusumParams::DEFAULT);
    }

    #[test]
    fn config_values_reach_the_parameters() {
        let mut cfg = IngeroConfig::default();
        cfg.classifier.drift = 0.25;
        cfg.classifier.decision = 6.0;
        cfg.classifier.clear_margin = 2.0;
        cfg.classifier.clear_holdoff = 3;
        cfg.classifier.evidence = 2;
        cfg.classifier.shallow_decision = 0.0;
        let p = cusum_params(&cfg);
        assert_eq!(
            (
                p.drift,
                p.decision,
                p.clear_margin,
                p.clear_holdoff,
                p.evidence
            ),
            (0.25, 6.0, 2.0, 3, 2)
        );
        assert!(!p.shallow());
        // Automatic evidence starts at one sample.
        cfg.classifier.evidence = 0;
        assert_eq!(cusum_params(&cfg).evidence, 1);
    }
}
