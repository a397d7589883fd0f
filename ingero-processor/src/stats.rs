//! Median and MAD by selection and the MAD threshold formula: `ingero-stats`
//! ([`ingero_stats::robust`], documented there), shared with the agent, re-exported here.

pub use ingero_stats::robust::*;

#[cfg(test)]
mod tests {
    /// The wire contract's scale (what agents are told the sigma means) and the one the
    /// statistics compute with are the same number.
    #[test]
    fn the_mad_scale_is_the_wire_contract_one() {
        assert_eq!(ingero_stats::MAD_SCALE, ingero_wire::MAD_SCALE);
    }
}
