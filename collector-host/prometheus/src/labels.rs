//! Label sets from OTLP attributes: sanitised names, pdata-spelled escaped values,
//! key overrides and `;`-joined collisions (contrib's rules), `job`/`instance`, const
//! labels, and the exact encoding of an attribute list used to memoise point label sets.

use component::otlp::{AnyValue, AnyValueKind, KeyValue};

use crate::intern::{Interner, Pair, Sym};
use crate::text::{escape_label_value, needs_escape};
use crate::translate::{Fail, Lookup, Settings};
use crate::value::{as_plain_str, write_value};

// OpenTelemetry semantic-convention resource attributes (`job` and `instance`).
pub(crate) const SERVICE_NAME: &str = "service.name";
pub(crate) const SERVICE_INSTANCE_ID: &str = "service.instance.id";
pub(crate) const SERVICE_NAMESPACE: &str = "service.namespace";

/// Reusable buffers for one `consume` call.
#[derive(Debug, Default)]
pub struct Scratch {
    pub(crate) key: Vec<u8>,
    /// The encoded resource attributes (the resource memo's key).
    pub(crate) resource: Vec<u8>,
    /// The layout key of the `ResourceMetrics` being translated.
    pub(crate) layout: Vec<u8>,
    /// Set when a point's labels collided with the resource's (see `translate`).
    pub(crate) collided: bool,
    pub(crate) r: Vec<Pair>,
    pub(crate) d: Vec<Pair>,
    pub(crate) m: Vec<Pair>,
    raw: String,
    esc: String,
}

/// Symbol of an attribute value's escaped label text.
pub(crate) fn value_sym(
    lk: &mut Lookup<'_>,
    v: Option<&AnyValue>,
    sc: &mut Scratch,
) -> Result<Sym, Fail> {
    if let Some(s) = as_plain_str(v)
        && !needs_escape(s)
    {
        return lk.sym(s);
    }
    sc.raw.clear();
    write_value(v, &mut sc.raw);
    escaped_sym(lk, sc)
}

/// Symbol of `sc.raw`, escaped.
pub(crate) fn escaped_sym(lk: &mut Lookup<'_>, sc: &mut Scratch) -> Result<Sym, Fail> {
    if !needs_escape(&sc.raw) {
        return lk.sym(&sc.raw);
    }
    sc.esc.clear();
    escape_label_value(&sc.raw, &mut sc.esc);
    lk.sym(&sc.esc)
}

pub(crate) fn sort_by_name(i: &Interner, pairs: &mut [Pair]) {
    pairs.sort_unstable_by(|a, b| i.strings.resolve(a[0]).cmp(i.strings.resolve(b[0])));
}

pub(crate) fn has_duplicate_names(pairs: &[Pair]) -> bool {
    pairs.windows(2).any(|w| w[0][0] == w[1][0])
}

/// Labels from attribute lists, later lists overriding earlier ones key by key, keys that
/// sanitise alike joined with `;` in key order. Keys for which `skip` is true are left out.
/// Result in `out`, sorted by label name.
pub(crate) fn attr_labels(
    lk: &mut Lookup<'_>,
    lists: &[&[KeyValue]],
    skip: &dyn Fn(&str) -> bool,
    sc: &mut Scratch,
    out: &mut Vec<Pair>,
) -> Result<(), Fail> {
    out.clear();
    if let [single] = lists {
        for kv in single.iter().filter(|kv| !skip(&kv.key)) {
            let name = lk.label_key(&kv.key)?;
            let value = value_sym(lk, kv.value.as_ref(), sc)?;
            out.push([name, value]);
        }
        sort_by_name(lk.interner(), out);
        if !has_duplicate_names(out) {
            return Ok(());
        }
        out.clear();
    }
    // General path: resolve key overrides, then join colliding names in key order.
    let mut entries: Vec<(&str, Option<&AnyValue>)> = Vec::new();
    for list in lists {
        for kv in list.iter().filter(|kv| !skip(&kv.key)) {
            match entries.iter_mut().find(|(k, _)| *k == kv.key) {
                Some(e) => e.1 = kv.value.as_ref(),
                None => entries.push((&kv.key, kv.value.as_ref())),
            }
        }
    }
    entries.sort_by(|a, b| a.0.cmp(b.0));
    let mut named: Vec<(Sym, &str, Option<&AnyValue>)> = Vec::with_capacity(entries.len());
    for (k, v) in entries {
        named.push((lk.label_key(k)?, k, v));
    }
    // Stable: equal names keep key order.
    named.sort_by_key(|(n, _, _)| *n);
    let mut idx = 0;
    while let Some(&(name, _, first)) = named.get(idx) {
        sc.raw.clear();
        write_value(first, &mut sc.raw);
        idx += 1;
        while let Some(&(n, _, v)) = named.get(idx) {
            if n != name {
                break;
            }
            sc.raw.push(';');
            write_value(v, &mut sc.raw);
            idx += 1;
        }
        let value = escaped_sym(lk, sc)?;
        out.push([name, value]);
    }
    sort_by_name(lk.interner(), out);
    Ok(())
}

