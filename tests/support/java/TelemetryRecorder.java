import java.io.FileOutputStream;
import java.io.IOException;
import java.io.OutputStreamWriter;
import java.io.Writer;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Map;

import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.metrics.KafkaMetric;
import org.apache.kafka.common.metrics.MetricsReporter;
import org.apache.kafka.server.telemetry.ClientTelemetryContext;
import org.apache.kafka.server.telemetry.ClientTelemetryExporter;
import org.apache.kafka.server.telemetry.ClientTelemetryExporterProvider;
import org.apache.kafka.server.telemetry.ClientTelemetryPayload;
import org.apache.kafka.shaded.io.opentelemetry.proto.common.v1.AnyValue;
import org.apache.kafka.shaded.io.opentelemetry.proto.common.v1.KeyValue;
import org.apache.kafka.shaded.io.opentelemetry.proto.metrics.v1.Metric;
import org.apache.kafka.shaded.io.opentelemetry.proto.metrics.v1.MetricsData;
import org.apache.kafka.shaded.io.opentelemetry.proto.metrics.v1.NumberDataPoint;
import org.apache.kafka.shaded.io.opentelemetry.proto.metrics.v1.ResourceMetrics;
import org.apache.kafka.shaded.io.opentelemetry.proto.metrics.v1.ScopeMetrics;

/**
 * A broker-side KIP-714 receiver for aioproducer's tests: a metric reporter that is
 * also a ClientTelemetryExporterProvider (Kafka 4.3's interface), so the broker hands
 * it every PushTelemetry payload (already decompressed). Each payload is decoded with
 * the OTLP classes kafka-clients ships (shaded) and appended to a file as one JSON
 * line: client instance id (standard UUID form), client id, terminating flag, content
 * type, resource attributes and every data point (metric name, sum or gauge,
 * temporality, monotonic flag, value, attributes, start and time in unix ns).
 *
 * The file is named by the broker option "aioproducer.test.telemetry.file". The
 * payloads of clients whose client id starts with "reject-" are recorded and then
 * refused (the exporter throws, so the broker answers INVALID_RECORD).
 */
public class TelemetryRecorder implements MetricsReporter, ClientTelemetryExporterProvider {
    public static final String FILE_CONFIG = "aioproducer.test.telemetry.file";
    /** Payloads of clients whose client id starts so are recorded, then refused. */
    public static final String REJECT_PREFIX = "reject-";

    private String path;

    @Override
    public void configure(Map<String, ?> configs) {
        Object p = configs.get(FILE_CONFIG);
        if (p == null) {
            throw new IllegalArgumentException(FILE_CONFIG + " is not set");
        }
        path = p.toString();
    }

    @Override
    public void init(List<KafkaMetric> metrics) { }

    @Override
    public void metricChange(KafkaMetric metric) { }

    @Override
    public void metricRemoval(KafkaMetric metric) { }

    @Override
    public void close() { }

    @Override
    public ClientTelemetryExporter clientTelemetryExporter() {
        return this::record;
    }

    private synchronized void record(ClientTelemetryContext context,
                                     ClientTelemetryPayload payload) {
        StringBuilder out = new StringBuilder(4096);
        try {
            Uuid id = payload.clientInstanceId();
            MetricsData data = MetricsData.parseFrom(payload.data());
            out.append("{\"client_instance_id\":");
            str(out, new java.util.UUID(id.getMostSignificantBits(),
                                        id.getLeastSignificantBits()).toString());
            out.append(",\"client_id\":");
            str(out, context.authorizableRequestContext().clientId());
            out.append(",\"push_interval_ms\":").append(context.pushIntervalMs());
            out.append(",\"terminating\":").append(payload.isTerminating());
            out.append(",\"content_type\":");
            str(out, payload.contentType());
            out.append(",\"resources\":[");
            boolean firstResource = true;
            StringBuilder points = new StringBuilder();
            for (ResourceMetrics rm : data.getResourceMetricsList()) {
                if (!firstResource) {
                    out.append(',');
                }
                firstResource = false;
                attributes(out, rm.getResource().getAttributesList());
                for (ScopeMetrics sm : rm.getScopeMetricsList()) {
                    for (Metric m : sm.getMetricsList()) {
                        metric(points, m);
                    }
                }
            }
            out.append("],\"points\":[");
            if (points.length() > 0) {
                out.append(points, 1, points.length());  // drop the leading comma
            }
            out.append("]}\n");
        } catch (IOException e) {
            throw new RuntimeException("cannot decode the OTLP payload", e);
        }
        try (Writer w = new OutputStreamWriter(new FileOutputStream(path, true),
                                               StandardCharsets.UTF_8)) {
            w.write(out.toString());
        } catch (IOException e) {
            throw new RuntimeException("cannot write " + path, e);
        }
        if (context.authorizableRequestContext().clientId().startsWith(REJECT_PREFIX)) {
            // The broker answers INVALID_RECORD when its exporter throws.
            throw new IllegalStateException("payloads of " + REJECT_PREFIX + "* clients are refused");
        }
    }

    private static void metric(StringBuilder out, Metric m) {
        String type;
        List<NumberDataPoint> dps;
        int temporality = 0;
        boolean monotonic = false;
        switch (m.getDataCase()) {
            case SUM:
                type = "sum";
                dps = m.getSum().getDataPointsList();
                temporality = m.getSum().getAggregationTemporalityValue();
                monotonic = m.getSum().getIsMonotonic();
                break;
            case GAUGE:
                type = "gauge";
                dps = m.getGauge().getDataPointsList();
                break;
            default:
                type = m.getDataCase().toString().toLowerCase();
                dps = List.of();
        }
        if (dps.isEmpty()) {
            out.append(",{\"name\":");
            str(out, m.getName());
            out.append(",\"type\":");
            str(out, type);
            out.append('}');
        }
        for (NumberDataPoint p : dps) {
            out.append(",{\"name\":");
            str(out, m.getName());
            out.append(",\"type\":");
            str(out, type);
            out.append(",\"temporality\":").append(temporality);
            out.append(",\"monotonic\":").append(monotonic);
            out.append(",\"value\":");
            if (p.getValueCase() == NumberDataPoint.ValueCase.AS_INT) {
                out.append(p.getAsInt());
            } else {
                double v = p.getAsDouble();
                out.append(Double.isFinite(v) ? Double.toString(v) : "null");
            }
            out.append(",\"start_ns\":").append(p.getStartTimeUnixNano());
            out.append(",\"time_ns\":").append(p.getTimeUnixNano());
            out.append(",\"attributes\":");
            attributes(out, p.getAttributesList());
            out.append('}');
        }
    }

    private static void attributes(StringBuilder out, List<KeyValue> kvs) {
        out.append('{');
        boolean first = true;
        for (KeyValue kv : kvs) {
            if (!first) {
                out.append(',');
            }
            first = false;
            str(out, kv.getKey());
            out.append(':');
            AnyValue v = kv.getValue();
            str(out, v.hasStringValue() ? v.getStringValue() : v.toString());
        }
        out.append('}');
    }

    private static void str(StringBuilder out, String s) {
        out.append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            if (c == '"' || c == '\\') {
                out.append('\\').append(c);
            } else if (c < 0x20) {
                out.append(String.format("\\u%04x", (int) c));
            } else {
                out.append(c);
            }
        }
        out.append('"');
    }
}
