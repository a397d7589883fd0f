//! `collector.metrics.v1` and `metrics.v1`: the request, resource and scope envelopes, the
//! five metric kinds and their data points, exemplars.

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::metrics::v1::exponential_histogram_data_point::Buckets;
use opentelemetry_proto::tonic::metrics::v1::summary_data_point::ValueAtQuantile;
use opentelemetry_proto::tonic::metrics::v1::{
    Exemplar, ExponentialHistogram, ExponentialHistogramDataPoint, Gauge, Histogram,
    HistogramDataPoint, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum, Summary,
    SummaryDataPoint, exemplar, metric, number_data_point,
};
use serde::de::MapAccess;

use super::common::attributes;
use super::{
    JsonMessage, NumberMember, NumberSeed, SpecialF64Seed, hex_bytes, message, messages, scalar,
    uint64, uint64s,
};

fields!(RequestField {
    ResourceMetrics = "resourceMetrics" | "resource_metrics",
});

impl JsonMessage for ExportMetricsServiceRequest {
    type Field = RequestField;
    const EXPECTING: &'static str = "an ExportMetricsServiceRequest object";

    fn field<'de, A: MapAccess<'de>>(
        &mut self,
        f: RequestField,
        map: &mut A,
    ) -> Result<bool, A::Error> {
        match f {
            RequestField::ResourceMetrics => self.resource_metrics = messages(map)?,
        }
        Ok(true)
    }
}

fields!(ResourceMetricsField {
    Resource = "resource",
    ScopeMetrics = "scopeMetrics" | "scope_metrics",
    SchemaUrl = "schemaUrl" | "schema_url",
});

impl JsonMessage for ResourceMetrics {
    type Field = ResourceMetricsField;
    const EXPECTING: &'static str = "a ResourceMetrics object";

    fn field<'de, A: MapAccess<'de>>(
        &mut self,
        f: ResourceMetricsField,
        map: &mut A,
    ) -> Result<bool, A::Error> {
        match f {
            ResourceMetricsField::Resource => self.resource = message(map)?,
            ResourceMetricsField::ScopeMetrics => self.scope_metrics = messages(map)?,
            ResourceMetricsField::SchemaUrl => self.schema_url = scalar(map)?,
        }
        Ok(true)
    }
}

fields!(ScopeMetricsField {
    Scope = "scope",
    Metrics = "metrics",
    SchemaUrl = "schemaUrl" | "schema_url",
});

impl JsonMessage for ScopeMetrics {
    type Field = ScopeMetricsField;
    const EXPECTING: &'static str = "a ScopeMetrics object";

    fn field<'de, A: MapAccess<'de>>(
        &mut self,
        f: ScopeMetricsField,
        map: &mut A,
    ) -> Result<bool, A::Error> {
        match f {
            ScopeMetricsField::Scope => self.scope = message(map)?,
            ScopeMetricsField::Metrics => self.metrics = messages(map)?,
            ScopeMetricsField::SchemaUrl => self.schema_url = scalar(map)?,
        }
        Ok(true)
    }
}

fields!(MetricField {
    Name = "name",
    Description = "description",
    Unit = "unit",
    Metadata = "metadata",
    #[oneof] Gauge = "gauge",
    #[oneof] Sum = "sum",
    #[oneof] Histogram = "histogram",
    #[oneof] ExponentialHistogram = "exponentialHistogram" | "exponential_histogram",
    #[oneof] Summary = "summary",
});

impl JsonMessage for Metric {
    type Field = MetricField;
    const EXPECTING: &'static str = "a Metric object";

    fn field<'de, A: MapAccess<'de>>(
        &mut self,
        f: MetricField,
        map: &mut A,
    ) -> Result<bool, A::Error> {
        use metric::Data;
        // Oneof members are only read while `data` is unset (the caller skips the rest),
        // so `data` is set exactly when this member was not `null`.
        let data = match f {
            MetricField::Name => return set(&mut self.name, scalar(map)?),
            MetricField::Description => return set(&mut self.description, scalar(map)?),
            MetricField::Unit => return set(&mut self.unit, scalar(map)?),
            MetricField::Metadata => return set(&mut self.metadata, attributes(map)?),
            MetricField::Gauge => message(map)?.map(Data::Gauge),
            MetricField::Sum => message(map)?.map(Data::Sum),
            MetricField::Histogram => message(map)?.map(Data::Histogram),
            MetricField::ExponentialHistogram => message(map)?.map(Data::ExponentialHistogram),
            MetricField::Summary => message(map)?.map(Data::Summary),
        };
        self.data = data;
        Ok(self.data.is_some())
    }
}

