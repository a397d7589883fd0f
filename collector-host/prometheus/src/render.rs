//! Writing stored series and self-metrics as text exposition 0.0.4.
//!
//! A series' labels are its resource label set merged with its data-point label set by
//! name (both are stored sorted by name, so the merge is one pass; on equal names the
//! data-point value wins, see `translate`). Histogram `le` and summary `quantile` labels go
//! last, as client_golang writes them.

use component::{MetricFamily, MetricType, Sample};
use hashbrown::HashMap;

use crate::intern::{FamilyId, FamilyKind, Interner, NONE, Pair, SetId, StrTable};
use crate::naming::{is_valid_label_name, is_valid_metric_name};
use crate::store::{Complex, Series, Shard, is_live};
use crate::text::{escape_label_value, write_float};

/// Write `{a="x",b="y"}` for `r` merged with `d`, plus an optional trailing label whose
/// value is already valid (le / quantile). Writes nothing for an empty set.
fn write_labels(
    out: &mut String,
    s: &StrTable,
    r: &[Pair],
    d: &[Pair],
    tail: Option<(&str, &str)>,
) {
    let mut first = true;
    let mut sep = |out: &mut String| {
        out.push(if first { '{' } else { ',' });
        first = false;
    };
    let (mut i, mut j) = (0, 0);
    loop {
        let pair = match (r.get(i), d.get(j)) {
            (Some(a), Some(b)) => match s.resolve(a[0]).cmp(s.resolve(b[0])) {
                std::cmp::Ordering::Less => {
                    i += 1;
                    a
                }
                std::cmp::Ordering::Greater => {
                    j += 1;
                    b
                }
                std::cmp::Ordering::Equal => {
                    i += 1;
                    j += 1;
                    b
                }
            },
            (Some(a), None) => {
                i += 1;
                a
            }
            (None, Some(b)) => {
                j += 1;
                b
            }
            (None, None) => break,
        };
        sep(out);
        out.push_str(s.resolve(pair[0]));
        out.push_str("=\"");
        out.push_str(s.resolve(pair[1]));
        out.push('"');
    }
    if let Some((n, v)) = tail {
        sep(out);
        out.push_str(n);
        out.push_str("=\"");
        out.push_str(v);
        out.push('"');
    }
    if !first {
        out.push('}');
    }
}

/// Writes the samples of one family name.
struct SampleWriter<'a> {
    strings: &'a StrTable,
    name: &'a str,
}

impl SampleWriter<'_> {
    fn sample(
        &self,
        out: &mut String,
        suffix: &str,
        r: &[Pair],
        d: &[Pair],
        tail: Option<(&str, &str)>,
        value: f64,
    ) {
        out.push_str(self.name);
        out.push_str(suffix);
        write_labels(out, self.strings, r, d, tail);
        out.push(' ');
        write_float(out, value);
        out.push('\n');
    }

    /// All samples of one series. Returns samples written.
    fn series(
        &self,
        out: &mut String,
        kind: FamilyKind,
        (r, d): (&[Pair], &[Pair]),
        value: f64,
        complex: Option<&Complex>,
        buf: &mut String,
    ) -> usize {
        match (kind, complex) {
            (FamilyKind::Gauge | FamilyKind::Counter, _) => {
                self.sample(out, "", r, d, None, value);
                1
            }
            (FamilyKind::Histogram, Some(Complex::Histogram(h))) => {
                let mut cum: u64 = 0;
                let mut n = 0;
                if !h.counts.is_empty() {
                    for (b, c) in h.bounds.iter().zip(h.counts.iter()) {
                        cum = cum.saturating_add(*c);
                        buf.clear();
                        write_float(buf, *b);
                        self.sample(out, "_bucket", r, d, Some(("le", buf)), cum as f64);
                        n += 1;
                    }
                }
                self.sample(out, "_bucket", r, d, Some(("le", "+Inf")), h.count as f64);
                self.sample(out, "_sum", r, d, None, h.sum);
                self.sample(out, "_count", r, d, None, h.count as f64);
                n + 3
            }
            (FamilyKind::Summary, Some(Complex::Summary(q))) => {
                for (quantile, v) in q.quantiles.iter() {
                    buf.clear();
                    write_float(buf, *quantile);
                    self.sample(out, "", r, d, Some(("quantile", buf)), *v);
                }
                self.sample(out, "_sum", r, d, None, q.sum);
                self.sample(out, "_count", r, d, None, q.count as f64);
                q.quantiles.len() + 2
            }
            _ => 0,
        }
    }
}

/// The time window a render shows: series updated within `exp_s` before `now_s`.
#[derive(Debug, Clone, Copy)]
pub struct Window {
    pub now_s: u32,
    pub exp_s: u32,
}

