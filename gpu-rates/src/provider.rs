//! Provider ids: normalisation of the many ways a provider is spelled, and inference from
//! OpenTelemetry semantic-convention resource attributes. Pure functions, no I/O.
//!
//! A provider id is canonical when it is lower case and matches
//! `^[a-z0-9][a-z0-9._-]{0,63}$`. Canonical ids follow the keys of the rates file
//! (`ec2`, `gcp`, `azure`, `lambda`, `coreweave`, `on-prem`, ...), so that the agent's
//! `aws` and a rates table's `ec2` meet at the same id.

use std::collections::HashMap;
use std::sync::Arc;

/// Longest accepted provider id, in bytes.
pub const MAX_PROVIDER_ID_LEN: usize = 64;

/// Built-in aliases: `(alias, canonical id)`. Aliases are compared after squashing (lower
/// case, without spaces, `-`, `_` and `.`), so `AWS`, `Amazon Web Services` and
/// `amazon_web_services` are one alias.
pub const BUILTIN_ALIASES: &[(&str, &str)] = &[
    ("aws", "ec2"),
    ("ec2", "ec2"),
    ("amazon", "ec2"),
    ("amazon web services", "ec2"),
    ("aws_ec2", "ec2"),
    ("gcp", "gcp"),
    ("google", "gcp"),
    ("google cloud", "gcp"),
    ("google cloud platform", "gcp"),
    ("gce", "gcp"),
    ("gcp_compute_engine", "gcp"),
    ("azure", "azure"),
    ("microsoft azure", "azure"),
    ("azure_vm", "azure"),
    ("oci", "oci"),
    ("oracle", "oci"),
    ("oracle_cloud", "oci"),
    ("ibm_cloud", "ibm_cloud"),
    ("ibm", "ibm_cloud"),
    ("alibaba_cloud", "alibaba_cloud"),
    ("alibaba", "alibaba_cloud"),
    ("tencent_cloud", "tencent_cloud"),
    ("lambda", "lambda"),
    ("lambda labs", "lambda"),
    ("lambda cloud", "lambda"),
    ("coreweave", "coreweave"),
    ("on-prem", "on-prem"),
    ("on-premises", "on-prem"),
    ("on-premise", "on-prem"),
];

/// The id used for anything that could not be attributed (also the default
/// `default_provider`).
pub const UNKNOWN_PROVIDER: &str = "unknown";

/// Why a provider spelling was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProviderIdError {
    #[error("provider id is empty")]
    Empty,
    #[error("provider id {0:?} is longer than {MAX_PROVIDER_ID_LEN} bytes")]
    TooLong(String),
    #[error(
        "provider id {0:?} has characters outside [a-z0-9._-] (after lower-casing) or does not start with [a-z0-9]"
    )]
    BadCharacters(String),
}

/// Lower case without spaces, `-`, `_` and `.`: the form aliases are compared in.
fn squash(s: &str) -> String {
    s.chars()
        .filter(|c| !matches!(c, ' ' | '-' | '_' | '.' | '\t'))
        .flat_map(char::to_lowercase)
        .collect()
}

/// Maps provider spellings to canonical ids.
#[derive(Debug, Clone)]
pub struct ProviderAliases {
    by_squashed: HashMap<String, Arc<str>>,
}

impl Default for ProviderAliases {
    fn default() -> Self {
        ProviderAliases::builtin()
    }
}

impl ProviderAliases {
    /// The built-in alias table only.
    pub fn builtin() -> Self {
        let mut by_squashed = HashMap::new();
        for (alias, canonical) in BUILTIN_ALIASES {
            by_squashed.insert(squash(alias), Arc::from(*canonical));
        }
        ProviderAliases { by_squashed }
    }

    /// The built-in table plus operator aliases (`alias -> canonical`); operator entries
    /// win over built-in ones. Every problem is returned with the offending alias.
    pub fn with_extra<'a>(
        extra: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<Self, Vec<(String, ProviderIdError)>> {
        let mut table = ProviderAliases::builtin();
        let mut errors = Vec::new();
        for (alias, canonical) in extra {
            if squash(alias).is_empty() {
                errors.push((alias.to_string(), ProviderIdError::Empty));
                continue;
            }
            match clean_id(canonical) {
                Ok(id) => {
                    table.by_squashed.insert(squash(alias), Arc::from(id));
                }
                Err(e) => errors.push((alias.to_string(), e)),
            }
        }
        if errors.is_empty() {
            Ok(table)
        } else {
            Err(errors)
        }
    }

