//! `common.v1` and `resource.v1`: attributes (`KeyValue`, `AnyValue` and its arrays and
//! key-value lists, depth-limited), `InstrumentationScope`, `Resource`, `EntityRef`.

use std::fmt;

use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::{
    AnyValue, ArrayValue, EntityRef, InstrumentationScope, KeyValue, KeyValueList,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, Visitor};

use super::{
    Base64Seed, I64Seed, JsonMessage, KeySeed, MAX_ANY_VALUE_DEPTH, NullOr, Seen, messages,
    repeated, scalar, skip,
};

/// A repeated `KeyValue` field at the top of an attribute tree.
pub(super) fn attributes<'de, A: MapAccess<'de>>(map: &mut A) -> Result<Vec<KeyValue>, A::Error> {
    repeated(map, KeyValueSeed { depth: 0 })
}

fields!(KeyValueField {
    Key = "key",
    Value = "value",
    KeyStrindex = "keyStrindex" | "key_strindex",
});

/// A `KeyValue` whose value is an `AnyValue` at level `depth + 1`.
#[derive(Clone, Copy)]
struct KeyValueSeed {
    depth: usize,
}

impl<'de> DeserializeSeed<'de> for KeyValueSeed {
    type Value = KeyValue;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<KeyValue, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for KeyValueSeed {
    type Value = KeyValue;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a KeyValue object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<KeyValue, A::Error> {
        let mut kv = KeyValue::default();
        let mut seen = Seen::default();
        while let Some(key) = map.next_key_seed(KeySeed::<KeyValueField>::new())? {
            let Some(f) = key else {
                skip(&mut map)?;
                continue;
            };
            seen.mark::<_, A::Error>(f)?;
            match f {
                KeyValueField::Key => kv.key = scalar(&mut map)?,
                KeyValueField::Value => {
                    kv.value = map.next_value_seed(NullOr(AnyValueSeed {
                        depth: self.depth + 1,
                    }))?;
                }
                KeyValueField::KeyStrindex => kv.key_strindex = scalar(&mut map)?,
            }
        }
        Ok(kv)
    }
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

/// An `AnyValue` at nesting level `depth` (1 = an attribute's value).
#[derive(Clone, Copy)]
struct AnyValueSeed {
    depth: usize,
}

impl<'de> DeserializeSeed<'de> for AnyValueSeed {
    type Value = AnyValue;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<AnyValue, D::Error> {
        if self.depth > MAX_ANY_VALUE_DEPTH {
            return Err(de::Error::custom(format_args!(
                "attribute value nested deeper than {MAX_ANY_VALUE_DEPTH} levels of arrayValue/kvlistValue"
            )));
        }
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for AnyValueSeed {
    type Value = AnyValue;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object for AnyValue")
    }

    /// Every member is read (and must be valid); the last one that is not `null` wins.
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<AnyValue, A::Error> {
        let mut value = None;
        while let Some(key) = map.next_key_seed(KeySeed::<AnyValueField>::new())? {
            let member = match key {
                None => {
                    skip(&mut map)?;
                    continue;
                }
                Some(AnyValueField::StringValue) => {
                    map.next_value::<Option<String>>()?.map(Value::StringValue)
                }
                Some(AnyValueField::BoolValue) => {
                    map.next_value::<Option<bool>>()?.map(Value::BoolValue)
                }
                Some(AnyValueField::IntValue) => {
                    map.next_value_seed(NullOr(I64Seed))?.map(Value::IntValue)
                }
                Some(AnyValueField::DoubleValue) => {
                    map.next_value::<Option<f64>>()?.map(Value::DoubleValue)
                }
                Some(AnyValueField::ArrayValue) => map
                    .next_value_seed(NullOr(ArrayValueSeed { depth: self.depth }))?
                    .map(Value::ArrayValue),
                Some(AnyValueField::KvlistValue) => map
                    .next_value_seed(NullOr(KeyValueListSeed { depth: self.depth }))?
                    .map(Value::KvlistValue),
                Some(AnyValueField::BytesValue) => map
                    .next_value_seed(NullOr(Base64Seed))?
                    .map(Value::BytesValue),
            };
            if member.is_some() {
                value = member;
            }
        }
        Ok(AnyValue { value })
    }
}

fields!(ValuesField { Values = "values" });

/// The `arrayValue` of an `AnyValue` at level `depth`.
#[derive(Clone, Copy)]
struct ArrayValueSeed {
    depth: usize,
}

impl<'de> DeserializeSeed<'de> for ArrayValueSeed {
    type Value = ArrayValue;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<ArrayValue, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for ArrayValueSeed {
    type Value = ArrayValue;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an ArrayValue object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ArrayValue, A::Error> {
        let mut out = ArrayValue::default();
        let mut seen = Seen::default();
        while let Some(key) = map.next_key_seed(KeySeed::<ValuesField>::new())? {
            match key {
                None => skip(&mut map)?,
                Some(f) => {
                    seen.mark::<_, A::Error>(f)?;
                    out.values = repeated(
                        &mut map,
                        AnyValueSeed {
                            depth: self.depth + 1,
                        },
                    )?;
                }
            }
        }
        Ok(out)
    }
}

/// The `kvlistValue` of an `AnyValue` at level `depth`.
#[derive(Clone, Copy)]
struct KeyValueListSeed {
    depth: usize,
}

impl<'de> DeserializeSeed<'de> for KeyValueListSeed {
    type Value = KeyValueList;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<KeyValueList, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for KeyValueListSeed {
    type Value = KeyValueList;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a KeyValueList object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<KeyValueList, A::Error> {
        let mut out = KeyValueList::default();
        let mut seen = Seen::default();
        while let Some(key) = map.next_key_seed(KeySeed::<ValuesField>::new())? {
            match key {
                None => skip(&mut map)?,
                Some(f) => {
                    seen.mark::<_, A::Error>(f)?;
                    out.values = repeated(&mut map, KeyValueSeed { depth: self.depth })?;
                }
            }
        }
        Ok(out)
    }
}

fields!(ResourceField {
    Attributes = "attributes",
    DroppedAttributesCount = "droppedAttributesCount" | "dropped_attributes_count",
    EntityRefs = "entityRefs" | "entity_refs",
});

impl JsonMessage for Resource {
    type Field = ResourceField;
    const EXPECTING: &'static str = "a Resource object";

    fn field<'de, A: MapAccess<'de>>(
        &mut self,
        f: ResourceField,
        map: &mut A,
    ) -> Result<bool, A::Error> {
        match f {
            ResourceField::Attributes => self.attributes = attributes(map)?,
            ResourceField::DroppedAttributesCount => self.dropped_attributes_count = scalar(map)?,
            ResourceField::EntityRefs => self.entity_refs = messages(map)?,
        }
        Ok(true)
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

    fn field<'de, A: MapAccess<'de>>(
        &mut self,
        f: EntityRefField,
        map: &mut A,
    ) -> Result<bool, A::Error> {
        match f {
            EntityRefField::SchemaUrl => self.schema_url = scalar(map)?,
            EntityRefField::Type => self.r#type = scalar(map)?,
            EntityRefField::IdKeys => self.id_keys = scalar(map)?,
            EntityRefField::DescriptionKeys => self.description_keys = scalar(map)?,
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

    fn field<'de, A: MapAccess<'de>>(
        &mut self,
        f: ScopeField,
        map: &mut A,
    ) -> Result<bool, A::Error> {
        match f {
            ScopeField::Name => self.name = scalar(map)?,
            ScopeField::Version => self.version = scalar(map)?,
            ScopeField::Attributes => self.attributes = attributes(map)?,
            ScopeField::DroppedAttributesCount => self.dropped_attributes_count = scalar(map)?,
        }
        Ok(true)
    }
}
