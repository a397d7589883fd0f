//! `collector.metrics.v1` and `metrics.v1`: the request, resource and scope envelopes, the
//! five metric kinds and their data points, exemplars.

use component::recycle::Recycler;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::metrics::v1::exponential_histogram_data_point::Buckets;
use opentelemetry_proto::tonic::metrics::v1::summary_data_point::ValueAtQuantile;
use opentelemetry_proto::tonic::metrics::v1::{
    Exemplar, ExponentialHistogram, ExponentialHistogramDataPoint, Gauge, Histogram,
    HistogramDataPoint, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum, Summary,
    SummaryDataPoint, exemplar, metric, number_data_point,
};

use super::common::{attributes, attributes_into};
use super::reader::{Reader, Result};
use super::{
    JsonMessage, NumberKind, NumberMember, boolean, double, doubles, hex_bytes, message,
    message_into, messages, messages_into, opt_double, read_message, read_message_reusing, sint32,
    special_f64, string_into, uint32, uint64, uint64s, wrote,
};

fields!(RequestField {
    ResourceMetrics = "resourceMetrics" | "resource_metrics",
});

impl JsonMessage for ExportMetricsServiceRequest {
    type Field = RequestField;
    const EXPECTING: &'static str = "an ExportMetricsServiceRequest object";

    fn field(&mut self, f: RequestField, r: &mut Reader<'_>) -> Result<bool> {
        match f {
            RequestField::ResourceMetrics => messages_into(r, &mut self.resource_metrics)?,
        }
        Ok(true)
    }

    const REUSES: bool = true;

