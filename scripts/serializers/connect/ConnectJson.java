// The bytes Kafka Connect's JsonConverter writes, for kafka-pg-sink's tests: records are
// described in JSON on stdin, built with Connect's own schema builders (and Debezium's, as
// its connectors call them), serialized by org.apache.kafka.connect.json.JsonConverter, and
// printed as hex, one line per record. One JVM serves a whole test, since a JVM starts in
// seconds on the project's machines.
//
// Compiled and run by scripts/dev-services.sh's classpath (KPS_CONNECT_JSON_CP):
//   java -cp "$KPS_CONNECT_JSON_CP" ConnectJson < request.json
//
// Request: {"schemas_enable": true|false, "decimal_format": "BASE64"|"NUMERIC" (optional),
//           "records": [{"schema": SCHEMA, "value": VALUE}, ...]}
// SCHEMA (null: a schemaless null, i.e. a tombstone) is one of
//   "int8" | "int16" | "int32" | "int64" | "float32" | "float64" | "boolean" | "string" | "bytes"
//       Connect's Schema.Type, by its Java name in lower case (not the converter's JSON names,
//       which are what the tests must learn from these bytes);
//   {"type": one of those, or "struct" (with "fields": [{"name": N, "schema": SCHEMA}], and
//       "name"), "array" (with "items"), "map" (with "keys", "values")};
//   {"logical": "Decimal" (with "scale", optional "precision") | "Date" | "Time" | "Timestamp"};
//   {"debezium": a class of io.debezium.time or io.debezium.data with a builder(), e.g.
//       "MicroTimestamp", "ZonedTimestamp", "Json", "Uuid", "VariableScaleDecimal";
//       "Bits" with "length", "Enum" with "values" ("a,b,c")};
//   {"envelope": {"name": N, "row": SCHEMA of a struct, "source": SCHEMA of a struct}}: a
//       Debezium change event built with io.debezium.data.Envelope; its VALUE is
//       {"op": "c"|"r"|"u"|"d"|"t", "before": ROW, "after": ROW, "source": SOURCE, "ts_ms": N}.
//   Every object form also takes "optional": true and "default": VALUE.
// VALUE is JSON read by the schema: integers and floats as numbers (floats also "NaN",
//   "Infinity", "-Infinity"), bytes and Bits as base64, Decimal and VariableScaleDecimal as a
//   decimal string ("12.50"), Date "YYYY-MM-DD", Time "HH:MM:SS[.fff]", Timestamp an
//   RFC 3339 instant; Debezium's integer times either as the number or as ISO text converted
//   by Debezium's own functions (Date LocalDate, Time/MicroTime/NanoTime LocalTime,
//   Timestamp/MicroTimestamp/NanoTimestamp LocalDateTime), ZonedTimestamp an offset date-time
//   formatted by ZonedTimestamp.toIsoString; structs as objects, maps as objects (keys read
//   by the key schema), arrays as arrays, null as null.
// Output: one line per record, the converter's bytes in lower-case hex, or "null".

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.debezium.data.Envelope;
import io.debezium.data.VariableScaleDecimal;
import java.io.BufferedWriter;
import java.io.OutputStreamWriter;
import java.math.BigDecimal;
import java.nio.charset.StandardCharsets;
import java.time.Instant;
import java.time.LocalDate;
import java.time.LocalDateTime;
import java.time.LocalTime;
import java.time.OffsetDateTime;
import java.time.ZoneOffset;
import java.util.ArrayList;
import java.util.Base64;
import java.util.HashMap;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.kafka.connect.data.Date;
import org.apache.kafka.connect.data.Decimal;
import org.apache.kafka.connect.data.Field;
import org.apache.kafka.connect.data.Schema;
import org.apache.kafka.connect.data.SchemaBuilder;
import org.apache.kafka.connect.data.Struct;
import org.apache.kafka.connect.data.Time;
import org.apache.kafka.connect.data.Timestamp;
import org.apache.kafka.connect.json.JsonConverter;

public final class ConnectJson {
    private static final ObjectMapper JSON = new ObjectMapper();