/// Store a decoded field; it counts as present.
fn set<T, E>(slot: &mut T, value: T) -> Result<bool, E> {
    *slot = value;
    Ok(true)
}

fields!(GaugeField {
    DataPoints = "dataPoints" | "data_points",
});

impl JsonMessage for Gauge {
    type Field = GaugeField;
    const EXPECTING: &'static str = "a Gauge object";

    fn field<'de, A: MapAccess<'de>>(
        &mut self,
        f: GaugeField,
        map: &mut A,
    ) -> Result<bool, A::Error> {
        match f {
            GaugeField::DataPoints => self.data_points = messages(map)?,
        }
        Ok(true)
    }
}

impl JsonMessage for Summary {
    type Field = GaugeField;
    const EXPECTING: &'static str = "a Summary object";

    fn field<'de, A: MapAccess<'de>>(
        &mut self,
        f: GaugeField,
        map: &mut A,
    ) -> Result<bool, A::Error> {
        match f {
            GaugeField::DataPoints => self.data_points = messages(map)?,
        }
        Ok(true)
    }
}

fields!(SumField {
    DataPoints = "dataPoints" | "data_points",
    AggregationTemporality = "aggregationTemporality" | "aggregation_temporality",
    IsMonotonic = "isMonotonic" | "is_monotonic",
});

impl JsonMessage for Sum {
    type Field = SumField;
    const EXPECTING: &'static str = "a Sum object";

    fn field<'de, A: MapAccess<'de>>(
        &mut self,
        f: SumField,
        map: &mut A,
    ) -> Result<bool, A::Error> {
        match f {
            SumField::DataPoints => self.data_points = messages(map)?,
            SumField::AggregationTemporality => self.aggregation_temporality = scalar(map)?,
            SumField::IsMonotonic => self.is_monotonic = scalar(map)?,
        }
        Ok(true)
    }
}

fields!(HistogramField {
    DataPoints = "dataPoints" | "data_points",
    AggregationTemporality = "aggregationTemporality" | "aggregation_temporality",
});

impl JsonMessage for Histogram {
    type Field = HistogramField;
    const EXPECTING: &'static str = "a Histogram object";

    fn field<'de, A: MapAccess<'de>>(
        &mut self,
        f: HistogramField,
        map: &mut A,
    ) -> Result<bool, A::Error> {
        match f {
            HistogramField::DataPoints => self.data_points = messages(map)?,
            HistogramField::AggregationTemporality => self.aggregation_temporality = scalar(map)?,
        }
        Ok(true)
    }
}

impl JsonMessage for ExponentialHistogram {
    type Field = HistogramField;
    const EXPECTING: &'static str = "an ExponentialHistogram object";

    fn field<'de, A: MapAccess<'de>>(
        &mut self,
        f: HistogramField,
        map: &mut A,
    ) -> Result<bool, A::Error> {
        match f {
            HistogramField::DataPoints => self.data_points = messages(map)?,
            HistogramField::AggregationTemporality => self.aggregation_temporality = scalar(map)?,
        }
        Ok(true)
    }
}

fields!(NumberPointField {
    Attributes = "attributes",
    StartTimeUnixNano = "startTimeUnixNano" | "start_time_unix_nano",
    TimeUnixNano = "timeUnixNano" | "time_unix_nano",
    Exemplars = "exemplars",
    Flags = "flags",
    #[oneof] AsDouble = "asDouble" | "as_double",
    #[oneof] AsInt = "asInt" | "as_int",
});

impl JsonMessage for NumberDataPoint {
    type Field = NumberPointField;
    const EXPECTING: &'static str = "a NumberDataPoint object";