pub(crate) fn upsert(pairs: &mut Vec<Pair>, name: Sym, value: Sym) {
    match pairs.iter_mut().find(|p| p[0] == name) {
        Some(p) => p[1] = value,
        None => pairs.push([name, value]),
    }
}

/// `job` (`service.namespace/service.name`) and `instance` (`service.instance.id`) from
/// resource attributes, as raw strings.
pub(crate) fn job_instance(attrs: &[KeyValue]) -> (Option<String>, Option<String>) {
    let get = |key: &str| {
        attrs
            .iter()
            .find(|kv| kv.key == key)
            .map(|kv| kv.value.as_ref())
    };
    let text = |v: Option<&AnyValue>| {
        let mut s = String::new();
        write_value(v, &mut s);
        s
    };
    let job = get(SERVICE_NAME).map(|name| match get(SERVICE_NAMESPACE) {
        Some(ns) => format!("{}/{}", text(ns), text(name)),
        None => text(name),
    });
    let instance = get(SERVICE_INSTANCE_ID).map(text);
    (job, instance)
}

/// Add `job`/`instance` (and, when `with_const`, the const labels) to `out`, overriding
/// labels of the same name, and sort.
pub(crate) fn add_identity(
    lk: &mut Lookup<'_>,
    ids: &(Option<String>, Option<String>),
    settings: Option<&Settings>,
    sc: &mut Scratch,
    out: &mut Vec<Pair>,
) -> Result<(), Fail> {
    for (label, v) in [("job", &ids.0), ("instance", &ids.1)] {
        if let Some(v) = v {
            let name = lk.sym(label)?;
            sc.raw.clear();
            sc.raw.push_str(v);
            let value = escaped_sym(lk, sc)?;
            upsert(out, name, value);
        }
    }
    if let Some(settings) = settings {
        for (n, v) in &settings.const_labels {
            let name = lk.sym(n)?;
            let value = lk.sym(v)?;
            upsert(out, name, value);
        }
    }
    sort_by_name(lk.interner(), out);
    Ok(())
}

pub(crate) fn is_service_identity(key: &str) -> bool {
    key == SERVICE_NAME || key == SERVICE_NAMESPACE || key == SERVICE_INSTANCE_ID
}

#[cfg(test)]
pub(crate) fn no_skip(_: &str) -> bool {
    false
}

/// An exact, unambiguous byte encoding of an attribute list (length-prefixed keys, typed
/// values), the key of the data-point label-set memo.
/// Keys for which `skip` is true are left out (they never become labels either).
pub(crate) fn raw_key(attrs: &[KeyValue], skip: impl Fn(&str) -> bool, out: &mut Vec<u8>) {
    out.clear();
    append_raw_key(attrs, skip, out);
}