    /** A built schema, and the Debezium envelope when it is one (its values are events). */
    private record Built(Schema schema, Envelope envelope) {}

    public static void main(String[] args) throws Exception {
        JsonNode request = JSON.readTree(System.in);
        Map<String, Object> config = new HashMap<>();
        config.put("schemas.enable", request.path("schemas_enable").asBoolean(true));
        if (request.hasNonNull("decimal_format")) {
            config.put("decimal.format", request.get("decimal_format").asText());
        }
        JsonConverter converter = new JsonConverter();
        converter.configure(config, false);
        BufferedWriter out = new BufferedWriter(new OutputStreamWriter(System.out, StandardCharsets.UTF_8));
        int n = 0;
        for (JsonNode record : request.path("records")) {
            try {
                JsonNode desc = record.get("schema");
                byte[] bytes;
                if (desc == null || desc.isNull()) {
                    bytes = converter.fromConnectData("t", null, null);
                } else {
                    Built built = build(desc);
                    Object value = built.envelope != null
                            ? event(built.envelope, record.get("value"))
                            : value(built.schema, record.get("value"));
                    bytes = converter.fromConnectData("t", built.schema, value);
                }
                out.write(bytes == null ? "null" : hex(bytes));
                out.newLine();
            } catch (RuntimeException e) {
                throw new IllegalArgumentException("record " + n + ": " + e, e);
            }
            n++;
        }
        out.flush();
    }

    private static String hex(byte[] bytes) {
        StringBuilder s = new StringBuilder(bytes.length * 2);
        for (byte b : bytes) {
            s.append(Character.forDigit((b >> 4) & 0xf, 16)).append(Character.forDigit(b & 0xf, 16));
        }
        return s.toString();
    }

    // ---- schemas

    private static Built build(JsonNode desc) throws Exception {
        if (desc.has("envelope")) {
            JsonNode e = desc.get("envelope");
            Envelope envelope = Envelope.defineSchema()
                    .withName(e.path("name").asText("server.schema.table.Envelope"))
                    .withRecord(schema(e.get("row")))
                    .withSource(schema(e.get("source")))
                    .build();
            return new Built(envelope.schema(), envelope);
        }
        return new Built(schema(desc), null);
    }

    private static Schema schema(JsonNode desc) throws Exception {
        if (desc.isTextual()) {
            return builder(desc.asText(), desc).build();
        }
        SchemaBuilder b;
        if (desc.has("logical")) {
            b = switch (desc.get("logical").asText()) {
                case "Decimal" -> {
                    SchemaBuilder d = Decimal.builder(desc.path("scale").asInt());
                    if (desc.has("precision")) {
                        d.parameter("connect.decimal.precision", desc.get("precision").asText());
                    }
                    yield d;
                }
                case "Date" -> Date.builder();
                case "Time" -> Time.builder();
                case "Timestamp" -> Timestamp.builder();
                default -> throw new IllegalArgumentException("unknown logical type " + desc.get("logical"));
            };
        } else if (desc.has("debezium")) {
            b = debezium(desc);
        } else {
            b = builder(desc.path("type").asText(), desc);
        }
        if (desc.path("optional").asBoolean(false)) {
            b.optional();
        }
        if (desc.has("default")) {
            // The default is read by the schema being built (a copy without the default).
            b.defaultValue(value(b.build(), desc.get("default")));
        }
        return b.build();
    }

    private static SchemaBuilder builder(String type, JsonNode desc) throws Exception {
        return switch (type) {
            case "int8" -> SchemaBuilder.int8();
            case "int16" -> SchemaBuilder.int16();
            case "int32" -> SchemaBuilder.int32();
            case "int64" -> SchemaBuilder.int64();
            case "float32" -> SchemaBuilder.float32();
            case "float64" -> SchemaBuilder.float64();
            case "boolean" -> SchemaBuilder.bool();
            case "string" -> SchemaBuilder.string();
            case "bytes" -> SchemaBuilder.bytes();
            case "array" -> SchemaBuilder.array(schema(desc.get("items")));
            case "map" -> SchemaBuilder.map(schema(desc.get("keys")), schema(desc.get("values")));
            case "struct" -> {
                SchemaBuilder s = SchemaBuilder.struct();
                if (desc.hasNonNull("name")) {
                    s.name(desc.get("name").asText());
                }
                for (JsonNode f : desc.path("fields")) {
                    s.field(f.get("name").asText(), schema(f.get("schema")));
                }
                yield s;
            }
            default -> throw new IllegalArgumentException("unknown Connect type " + type);
        };
    }