    fn field<'de, A: MapAccess<'de>>(
        &mut self,
        f: NumberPointField,
        map: &mut A,
    ) -> Result<bool, A::Error> {
        use number_data_point::Value;
        let member = match f {
            NumberPointField::Attributes => {
                self.attributes = attributes(map)?;
                return Ok(true);
            }
            NumberPointField::StartTimeUnixNano => {
                self.start_time_unix_nano = uint64(map)?;
                return Ok(true);
            }
            NumberPointField::TimeUnixNano => {
                self.time_unix_nano = uint64(map)?;
                return Ok(true);
            }
            NumberPointField::Exemplars => {
                self.exemplars = messages(map)?;
                return Ok(true);
            }
            NumberPointField::Flags => {
                self.flags = scalar(map)?;
                return Ok(true);
            }
            NumberPointField::AsDouble => map.next_value_seed(NumberSeed::Double)?,
            NumberPointField::AsInt => map.next_value_seed(NumberSeed::Int)?,
        };
        self.value = match member {
            NumberMember::Null => return Ok(false),
            NumberMember::Invalid => None,
            NumberMember::Double(d) => Some(Value::AsDouble(d)),
            NumberMember::Int(i) => Some(Value::AsInt(i)),
        };
        Ok(true)
    }
}

fields!(HistogramPointField {
    Attributes = "attributes",
    StartTimeUnixNano = "startTimeUnixNano" | "start_time_unix_nano",
    TimeUnixNano = "timeUnixNano" | "time_unix_nano",
    Count = "count",
    Sum = "sum",
    BucketCounts = "bucketCounts" | "bucket_counts",
    ExplicitBounds = "explicitBounds" | "explicit_bounds",
    Exemplars = "exemplars",
    Flags = "flags",
    Min = "min",
    Max = "max",
});

impl JsonMessage for HistogramDataPoint {
    type Field = HistogramPointField;
    const EXPECTING: &'static str = "a HistogramDataPoint object";

    fn field<'de, A: MapAccess<'de>>(
        &mut self,
        f: HistogramPointField,
        map: &mut A,
    ) -> Result<bool, A::Error> {
        match f {
            HistogramPointField::Attributes => self.attributes = attributes(map)?,
            HistogramPointField::StartTimeUnixNano => self.start_time_unix_nano = uint64(map)?,
            HistogramPointField::TimeUnixNano => self.time_unix_nano = uint64(map)?,
            HistogramPointField::Count => self.count = uint64(map)?,
            HistogramPointField::Sum => self.sum = map.next_value()?,
            HistogramPointField::BucketCounts => self.bucket_counts = uint64s(map)?,
            HistogramPointField::ExplicitBounds => self.explicit_bounds = scalar(map)?,
            HistogramPointField::Exemplars => self.exemplars = messages(map)?,
            HistogramPointField::Flags => self.flags = scalar(map)?,
            HistogramPointField::Min => self.min = map.next_value()?,
            HistogramPointField::Max => self.max = map.next_value()?,
        }
        Ok(true)
    }
}

fields!(ExpHistogramPointField {
    Attributes = "attributes",
    StartTimeUnixNano = "startTimeUnixNano" | "start_time_unix_nano",
    TimeUnixNano = "timeUnixNano" | "time_unix_nano",
    Count = "count",
    Sum = "sum",
    Scale = "scale",
    ZeroCount = "zeroCount" | "zero_count",
    Positive = "positive",
    Negative = "negative",
    Flags = "flags",
    Exemplars = "exemplars",
    Min = "min",
    Max = "max",
    ZeroThreshold = "zeroThreshold" | "zero_threshold",
});

impl JsonMessage for ExponentialHistogramDataPoint {
    type Field = ExpHistogramPointField;
    const EXPECTING: &'static str = "an ExponentialHistogramDataPoint object";

    fn field<'de, A: MapAccess<'de>>(
        &mut self,
        f: ExpHistogramPointField,
        map: &mut A,
    ) -> Result<bool, A::Error> {
        use ExpHistogramPointField as F;
        match f {
            F::Attributes => self.attributes = attributes(map)?,
            F::StartTimeUnixNano => self.start_time_unix_nano = uint64(map)?,
            F::TimeUnixNano => self.time_unix_nano = uint64(map)?,
            F::Count => self.count = uint64(map)?,
            F::Sum => self.sum = map.next_value()?,
            F::Scale => self.scale = scalar(map)?,
            F::ZeroCount => self.zero_count = uint64(map)?,
            F::Positive => self.positive = message(map)?,
            F::Negative => self.negative = message(map)?,
            F::Flags => self.flags = scalar(map)?,
            F::Exemplars => self.exemplars = messages(map)?,
            F::Min => self.min = map.next_value()?,
            F::Max => self.max = map.next_value()?,
            F::ZeroThreshold => self.zero_threshold = scalar(map)?,
        }
        Ok(true)
    }
}

