//! `common.v1` and `resource.v1`: attributes (`KeyValue`, `AnyValue` and its arrays and
//! key-value lists, depth-limited), `InstrumentationScope`, `Resource`, `EntityRef`.

use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::{
    AnyValue, ArrayValue, EntityRef, InstrumentationScope, KeyValue, KeyValueList,
};
use opentelemetry_proto::tonic::resource::v1::Resource;

use super::reader::tape::OpKind;
use super::reader::{ListKind, Peek, Reader, Result};
use super::{
    FieldKey, JsonMessage, MAX_ANY_VALUE_DEPTH, MAX_INITIAL_CAPACITY, Seen, base64_value,
    begin_repeated, int64, messages, opt_bool, opt_double, opt_string, repeated, set_string,
    sint32, string, strings, uint32, wrote,
};

/// The repeated `KeyValue` field `attributes` of a message whose prediction slot is
/// `slot` (the top of an attribute tree). The list is allocated at the size of the last
/// one in that slot (at most [`MAX_INITIAL_CAPACITY`]).
pub(super) fn attributes(r: &mut Reader<'_>, slot: usize) -> Result<Vec<KeyValue>> {
    let mut out = Vec::new();
    let skippable = r.fresh();
    let read = attributes_into(r, slot, &mut out);
    r.end_fresh(skippable);
    read?;
    Ok(out)
}

/// [`attributes`] into `out`, which may hold an earlier list: a plain string attribute
/// (the common case) is written into the key and string value already there; any other
/// replaces its element; extra elements are dropped.
pub(super) fn attributes_into(
    r: &mut Reader<'_>,
    slot: usize,
    out: &mut Vec<KeyValue>,
) -> Result<()> {
    let replayed = if r.replaying() {
        Some(r.replay_open(OpKind::List)?)
    } else if begin_repeated(r)? {
        None
    } else {
        out.clear();
        return Ok(());
    };
    let list = r.record_open(OpKind::List);
    if out.capacity() == 0 {
        *out = r.pool.kvs();
        out.reserve(
            r.length_hint(slot, ListKind::Attributes)
                .min(MAX_INITIAL_CAPACITY),
        );
    }
    let mut n = 0;
    match replayed {
        Some((len, list)) => {
            while n < len {
                // An attribute as recorded is in `out` already.
                match r.replay_skip() {
                    Some(op) if op.kind() == OpKind::Element && n < out.len() => {}
                    Some(_) => return Err(r.miss()),
                    None => {
                        let (i, op) = r.replay_value()?;
                        if op.kind() != OpKind::Element {
                            return Err(r.miss());
                        }
                        let mode = r.suspend();
                        let read = attribute_at(r, out, n);
                        r.resume(mode);
                        read?;
                        r.replay_value_end(i);
                    }
                }
                n += 1;
            }
            r.replay_close(list);
        }
        None => {
            let mut first = true;
            while r.next_element(&mut first)? {
                let op = r.record_element();
                attribute_at(r, out, n)?;
                r.record_value_end(op, true);
                n += 1;
            }
        }
    }
    out.truncate(n);
    r.set_length_hint(slot, ListKind::Attributes, n);
    r.record_close(list, n);
    Ok(())
}

/// Attribute `n` of a list: a plain string attribute (the common case) is written into
/// the key and string value `out` holds there; any other replaces its element or is
/// appended.
#[inline(always)]
fn attribute_at(r: &mut Reader<'_>, out: &mut Vec<KeyValue>, n: usize) -> Result<()> {
    match (r.plain_string_attribute(), out.get_mut(n)) {
        (Some((key, value)), Some(kv)) => {
            set_string(&mut r.pool, &mut kv.key, key);
            match &mut kv.value {
                Some(AnyValue {
                    value: Some(Value::StringValue(s)),
                }) => set_string(&mut r.pool, s, value),
                other => {
                    *other = Some(AnyValue {
                        value: Some(Value::StringValue(r.pool.string_from(value))),
                    });
                }
            }
            kv.key_strindex = 0;
        }
        (Some((key, value)), None) => out.push(KeyValue {
            key: r.pool.string_from(key),
            value: Some(AnyValue {
                value: Some(Value::StringValue(r.pool.string_from(value))),
            }),
            key_strindex: 0,
        }),
        (None, Some(kv)) => *kv = key_value(r, 0)?,
        (None, None) => out.push(key_value(r, 0)?),
    }
    Ok(())
}