    /** Debezium's builder for the named class, called as its connectors call it. */
    private static SchemaBuilder debezium(JsonNode desc) throws Exception {
        String name = desc.get("debezium").asText();
        switch (name) {
            case "Bits":
                return io.debezium.data.Bits.builder(desc.path("length").asInt());
            case "Enum":
                return io.debezium.data.Enum.builder(desc.path("values").asText());
            default:
                for (String pkg : new String[] {"io.debezium.time.", "io.debezium.data."}) {
                    try {
                        Class<?> c = Class.forName(pkg + name);
                        return (SchemaBuilder) c.getMethod("builder").invoke(null);
                    } catch (ClassNotFoundException e) {
                        // try the next package
                    }
                }
                throw new IllegalArgumentException("no Debezium type " + name);
        }
    }

    // ---- values

    private static Object value(Schema schema, JsonNode v) {
        if (v == null || v.isNull()) {
            return null;
        }
        String logical = schema.name() == null ? "" : schema.name();
        switch (logical) {
            case Decimal.LOGICAL_NAME:
                return new BigDecimal(v.asText()).setScale(Integer.parseInt(schema.parameters().get(Decimal.SCALE_FIELD)));
            case Date.LOGICAL_NAME:
                return java.util.Date.from(LocalDate.parse(v.asText()).atStartOfDay(ZoneOffset.UTC).toInstant());
            case Time.LOGICAL_NAME:
                return new java.util.Date(LocalTime.parse(v.asText()).toNanoOfDay() / 1_000_000L);
            case Timestamp.LOGICAL_NAME:
                return java.util.Date.from(Instant.parse(v.asText()));
            case VariableScaleDecimal.LOGICAL_NAME:
                return VariableScaleDecimal.fromLogical(schema, new BigDecimal(v.asText()));
            case io.debezium.time.Date.SCHEMA_NAME:
                if (v.isTextual()) {
                    return io.debezium.time.Date.toEpochDay(LocalDate.parse(v.asText()), null);
                }
                break;
            case io.debezium.time.Time.SCHEMA_NAME:
                if (v.isTextual()) {
                    return io.debezium.time.Time.toMilliOfDay(LocalTime.parse(v.asText()), false);
                }
                break;
            case io.debezium.time.MicroTime.SCHEMA_NAME:
                if (v.isTextual()) {
                    return io.debezium.time.MicroTime.toMicroOfDay(LocalTime.parse(v.asText()), false);
                }
                break;
            case io.debezium.time.NanoTime.SCHEMA_NAME:
                if (v.isTextual()) {
                    return io.debezium.time.NanoTime.toNanoOfDay(LocalTime.parse(v.asText()), false);
                }
                break;
            case io.debezium.time.Timestamp.SCHEMA_NAME:
                if (v.isTextual()) {
                    return io.debezium.time.Timestamp.toEpochMillis(LocalDateTime.parse(v.asText()), null);
                }
                break;
            case io.debezium.time.MicroTimestamp.SCHEMA_NAME:
                if (v.isTextual()) {
                    return io.debezium.time.MicroTimestamp.toEpochMicros(LocalDateTime.parse(v.asText()), null);
                }
                break;
            case io.debezium.time.NanoTimestamp.SCHEMA_NAME:
                if (v.isTextual()) {
                    return io.debezium.time.NanoTimestamp.toEpochNanos(LocalDateTime.parse(v.asText()), null);
                }
                break;
            case io.debezium.time.ZonedTimestamp.SCHEMA_NAME:
                return io.debezium.time.ZonedTimestamp.toIsoString(OffsetDateTime.parse(v.asText()), null);
            default:
                break;
        }
        switch (schema.type()) {
            case INT8:
                return (byte) integer(v, Byte.MIN_VALUE, Byte.MAX_VALUE);
            case INT16:
                return (short) integer(v, Short.MIN_VALUE, Short.MAX_VALUE);
            case INT32:
                return (int) integer(v, Integer.MIN_VALUE, Integer.MAX_VALUE);
            case INT64:
                return integer(v, Long.MIN_VALUE, Long.MAX_VALUE);
            case FLOAT32:
                return (float) floating(v);
            case FLOAT64:
                return floating(v);
            case BOOLEAN:
                if (!v.isBoolean()) {
                    throw new IllegalArgumentException("not a boolean: " + v);
                }
                return v.asBoolean();
            case STRING:
                return text(v);
            case BYTES:
                return Base64.getDecoder().decode(text(v));
            case ARRAY: {
                List<Object> list = new ArrayList<>();
                for (JsonNode item : v) {
                    list.add(value(schema.valueSchema(), item));
                }
                return list;
            }
            case MAP: {
                Map<Object, Object> map = new LinkedHashMap<>();
                Iterator<Map.Entry<String, JsonNode>> it = v.fields();
                while (it.hasNext()) {
                    Map.Entry<String, JsonNode> e = it.next();
                    JsonNode key = schema.keySchema().type() == Schema.Type.STRING
                            ? JSON.getNodeFactory().textNode(e.getKey())
                            : readTree(e.getKey());
                    map.put(value(schema.keySchema(), key), value(schema.valueSchema(), e.getValue()));
                }
                return map;
            }
            case STRUCT: {
                Struct s = new Struct(schema);
                for (Field f : schema.fields()) {
                    if (v.has(f.name())) {
                        s.put(f, value(f.schema(), v.get(f.name())));
                    }
                }
                s.validate();
                return s;
            }
            default:
                throw new IllegalArgumentException("unhandled type " + schema.type());
        }
    }