    fn reset_unwritten(&mut self, written: u32, _oneof_set: bool) {
        if !wrote(written, RequestField::ResourceMetrics) {
            self.resource_metrics.clear();
        }
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
    const SLOT: usize = 1;

    #[inline(always)]
    fn list(pool: &mut Recycler) -> Vec<Self> {
        pool.resources()
    }

    fn field(&mut self, f: ResourceMetricsField, r: &mut Reader<'_>) -> Result<bool> {
        match f {
            ResourceMetricsField::Resource => message_into(r, &mut self.resource)?,
            ResourceMetricsField::ScopeMetrics => messages_into(r, &mut self.scope_metrics)?,
            ResourceMetricsField::SchemaUrl => string_into(r, &mut self.schema_url)?,
        }
        Ok(true)
    }

    const REUSES: bool = true;

    fn reset_unwritten(&mut self, written: u32, _oneof_set: bool) {
        if !wrote(written, ResourceMetricsField::Resource) {
            self.resource = None;
        }
        if !wrote(written, ResourceMetricsField::ScopeMetrics) {
            self.scope_metrics.clear();
        }
        if !wrote(written, ResourceMetricsField::SchemaUrl) {
            self.schema_url.clear();
        }
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
    const SLOT: usize = 2;

    #[inline(always)]
    fn list(pool: &mut Recycler) -> Vec<Self> {
        pool.scopes()
    }

    fn field(&mut self, f: ScopeMetricsField, r: &mut Reader<'_>) -> Result<bool> {
        match f {
            ScopeMetricsField::Scope => message_into(r, &mut self.scope)?,
            ScopeMetricsField::Metrics => messages_into(r, &mut self.metrics)?,
            ScopeMetricsField::SchemaUrl => string_into(r, &mut self.schema_url)?,
        }
        Ok(true)
    }

    const REUSES: bool = true;

    fn reset_unwritten(&mut self, written: u32, _oneof_set: bool) {
        if !wrote(written, ScopeMetricsField::Scope) {
            self.scope = None;
        }
        if !wrote(written, ScopeMetricsField::Metrics) {
            self.metrics.clear();
        }
        if !wrote(written, ScopeMetricsField::SchemaUrl) {
            self.schema_url.clear();
        }
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
    const SLOT: usize = 3;
    // A metric of the agents' pushes takes 150-300 bytes.
    const BYTES_PER_ELEMENT: usize = 128;

    #[inline(always)]
    fn list(pool: &mut Recycler) -> Vec<Self> {
        pool.metrics()
    }

    fn field(&mut self, f: MetricField, r: &mut Reader<'_>) -> Result<bool> {
        use metric::Data;
        // Oneof members are only read while `data` is unset (the caller skips the rest),
        // so `data` is set exactly when this member was not `null`.
        let data = match f {
            MetricField::Name => return string_into(r, &mut self.name).map(|()| true),
            MetricField::Description => {
                return string_into(r, &mut self.description).map(|()| true);
            }
            MetricField::Unit => return string_into(r, &mut self.unit).map(|()| true),
            MetricField::Metadata => {
                return attributes_into(r, Self::SLOT, &mut self.metadata).map(|()| true);
            }
            // Gauges and sums are read into the ones a used metric holds.
            MetricField::Gauge if !r.null()? => {
                match &mut self.data {
                    Some(Data::Gauge(g)) => read_message_reusing(r, g)?,
                    data => *data = Some(Data::Gauge(read_message(r)?)),
                }
                return Ok(true);
            }
            MetricField::Sum if !r.null()? => {
                match &mut self.data {
                    Some(Data::Sum(s)) => read_message_reusing(r, s)?,
                    data => *data = Some(Data::Sum(read_message(r)?)),
                }
                return Ok(true);
            }
            MetricField::Gauge | MetricField::Sum => None,
            MetricField::Histogram => message(r)?.map(Data::Histogram),
            MetricField::ExponentialHistogram => message(r)?.map(Data::ExponentialHistogram),
            MetricField::Summary => message(r)?.map(Data::Summary),
        };
        self.data = data;
        Ok(self.data.is_some())
    }

    const REUSES: bool = true;

    fn reset_unwritten(&mut self, written: u32, oneof_set: bool) {
        if !wrote(written, MetricField::Name) {
            self.name.clear();
        }
        if !wrote(written, MetricField::Description) {
            self.description.clear();
        }
        if !wrote(written, MetricField::Unit) {
            self.unit.clear();
        }
        if !wrote(written, MetricField::Metadata) {
            self.metadata.clear();
        }
        if !oneof_set {
            self.data = None;
        }
    }
}

fields!(GaugeField {
    DataPoints = "dataPoints" | "data_points",
});

impl JsonMessage for Gauge {
    type Field = GaugeField;
    const EXPECTING: &'static str = "a Gauge object";
    const SLOT: usize = 4;

    fn field(&mut self, f: GaugeField, r: &mut Reader<'_>) -> Result<bool> {
        match f {
            GaugeField::DataPoints => messages_into(r, &mut self.data_points)?,
        }
        Ok(true)
    }

    const REUSES: bool = true;

    fn reset_unwritten(&mut self, written: u32, _oneof_set: bool) {
        if !wrote(written, GaugeField::DataPoints) {
            self.data_points.clear();
        }
    }
}

impl JsonMessage for Summary {
    type Field = GaugeField;
    const EXPECTING: &'static str = "a Summary object";
    const SLOT: usize = 8;

    fn field(&mut self, f: GaugeField, r: &mut Reader<'_>) -> Result<bool> {
        match f {
            GaugeField::DataPoints => self.data_points = messages(r)?,
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
    const SLOT: usize = 5;

    fn field(&mut self, f: SumField, r: &mut Reader<'_>) -> Result<bool> {
        match f {
            SumField::DataPoints => messages_into(r, &mut self.data_points)?,
            SumField::AggregationTemporality => self.aggregation_temporality = sint32(r)?,
            SumField::IsMonotonic => self.is_monotonic = boolean(r)?,
        }
        Ok(true)
    }

    const REUSES: bool = true;

    fn reset_unwritten(&mut self, written: u32, _oneof_set: bool) {
        if !wrote(written, SumField::DataPoints) {
            self.data_points.clear();
        }
        if !wrote(written, SumField::AggregationTemporality) {
            self.aggregation_temporality = 0;
        }
        if !wrote(written, SumField::IsMonotonic) {
            self.is_monotonic = false;
        }
    }
}

fields!(HistogramField {
    DataPoints = "dataPoints" | "data_points",
    AggregationTemporality = "aggregationTemporality" | "aggregation_temporality",
});

impl JsonMessage for Histogram {
    type Field = HistogramField;
    const EXPECTING: &'static str = "a Histogram object";
    const SLOT: usize = 6;

    fn field(&mut self, f: HistogramField, r: &mut Reader<'_>) -> Result<bool> {
        match f {
            HistogramField::DataPoints => self.data_points = messages(r)?,
            HistogramField::AggregationTemporality => self.aggregation_temporality = sint32(r)?,
        }
        Ok(true)
    }
}

impl JsonMessage for ExponentialHistogram {
    type Field = HistogramField;
    const EXPECTING: &'static str = "an ExponentialHistogram object";
    const SLOT: usize = 7;

    fn field(&mut self, f: HistogramField, r: &mut Reader<'_>) -> Result<bool> {
        match f {
            HistogramField::DataPoints => self.data_points = messages(r)?,
            HistogramField::AggregationTemporality => self.aggregation_temporality = sint32(r)?,
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
    const SLOT: usize = 9;

    #[inline(always)]
    fn list(pool: &mut Recycler) -> Vec<Self> {
        pool.points()
    }

    fn field(&mut self, f: NumberPointField, r: &mut Reader<'_>) -> Result<bool> {
        use number_data_point::Value;
        let member = match f {
            NumberPointField::Attributes => {
                attributes_into(r, Self::SLOT, &mut self.attributes)?;
                return Ok(true);
            }
            NumberPointField::StartTimeUnixNano => {
                self.start_time_unix_nano = uint64(r)?;
                return Ok(true);
            }
            NumberPointField::TimeUnixNano => {
                self.time_unix_nano = uint64(r)?;
                return Ok(true);
            }
            NumberPointField::Exemplars => {
                self.exemplars = messages(r)?;
                return Ok(true);
            }
            NumberPointField::Flags => {
                self.flags = uint32(r)?;
                return Ok(true);
            }
            NumberPointField::AsDouble => NumberKind::Double.read(r)?,
            NumberPointField::AsInt => NumberKind::Int.read(r)?,
        };
        self.value = match member {
            NumberMember::Null => return Ok(false),
            NumberMember::Invalid => None,
            NumberMember::Double(d) => Some(Value::AsDouble(d)),
            NumberMember::Int(i) => Some(Value::AsInt(i)),
        };
        Ok(true)
    }

    const REUSES: bool = true;

    fn reset_unwritten(&mut self, written: u32, oneof_set: bool) {
        if !wrote(written, NumberPointField::Attributes) {
            self.attributes.clear();
        }
        if !wrote(written, NumberPointField::StartTimeUnixNano) {
            self.start_time_unix_nano = 0;
        }
        if !wrote(written, NumberPointField::TimeUnixNano) {
            self.time_unix_nano = 0;
        }
        if !wrote(written, NumberPointField::Exemplars) {
            self.exemplars.clear();
        }
        if !wrote(written, NumberPointField::Flags) {
            self.flags = 0;
        }
        if !oneof_set {
            self.value = None;
        }
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
    const SLOT: usize = 10;

    fn field(&mut self, f: HistogramPointField, r: &mut Reader<'_>) -> Result<bool> {
        match f {
            HistogramPointField::Attributes => self.attributes = attributes(r, Self::SLOT)?,
            HistogramPointField::StartTimeUnixNano => self.start_time_unix_nano = uint64(r)?,
            HistogramPointField::TimeUnixNano => self.time_unix_nano = uint64(r)?,
            HistogramPointField::Count => self.count = uint64(r)?,
            HistogramPointField::Sum => self.sum = opt_double(r)?,
            HistogramPointField::BucketCounts => self.bucket_counts = uint64s(r)?,
            HistogramPointField::ExplicitBounds => self.explicit_bounds = doubles(r)?,
            HistogramPointField::Exemplars => self.exemplars = messages(r)?,
            HistogramPointField::Flags => self.flags = uint32(r)?,
            HistogramPointField::Min => self.min = opt_double(r)?,
            HistogramPointField::Max => self.max = opt_double(r)?,
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
    const SLOT: usize = 11;

    fn field(&mut self, f: ExpHistogramPointField, r: &mut Reader<'_>) -> Result<bool> {
        use ExpHistogramPointField as F;
        match f {
            F::Attributes => self.attributes = attributes(r, Self::SLOT)?,
            F::StartTimeUnixNano => self.start_time_unix_nano = uint64(r)?,
            F::TimeUnixNano => self.time_unix_nano = uint64(r)?,
            F::Count => self.count = uint64(r)?,
            F::Sum => self.sum = opt_double(r)?,
            F::Scale => self.scale = sint32(r)?,
            F::ZeroCount => self.zero_count = uint64(r)?,
            F::Positive => self.positive = message(r)?,
            F::Negative => self.negative = message(r)?,
            F::Flags => self.flags = uint32(r)?,
            F::Exemplars => self.exemplars = messages(r)?,
            F::Min => self.min = opt_double(r)?,
            F::Max => self.max = opt_double(r)?,
            F::ZeroThreshold => self.zero_threshold = double(r)?,
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

    fn field(&mut self, f: BucketsField, r: &mut Reader<'_>) -> Result<bool> {
        match f {
            BucketsField::Offset => self.offset = sint32(r)?,
            BucketsField::BucketCounts => self.bucket_counts = uint64s(r)?,
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
    const SLOT: usize = 12;

    fn field(&mut self, f: SummaryPointField, r: &mut Reader<'_>) -> Result<bool> {
        match f {
            SummaryPointField::Attributes => self.attributes = attributes(r, Self::SLOT)?,
            SummaryPointField::StartTimeUnixNano => self.start_time_unix_nano = uint64(r)?,
            SummaryPointField::TimeUnixNano => self.time_unix_nano = uint64(r)?,
            SummaryPointField::Count => self.count = uint64(r)?,
            SummaryPointField::Sum => self.sum = double(r)?,
            SummaryPointField::QuantileValues => self.quantile_values = messages(r)?,
            SummaryPointField::Flags => self.flags = uint32(r)?,
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

    fn field(&mut self, f: QuantileField, r: &mut Reader<'_>) -> Result<bool> {
        let v = special_f64(r)?;
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
    const SLOT: usize = 13;

    fn field(&mut self, f: ExemplarField, r: &mut Reader<'_>) -> Result<bool> {
        use exemplar::Value;
        let member = match f {
            ExemplarField::FilteredAttributes => {
                self.filtered_attributes = attributes(r, Self::SLOT)?;
                return Ok(true);
            }
            ExemplarField::TimeUnixNano => {
                self.time_unix_nano = uint64(r)?;
                return Ok(true);
            }
            ExemplarField::SpanId => {
                self.span_id = hex_bytes(r)?;
                return Ok(true);
            }
            ExemplarField::TraceId => {
                self.trace_id = hex_bytes(r)?;
                return Ok(true);
            }
            ExemplarField::AsDouble => NumberKind::Double.read(r)?,
            ExemplarField::AsInt => NumberKind::Int.read(r)?,
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