fields!(KeyValueField {
    Key = "key",
    Value = "value",
    KeyStrindex = "keyStrindex" | "key_strindex",
});

/// Open an object that must be next, or fail with `invalid type`.
fn object(r: &mut Reader<'_>, expecting: &str) -> Result<()> {
    if r.peek() != Peek::Object {
        return Err(r.invalid_type(expecting));
    }
    r.begin_object()
}

/// A `KeyValue` whose value is an `AnyValue` at level `depth + 1`.
fn key_value(r: &mut Reader<'_>, depth: usize) -> Result<KeyValue> {
    object(r, "a KeyValue object")?;
    let mut kv = KeyValue::default();
    let mut seen = Seen::default();
    let mut first = true;
    while let Some(key) = r.next_key(&mut first)? {
        let Some(f) = KeyValueField::lookup(&key) else {
            r.skip_value()?;
            continue;
        };
        seen.mark(f, r)?;
        match f {
            KeyValueField::Key => kv.key = string(r)?,
            KeyValueField::Value => {
                kv.value = if r.null()? {
                    None
                } else {
                    Some(any_value(r, depth + 1)?)
                };
            }
            KeyValueField::KeyStrindex => kv.key_strindex = sint32(r)?,
        }
    }
    Ok(kv)
}

fields!(AnyValueField {
    StringValue = "stringValue" | "string_value",
    BoolValue = "boolValue" | "bool_value",
    IntValue = "intValue" | "int_value",
    DoubleValue = "doubleValue" | "double_value",
    ArrayValue = "arrayValue" | "array_value",
    KvlistValue = "kvlistValue" | "kvlist_value",
    BytesValue = "bytesValue" | "bytes_value",
});

/// An `AnyValue` (not `null`) at nesting level `depth` (1 = an attribute's value). Every
/// member is read (and must be valid); the last one that is not `null` wins.
fn any_value(r: &mut Reader<'_>, depth: usize) -> Result<AnyValue> {
    if depth > MAX_ANY_VALUE_DEPTH {
        return Err(r.error(format_args!(
            "attribute value nested deeper than {MAX_ANY_VALUE_DEPTH} levels of arrayValue/kvlistValue"
        )));
    }
    object(r, "a JSON object for AnyValue")?;
    let mut value = None;
    let mut first = true;
    while let Some(key) = r.next_key(&mut first)? {
        let member = match AnyValueField::lookup(&key) {
            None => {
                r.skip_value()?;
                continue;
            }
            Some(AnyValueField::StringValue) => opt_string(r)?.map(Value::StringValue),
            Some(AnyValueField::BoolValue) => opt_bool(r)?.map(Value::BoolValue),
            Some(AnyValueField::IntValue) => int64(r)?.map(Value::IntValue),
            Some(AnyValueField::DoubleValue) => opt_double(r)?.map(Value::DoubleValue),
            Some(AnyValueField::ArrayValue) => {
                values_list(r, "an ArrayValue object", |r| any_value(r, depth + 1))?
                    .map(|values| Value::ArrayValue(ArrayValue { values }))
            }
            Some(AnyValueField::KvlistValue) => {
                values_list(r, "a KeyValueList object", |r| key_value(r, depth))?
                    .map(|values| Value::KvlistValue(KeyValueList { values }))
            }
            Some(AnyValueField::BytesValue) => base64_value(r)?.map(Value::BytesValue),
        };
        if member.is_some() {
            value = member;
        }
    }
    Ok(AnyValue { value })
}