    // A description that does not fit its type is the test's mistake: refused, never
    // written as some default (Jackson's asInt() reads "x" as 0).
    private static long integer(JsonNode v, long min, long max) {
        if (!v.isIntegralNumber() || !v.canConvertToLong() || v.asLong() < min || v.asLong() > max) {
            throw new IllegalArgumentException("not an integer in [" + min + ", " + max + "]: " + v);
        }
        return v.asLong();
    }

    private static double floating(JsonNode v) {
        if (v.isTextual()) {
            return Double.parseDouble(v.asText());
        }
        if (!v.isNumber()) {
            throw new IllegalArgumentException("not a number: " + v);
        }
        return v.asDouble();
    }

    private static String text(JsonNode v) {
        if (!v.isTextual()) {
            throw new IllegalArgumentException("not a string: " + v);
        }
        return v.asText();
    }

    private static JsonNode readTree(String text) {
        try {
            return JSON.readTree(text);
        } catch (Exception e) {
            throw new IllegalArgumentException("map key " + text + " is not JSON", e);
        }
    }

    /** A change event as the connector makes it, through the Envelope's own methods. */
    private static Struct event(Envelope envelope, JsonNode v) {
        Schema schema = envelope.schema();
        Object before = value(schema.field("before").schema(), v.get("before"));
        Object after = value(schema.field("after").schema(), v.get("after"));
        Struct source = (Struct) value(schema.field("source").schema(), v.get("source"));
        Instant at = v.has("ts_ms") ? Instant.ofEpochMilli(v.get("ts_ms").asLong()) : Instant.now();
        return switch (v.path("op").asText()) {
            case "c" -> envelope.create(after, source, at);
            case "r" -> envelope.read(after, source, at);
            case "u" -> envelope.update(before, (Struct) after, source, at);
            case "d" -> envelope.delete(before, source, at);
            case "t" -> envelope.truncate(source, at);
            default -> throw new IllegalArgumentException("unknown op " + v.get("op"));
        };
    }
}