    /// The canonical id for a spelling: an alias when one matches, otherwise the cleaned
    /// spelling itself (lower case, trimmed, inner whitespace as `-`).
    pub fn normalise(&self, raw: &str) -> Result<Arc<str>, ProviderIdError> {
        if let Some(id) = self.by_squashed.get(&squash(raw)) {
            return Ok(Arc::clone(id));
        }
        clean_id(raw).map(Arc::from)
    }
}

/// Lower case, trimmed, inner whitespace runs as `-`, then checked against the id grammar.
fn clean_id(raw: &str) -> Result<String, ProviderIdError> {
    let trimmed = raw.trim();
    if trimmed.is_empty() {
        return Err(ProviderIdError::Empty);
    }
    let mut out = String::with_capacity(trimmed.len());
    let mut in_space = false;
    for c in trimmed.chars() {
        if c.is_whitespace() {
            if !in_space {
                out.push('-');
            }
            in_space = true;
            continue;
        }
        in_space = false;
        out.extend(c.to_lowercase());
    }
    if out.len() > MAX_PROVIDER_ID_LEN {
        return Err(ProviderIdError::TooLong(trimmed.to_string()));
    }
    let mut chars = out.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    let rest_ok =
        chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '_' | '-'));
    if first_ok && rest_ok {
        Ok(out)
    } else {
        Err(ProviderIdError::BadCharacters(trimmed.to_string()))
    }
}

/// The provider named by an OTel `cloud.platform` value (`aws_ec2`, `gcp_kubernetes_engine`,
/// `azure.vm`, ...), as a spelling for [`ProviderAliases::normalise`].
pub fn provider_from_cloud_platform(platform: &str) -> Option<&'static str> {
    let p = platform.trim().to_ascii_lowercase();
    // Order matters only for readability: no prefix below is a prefix of another.
    const PREFIXES: &[(&str, &str)] = &[
        ("aws", "aws"),
        ("gcp", "gcp"),
        ("azure", "azure"),
        ("alibaba_cloud", "alibaba_cloud"),
        ("oracle_cloud", "oracle_cloud"),
        ("ibm_cloud", "ibm_cloud"),
        ("tencent_cloud", "tencent_cloud"),
        ("heroku", "heroku"),
    ];
    PREFIXES.iter().find_map(|(prefix, provider)| {
        let rest = p.strip_prefix(prefix)?;
        (rest.is_empty() || rest.starts_with('_') || rest.starts_with('.')).then_some(*provider)
    })
}

/// The provider implied by an OTel `host.type` (the instance type), by naming heuristics:
/// `Standard_ND96isr_H100_v5` is Azure, `p5.48xlarge` is AWS, `a3-highgpu-8g` is GCP,
/// `gpu_8x_h100_sxm5` is Lambda. `None` when no pattern fits.
pub fn provider_from_host_type(host_type: &str) -> Option<&'static str> {
    let t = host_type.trim();
    if t.len() > 128 || t.is_empty() {
        return None;
    }
    let lower = t.to_ascii_lowercase();
    if lower.starts_with("standard_") || lower.starts_with("basic_") {
        return Some("azure");
    }
    if is_aws_instance_type(&lower) {
        return Some("aws");
    }
    if is_gcp_machine_type(&lower) {
        return Some("gcp");
    }
    if let Some(rest) = lower.strip_prefix("gpu_") {
        // Lambda: gpu_<n>x_<model>...
        let digits = rest.chars().take_while(char::is_ascii_digit).count();
        if digits > 0 && rest[digits..].starts_with("x_") {
            return Some("lambda");
        }
    }
    None
}

/// `<family>.<size>`: family `[a-z0-9-]+` with a digit, size one of the EC2 size names.
fn is_aws_instance_type(t: &str) -> bool {
    let Some((family, size)) = t.split_once('.') else {
        return false;
    };
    let family_ok = !family.is_empty()
        && family.starts_with(|c: char| c.is_ascii_lowercase())
        && family
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && family.chars().any(|c| c.is_ascii_digit());
    let size_ok = matches!(size, "nano" | "micro" | "small" | "medium" | "large")
        || size.starts_with("metal")
        || size
            .strip_suffix("xlarge")
            .is_some_and(|n| n.chars().all(|c| c.is_ascii_digit()));
    family_ok && size_ok
}