impl Window {
    fn live(&self, s: &Series) -> bool {
        is_live(s.seen_s, self.now_s, self.exp_s)
    }
}

/// One shard's part of a family (or of `target_info`), copied under the shard's lock and
/// formatted after the lock is released: a push to the shard waits for a copy of a few
/// bytes per series, not for the text (about 150 bytes per series). Set ids in a part stay
/// valid while the render holds the exporter's gate, which compaction (the only thing that
/// renumbers them) waits for.
#[derive(Debug, Default)]
pub struct Part {
    /// (resource set, data-point set, `f64` bits or an index into `complex`).
    rows: Vec<(SetId, SetId, u64)>,
    complex: Vec<Complex>,
}

impl Part {
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Copy the live series of family `f` held in `shard` (replacing what the part held).
    pub fn copy_family(&mut self, shard: &Shard, f: FamilyId, w: Window) {
        self.rows.clear();
        self.complex.clear();
        for (&rid, entry) in &shard.resources {
            if !entry.has_family(f) {
                continue;
            }
            for s in entry.series.iter().filter(|s| s.family() == f && w.live(s)) {
                let payload = if s.is_complex() {
                    // A complex series without its state writes nothing; leave it out.
                    let Some(c) = entry.complex(s.payload) else {
                        continue;
                    };
                    self.complex.push(c.clone());
                    (self.complex.len() - 1) as u64
                } else {
                    s.payload
                };
                self.rows.push((rid, s.labels, payload));
            }
        }
    }

    /// Copy the `target_info` label set of every resource in `shard` that has one and a
    /// live series.
    pub fn copy_target_info(&mut self, shard: &Shard, w: Window) {
        self.rows.clear();
        self.complex.clear();
        for entry in shard.resources.values() {
            if entry.target_info != NONE && entry.series.iter().any(|s| w.live(s)) {
                self.rows.push((entry.target_info, NONE, 0));
            }
        }
    }

    /// Write a part copied by [`Part::copy_family`] as family `name` of type `kind`.
    /// Returns samples written.
    pub fn write_family(
        &self,
        out: &mut String,
        (name, kind): (&str, FamilyKind),
        interner: &Interner,
    ) -> usize {
        let wr = SampleWriter {
            strings: &interner.strings,
            name,
        };
        let mut n = 0;
        let mut buf = String::new();
        for &(rid, labels, payload) in &self.rows {
            let (r, d) = (interner.sets.resolve(rid), interner.sets.resolve(labels));
            let complex = match kind {
                FamilyKind::Gauge | FamilyKind::Counter => None,
                _ => usize::try_from(payload)
                    .ok()
                    .and_then(|i| self.complex.get(i)),
            };
            let value = f64::from_bits(payload);
            n += wr.series(out, kind, (r, d), value, complex, &mut buf);
        }
        n
    }

    /// Write a part copied by [`Part::copy_target_info`] as `target_info` named `name`.
    /// Returns samples written.
    pub fn write_target_info(&self, out: &mut String, name: &str, interner: &Interner) -> usize {
        let wr = SampleWriter {
            strings: &interner.strings,
            name,
        };
        for &(set, _, _) in &self.rows {
            wr.sample(out, "", interner.sets.resolve(set), &[], None, 1.0);
        }
        self.rows.len()
    }
}

/// Why a self-metric given to `render` was left out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExtraReject {
    InvalidName,
    InvalidLabel,
    TypeConflict,
}

impl ExtraReject {
    pub const ALL: [ExtraReject; 3] = [
        ExtraReject::InvalidName,
        ExtraReject::InvalidLabel,
        ExtraReject::TypeConflict,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ExtraReject::InvalidName => "invalid_name",
            ExtraReject::InvalidLabel => "invalid_label",
            ExtraReject::TypeConflict => "type_conflict",
        }
    }
}

/// Self-metrics of one name, merged across the given families.
#[derive(Debug)]
pub struct ExtraGroup<'a> {
    pub name: &'a str,
    pub help: &'a str,
    pub kind: MetricType,
    pub samples: Vec<&'a Sample>,
}

fn sample_ok(s: &Sample) -> bool {
    s.labels.iter().enumerate().all(|(i, (k, _))| {
        is_valid_label_name(k) && !s.labels.iter().take(i).any(|(other, _)| other == k)
    })
}