/// [`raw_key`] appended to `out` (which keeps what it held).
pub(crate) fn append_raw_key(attrs: &[KeyValue], skip: impl Fn(&str) -> bool, out: &mut Vec<u8>) {
    #[inline]
    fn len(n: usize) -> [u8; 8] {
        (n as u64).to_le_bytes()
    }
    for kv in attrs.iter().filter(|kv| !skip(&kv.key)) {
        let key = kv.key.as_bytes();
        let value = kv.value.as_ref().and_then(|v| v.value.as_ref());
        // One reservation per attribute (a string value's bytes included).
        let extra = match value {
            Some(AnyValueKind::StringValue(s)) => 8 + s.len(),
            _ => 8,
        };
        out.reserve(8 + key.len() + 1 + extra);
        out.extend_from_slice(&len(key.len()));
        out.extend_from_slice(key);
        match value {
            None => out.push(0),
            Some(AnyValueKind::StringValue(s)) => {
                out.push(1);
                out.extend_from_slice(&len(s.len()));
                out.extend_from_slice(s.as_bytes());
            }
            Some(AnyValueKind::IntValue(i)) => {
                out.push(2);
                out.extend_from_slice(&i.to_le_bytes());
            }
            Some(AnyValueKind::DoubleValue(d)) => {
                out.push(3);
                out.extend_from_slice(&d.to_bits().to_le_bytes());
            }
            Some(AnyValueKind::BoolValue(b)) => {
                out.push(4);
                out.push(u8::from(*b));
            }
            Some(_) => {
                // Rare composite values: their label text is their identity.
                let mut text = String::new();
                write_value(kv.value.as_ref(), &mut text);
                out.push(5);
                out.extend_from_slice(&len(text.len()));
                out.extend_from_slice(text.as_bytes());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use component::otlp::{kv_f64, kv_i64, kv_str};

    fn key(attrs: &[KeyValue]) -> Vec<u8> {
        let mut out = Vec::new();
        raw_key(attrs, no_skip, &mut out);
        out
    }

    #[test]
    fn raw_keys_tell_types_order_and_boundaries_apart() {
        // The memo is exact only if different attribute lists never share a key.
        let distinct = [
            key(&[kv_str("n", "8")]),
            key(&[kv_i64("n", 8)]),
            key(&[kv_f64("n", 8.0)]),
            key(&[kv_str("n8", "")]),
            key(&[kv_str("n", ""), kv_str("8", "")]),
            key(&[kv_str("a", "1"), kv_str("b", "2")]),
            key(&[kv_str("b", "2"), kv_str("a", "1")]),
            key(&[]),
        ];
        for (i, a) in distinct.iter().enumerate() {
            for b in &distinct[i + 1..] {
                assert_ne!(a, b);
            }
        }
        assert_eq!(key(&[kv_str("n", "8")]), key(&[kv_str("n", "8")]));
    }

    #[test]
    fn job_joins_namespace_and_name() {
        let attrs = [
            kv_str(SERVICE_NAME, "api"),
            kv_str(SERVICE_NAMESPACE, "shop"),
            kv_i64(SERVICE_INSTANCE_ID, 7),
        ];
        assert_eq!(
            job_instance(&attrs),
            (Some("shop/api".to_string()), Some("7".to_string()))
        );
        assert_eq!(job_instance(&[kv_str("host", "h")]), (None, None));
    }

    #[test]
    fn later_lists_override_and_sanitised_collisions_join() {
        let mut i = Interner::default();
        let mut lk = Lookup::Write(&mut i);
        let mut sc = Scratch::default();
        let mut out = Vec::new();
        let dp = [kv_str("a_b", "2"), kv_str("a.b", "1"), kv_str("k", "point")];
        let res = [kv_str("k", "resource")];
        attr_labels(&mut lk, &[&dp, &res], &no_skip, &mut sc, &mut out).unwrap();
        let text: Vec<(String, String)> = out
            .iter()
            .map(|[n, v]| {
                let s = &lk.interner().strings;
                (s.resolve(*n).to_string(), s.resolve(*v).to_string())
            })
            .collect();
        assert_eq!(
            text,
            vec![
                ("a_b".to_string(), "1;2".to_string()),
                ("k".to_string(), "resource".to_string())
            ]
        );
    }
}