/// `<series>-<class>[-<n>[g]]` where series is a letter, a digit and an optional letter
/// (`a3`, `n2d`, `g2`), class is letters (`highgpu`, `standard`).
fn is_gcp_machine_type(t: &str) -> bool {
    let mut parts = t.split('-');
    let (Some(series), Some(class)) = (parts.next(), parts.next()) else {
        return false;
    };
    let size = parts.next();
    if parts.next().is_some() {
        return false;
    }
    let s = series.as_bytes();
    let series_ok = (s.len() == 2 || s.len() == 3)
        && s.first().is_some_and(u8::is_ascii_lowercase)
        && s.get(1).is_some_and(u8::is_ascii_digit)
        && s.get(2).is_none_or(u8::is_ascii_lowercase);
    let class_ok = !class.is_empty() && class.chars().all(|c| c.is_ascii_lowercase());
    let size_ok = size.is_none_or(|n| {
        let n = n.strip_suffix('g').unwrap_or(n);
        !n.is_empty() && n.chars().all(|c| c.is_ascii_digit())
    });
    series_ok && class_ok && size_ok
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agent_and_rates_spellings_meet() {
        let a = ProviderAliases::builtin();
        for s in [
            "aws",
            "AWS",
            " Aws ",
            "ec2",
            "EC2",
            "Amazon Web Services",
            "aws_ec2",
        ] {
            assert_eq!(&*a.normalise(s).unwrap(), "ec2", "{s}");
        }
        for s in ["gcp", "GCP", "Google Cloud", "gcp_compute_engine"] {
            assert_eq!(&*a.normalise(s).unwrap(), "gcp", "{s}");
        }
        assert_eq!(&*a.normalise("Azure").unwrap(), "azure");
        assert_eq!(&*a.normalise("Lambda Labs").unwrap(), "lambda");
        for s in ["on-prem", "onprem", "On Prem", "on_premises", "ON-PREMISE"] {
            assert_eq!(&*a.normalise(s).unwrap(), "on-prem", "{s}");
        }
    }

    #[test]
    fn unknown_spellings_are_cleaned_not_invented() {
        let a = ProviderAliases::builtin();
        assert_eq!(&*a.normalise("Nebius").unwrap(), "nebius");
        assert_eq!(&*a.normalise("my  private  dc").unwrap(), "my-private-dc");
        assert_eq!(a.normalise("   "), Err(ProviderIdError::Empty));
        assert!(matches!(
            a.normalise("x/y"),
            Err(ProviderIdError::BadCharacters(_))
        ));
        assert!(matches!(
            a.normalise(&"a".repeat(65)),
            Err(ProviderIdError::TooLong(_))
        ));
        assert!(matches!(
            a.normalise("-lead"),
            Err(ProviderIdError::BadCharacters(_))
        ));
    }

    #[test]
    fn operator_aliases_override_builtin_and_report_every_error() {
        let a = ProviderAliases::with_extra([("aws", "aws"), ("Crusoe Cloud", "crusoe")]).unwrap();
        assert_eq!(&*a.normalise("AWS").unwrap(), "aws");
        assert_eq!(&*a.normalise("crusoe-cloud").unwrap(), "crusoe");
        let errs =
            ProviderAliases::with_extra([("a", "bad id!"), ("", "x"), ("ok", "ok")]).unwrap_err();
        assert_eq!(errs.len(), 2);
        assert_eq!(errs[0].0, "a");
        assert_eq!(errs[1], (String::new(), ProviderIdError::Empty));
    }

    #[test]
    fn cloud_platform_prefixes() {
        assert_eq!(provider_from_cloud_platform("aws_ec2"), Some("aws"));
        assert_eq!(provider_from_cloud_platform("aws_lambda"), Some("aws"));
        assert_eq!(provider_from_cloud_platform("azure.vm"), Some("azure"));
        assert_eq!(
            provider_from_cloud_platform("gcp_kubernetes_engine"),
            Some("gcp")
        );
        assert_eq!(provider_from_cloud_platform("awsome"), None);
        assert_eq!(provider_from_cloud_platform("kubernetes"), None);
    }

    #[test]
    fn host_type_heuristics() {
        for (t, want) in [
            ("p5.48xlarge", Some("aws")),
            ("p4d.24xlarge", Some("aws")),
            ("g5.xlarge", Some("aws")),
            ("c5.metal", Some("aws")),
            ("u-6tb1.metal", Some("aws")),
            ("Standard_ND96isr_H100_v5", Some("azure")),
            ("a3-highgpu-8g", Some("gcp")),
            ("g2-standard-4", Some("gcp")),
            ("n2d-standard-8", Some("gcp")),
            ("e2-medium", Some("gcp")),
            ("gpu_8x_h100_sxm5", Some("lambda")),
            ("dgx-h100", None),
            ("bare.metalish", None),
            ("", None),
            ("weird-type-name-here", None),
        ] {
            assert_eq!(provider_from_host_type(t), want, "{t}");
        }
    }
}