fields!(BucketsField {
    Offset = "offset",
    BucketCounts = "bucketCounts" | "bucket_counts",
});

impl JsonMessage for Buckets {
    type Field = BucketsField;
    const EXPECTING: &'static str = "a Buckets object";

    fn field<'de, A: MapAccess<'de>>(
        &mut self,
        f: BucketsField,
        map: &mut A,
    ) -> Result<bool, A::Error> {
        match f {
            BucketsField::Offset => self.offset = scalar(map)?,
            BucketsField::BucketCounts => self.bucket_counts = uint64s(map)?,
        }
        Ok(true)
    }
}

fields!(SummaryPointField {
    Attributes = "attributes",
    StartTimeUnixNano = "startTimeUnixNano" | "start_time_unix_nano",
    TimeUnixNano = "timeUnixNano" | "time_unix_nano",
    Count = "count",
    Sum = "sum",
    QuantileValues = "quantileValues" | "quantile_values",
    Flags = "flags",
});

impl JsonMessage for SummaryDataPoint {
    type Field = SummaryPointField;
    const EXPECTING: &'static str = "a SummaryDataPoint object";

    fn field<'de, A: MapAccess<'de>>(
        &mut self,
        f: SummaryPointField,
        map: &mut A,
    ) -> Result<bool, A::Error> {
        match f {
            SummaryPointField::Attributes => self.attributes = attributes(map)?,
            SummaryPointField::StartTimeUnixNano => self.start_time_unix_nano = uint64(map)?,
            SummaryPointField::TimeUnixNano => self.time_unix_nano = uint64(map)?,
            SummaryPointField::Count => self.count = uint64(map)?,
            SummaryPointField::Sum => self.sum = scalar(map)?,
            SummaryPointField::QuantileValues => self.quantile_values = messages(map)?,
            SummaryPointField::Flags => self.flags = scalar(map)?,
        }
        Ok(true)
    }
}

fields!(QuantileField {
    Quantile = "quantile",
    Value = "value",
});

impl JsonMessage for ValueAtQuantile {
    type Field = QuantileField;
    const EXPECTING: &'static str = "a ValueAtQuantile object";

    fn field<'de, A: MapAccess<'de>>(
        &mut self,
        f: QuantileField,
        map: &mut A,
    ) -> Result<bool, A::Error> {
        let v = map
            .next_value_seed(super::NullOr(SpecialF64Seed))?
            .unwrap_or_default();
        match f {
            QuantileField::Quantile => self.quantile = v,
            QuantileField::Value => self.value = v,
        }
        Ok(true)
    }
}

fields!(ExemplarField {
    FilteredAttributes = "filteredAttributes" | "filtered_attributes",
    TimeUnixNano = "timeUnixNano" | "time_unix_nano",
    SpanId = "spanId" | "span_id",
    TraceId = "traceId" | "trace_id",
    #[oneof] AsDouble = "asDouble" | "as_double",
    #[oneof] AsInt = "asInt" | "as_int",
});

impl JsonMessage for Exemplar {
    type Field = ExemplarField;
    const EXPECTING: &'static str = "an Exemplar object";

    fn field<'de, A: MapAccess<'de>>(
        &mut self,
        f: ExemplarField,
        map: &mut A,
    ) -> Result<bool, A::Error> {
        use exemplar::Value;
        let member = match f {
            ExemplarField::FilteredAttributes => {
                self.filtered_attributes = attributes(map)?;
                return Ok(true);
            }
            ExemplarField::TimeUnixNano => {
                self.time_unix_nano = uint64(map)?;
                return Ok(true);
            }
            ExemplarField::SpanId => {
                self.span_id = hex_bytes(map)?;
                return Ok(true);
            }
            ExemplarField::TraceId => {
                self.trace_id = hex_bytes(map)?;
                return Ok(true);
            }
            ExemplarField::AsDouble => map.next_value_seed(NumberSeed::Double)?,
            ExemplarField::AsInt => map.next_value_seed(NumberSeed::Int)?,
        };
        self.value = match member {
            NumberMember::Null => return Ok(false),
            NumberMember::Invalid => None,
            NumberMember::Double(d) => Some(Value::AsDouble(d)),
            NumberMember::Int(i) => Some(Value::AsInt(i)),
        };
        Ok(true)
    }
}