/// Validate and merge self-metrics: families with the same name are merged (first HELP
/// wins) when their types agree; invalid names, invalid samples and type conflicts are
/// left out and reported through `reject` (one call per family or sample).
pub fn group_extras<'a>(
    extra: &'a [MetricFamily],
    mut reject: impl FnMut(ExtraReject, u64),
) -> Vec<ExtraGroup<'a>> {
    let mut groups: Vec<ExtraGroup<'a>> = Vec::new();
    let mut by_name: HashMap<&str, usize> = HashMap::new();
    for fam in extra {
        if !is_valid_metric_name(&fam.name) {
            reject(ExtraReject::InvalidName, 1);
            continue;
        }
        let idx = match by_name.get(fam.name.as_str()) {
            Some(&i) => {
                if groups.get(i).map(|g| g.kind) != Some(fam.kind) {
                    reject(ExtraReject::TypeConflict, 1);
                    continue;
                }
                i
            }
            None => {
                groups.push(ExtraGroup {
                    name: &fam.name,
                    help: &fam.help,
                    kind: fam.kind,
                    samples: Vec::new(),
                });
                by_name.insert(&fam.name, groups.len() - 1);
                groups.len() - 1
            }
        };
        let Some(group) = groups.get_mut(idx) else {
            continue;
        };
        for s in &fam.samples {
            if sample_ok(s) {
                group.samples.push(s);
            } else {
                reject(ExtraReject::InvalidLabel, 1);
            }
        }
    }
    groups
}

/// Write the samples of a self-metric group. Returns samples written.
pub fn write_extra(out: &mut String, g: &ExtraGroup<'_>) -> usize {
    for s in &g.samples {
        out.push_str(g.name);
        for (i, (k, v)) in s.labels.iter().enumerate() {
            out.push(if i == 0 { '{' } else { ',' });
            out.push_str(k);
            out.push_str("=\"");
            escape_label_value(v, out);
            out.push('"');
        }
        if !s.labels.is_empty() {
            out.push('}');
        }
        out.push(' ');
        write_float(out, s.value);
        out.push('\n');
    }
    g.samples.len()
}

/// Whether a self-metric type can share a family with a stored family kind.
pub fn compatible(kind: FamilyKind, t: MetricType) -> bool {
    matches!(
        (kind, t),
        (FamilyKind::Gauge, MetricType::Gauge) | (FamilyKind::Counter, MetricType::Counter)
    )
}

/// Type keyword of a self-metric type.
pub fn type_str(t: MetricType) -> &'static str {
    match t {
        MetricType::Gauge => "gauge",
        MetricType::Counter => "counter",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_merge_by_name_data_point_wins() {
        let mut s = StrTable::default();
        let mut sym = |x: &str| s.insert(x).unwrap();
        let (a, b, c, job) = (sym("a"), sym("b"), sym("c"), sym("job"));
        let (v1, v2, v3, v4) = (sym("1"), sym("2"), sym("3"), sym("4"));
        let mut out = String::new();
        write_labels(
            &mut out,
            &s,
            &[[a, v1], [job, v2]],
            &[[b, v3], [job, v4]],
            Some(("le", "0.5")),
        );
        assert_eq!(out, r#"{a="1",b="3",job="4",le="0.5"}"#);
        out.clear();
        write_labels(&mut out, &s, &[], &[], None);
        assert_eq!(out, "");
        out.clear();
        write_labels(&mut out, &s, &[], &[[c, v1]], None);
        assert_eq!(out, r#"{c="1"}"#);
    }

    #[test]
    fn extras_are_validated_and_merged() {
        let extra = vec![
            MetricFamily::counter("x_total", "first").with(&[("k", "a")], 1.0),
            MetricFamily::counter("x_total", "second").with(&[("k", "b")], 2.0),
            MetricFamily::gauge("x_total", "conflict").with(&[], 3.0),
            MetricFamily::gauge("bad name", "h").with(&[], 1.0),
            MetricFamily::gauge("y", "h")
                .with(&[("ok", "1")], 1.0)
                .with(&[("bad-label", "1")], 1.0)
                .with(&[("d", "1"), ("d", "2")], 1.0),
        ];
        let mut rejects = Vec::new();
        let groups = group_extras(&extra, |r, n| rejects.push((r, n)));
        assert_eq!(groups.len(), 2);
        assert_eq!(groups[0].name, "x_total");
        assert_eq!(groups[0].help, "first");
        assert_eq!(groups[0].samples.len(), 2);
        assert_eq!(groups[1].samples.len(), 1);
        assert_eq!(
            rejects,
            vec![
                (ExtraReject::TypeConflict, 1),
                (ExtraReject::InvalidName, 1),
                (ExtraReject::InvalidLabel, 1),
                (ExtraReject::InvalidLabel, 1)
            ]
        );
        let mut out = String::new();
        write_extra(&mut out, &groups[0]);
        assert_eq!(out, "x_total{k=\"a\"} 1\nx_total{k=\"b\"} 2\n");
    }
}