fields!(ValuesField { Values = "values" });

/// The `{"values":[...]}` object of an `arrayValue` or `kvlistValue`; `None` for `null`.
fn values_list<T>(
    r: &mut Reader<'_>,
    expecting: &str,
    mut each: impl FnMut(&mut Reader<'_>) -> Result<T>,
) -> Result<Option<Vec<T>>> {
    if r.null()? {
        return Ok(None);
    }
    object(r, expecting)?;
    let mut values = Vec::new();
    let mut seen = Seen::default();
    let mut first = true;
    while let Some(key) = r.next_key(&mut first)? {
        match ValuesField::lookup(&key) {
            None => r.skip_value()?,
            Some(f) => {
                seen.mark(f, r)?;
                values = repeated(r, &mut each)?;
            }
        }
    }
    Ok(Some(values))
}

fields!(ResourceField {
    Attributes = "attributes",
    DroppedAttributesCount = "droppedAttributesCount" | "dropped_attributes_count",
    EntityRefs = "entityRefs" | "entity_refs",
});

impl JsonMessage for Resource {
    type Field = ResourceField;
    const EXPECTING: &'static str = "a Resource object";
    const SLOT: usize = 15;

    fn field(&mut self, f: ResourceField, r: &mut Reader<'_>) -> Result<bool> {
        match f {
            ResourceField::Attributes => attributes_into(r, Self::SLOT, &mut self.attributes)?,
            ResourceField::DroppedAttributesCount => self.dropped_attributes_count = uint32(r)?,
            ResourceField::EntityRefs => self.entity_refs = messages(r)?,
        }
        Ok(true)
    }

    const REUSES: bool = true;

    fn reset_unwritten(&mut self, written: u32, _oneof_set: bool) {
        if !wrote(written, ResourceField::Attributes) {
            self.attributes.clear();
        }
        if !wrote(written, ResourceField::DroppedAttributesCount) {
            self.dropped_attributes_count = 0;
        }
        if !wrote(written, ResourceField::EntityRefs) {
            self.entity_refs.clear();
        }
    }
}

fields!(EntityRefField {
    SchemaUrl = "schemaUrl" | "schema_url",
    Type = "type",
    IdKeys = "idKeys" | "id_keys",
    DescriptionKeys = "descriptionKeys" | "description_keys",
});

impl JsonMessage for EntityRef {
    type Field = EntityRefField;
    const EXPECTING: &'static str = "an EntityRef object";

    fn field(&mut self, f: EntityRefField, r: &mut Reader<'_>) -> Result<bool> {
        match f {
            EntityRefField::SchemaUrl => self.schema_url = string(r)?,
            EntityRefField::Type => self.r#type = string(r)?,
            EntityRefField::IdKeys => self.id_keys = strings(r)?,
            EntityRefField::DescriptionKeys => self.description_keys = strings(r)?,
        }
        Ok(true)
    }
}

fields!(ScopeField {
    Name = "name",
    Version = "version",
    Attributes = "attributes",
    DroppedAttributesCount = "droppedAttributesCount" | "dropped_attributes_count",
});

impl JsonMessage for InstrumentationScope {
    type Field = ScopeField;
    const EXPECTING: &'static str = "an InstrumentationScope object";
    const SLOT: usize = 14;

    fn field(&mut self, f: ScopeField, r: &mut Reader<'_>) -> Result<bool> {
        match f {
            ScopeField::Name => self.name = string(r)?,
            ScopeField::Version => self.version = string(r)?,
            ScopeField::Attributes => self.attributes = attributes(r, Self::SLOT)?,
            ScopeField::DroppedAttributesCount => self.dropped_attributes_count = uint32(r)?,
        }
        Ok(true)
    }
}
