"""Produces records with confluent-kafka's own serializers, for the integration tests.

The bytes that prove a registry format must be the ones users' producers write: this program
serializes with confluent-kafka's AvroSerializer, ProtobufSerializer or JSONSerializer, which
register their schemas in the real registry the way a producer does (auto.register.schemas,
the default topic subject naming), and produces to the real broker. One process serves a whole
test: a description on stdin (JSON), the records' partitions and offsets on stdout (JSON).

Description:
  {"bootstrap": "host:port", "registry": "http://.../apis/ccompat/v7", "topic": "t",
   "value": SERDE, "key": SERDE (optional; absent means no key),
   "values": [SERDE, ...] (optional, instead of "value": a producer whose schema evolves),
   "records": [{"value": V, "key": K (optional), "partition": P (optional),
                "schema": N (optional: which of "values", default 0)}, ...]}
SERDE is one of
  {"format": "avro", "schema": "<Avro JSON>"}
  {"format": "json", "schema": "<JSON Schema>"}
  {"format": "protobuf", "files": {"name.proto": "<text>", ...}, "file": "name.proto",
   "message": "package.Message"}
  {"format": "string"}
A value of null is a tombstone (no serializer runs). Avro and JSON values may hold tagged
objects for what JSON cannot spell: {"$bytes": base64}, {"$float": "NaN" | "inf" | "-inf"},
{"$decimal": "1.50"}, {"$uuid": "..."}, {"$date": "2024-01-31"},
{"$datetime": "2024-01-31T12:00:00.123456+00:00"} (naive without an offset),
{"$time": "12:00:00.123456"}. Protobuf values are protobuf's JSON mapping (json_format),
which spells 64-bit integers, bytes, NaN, Timestamp, Duration and wrappers itself.
"""

import base64
import datetime
import decimal
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid

from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext, StringSerializer
from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory


def untag(value):
    """Turns the tagged objects of the description into the Python values fastavro takes."""
    if isinstance(value, list):
        return [untag(v) for v in value]
    if not isinstance(value, dict):
        return value
    if len(value) == 1:
        (tag, raw), = value.items()
        if tag == "$bytes":
            return base64.b64decode(raw)
        if tag == "$float":
            return float(raw)
        if tag == "$decimal":
            return decimal.Decimal(raw)
        if tag == "$uuid":
            return uuid.UUID(raw)
        if tag == "$date":
            return datetime.date.fromisoformat(raw)
        if tag == "$datetime":
            return datetime.datetime.fromisoformat(raw)
        if tag == "$time":
            return datetime.time.fromisoformat(raw)
        if tag == "$tuple":  # fastavro's (type name, value) for a union branch
            return (raw[0], untag(raw[1]))
    return {k: untag(v) for k, v in value.items()}


def protobuf_class(serde):
    """The message class of the description's .proto files, compiled at run time by protoc
    (grpcio-tools, which also ships the google/protobuf well-known types)."""
    from grpc_tools import protoc
    import grpc_tools

    with tempfile.TemporaryDirectory() as src:
        for name, text in serde["files"].items():
            path = os.path.join(src, name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
        out = os.path.join(src, "set.pb")
        well_known = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
        code = protoc.main(["protoc", f"-I{src}", f"-I{well_known}", "--include_imports",
                            f"--descriptor_set_out={out}", os.path.join(src, serde["file"])])
        if code != 0:
            sys.exit(f"protoc could not compile {serde['file']} (exit {code})")
        files = descriptor_pb2.FileDescriptorSet()
        with open(out, "rb") as f:
            files.ParseFromString(f.read())
    pool = descriptor_pool.DescriptorPool()
    for file in files.file:  # protoc lists dependencies first
        pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(serde["message"]))


def serializer(serde, registry):
    """The serializer a producer of this format configures, with its defaults kept
    (auto.register.schemas, topic subject naming) apart from what a test may not need."""
    fmt = serde["format"]
    if fmt == "string":
        return StringSerializer("utf_8"), lambda v: v
    if fmt == "avro":
        return AvroSerializer(registry, serde["schema"]), untag
    if fmt == "json":
        return JSONSerializer(serde["schema"], registry), untag
    if fmt == "protobuf":
        cls = protobuf_class(serde)
        return (ProtobufSerializer(cls, registry),
                lambda v: json_format.ParseDict(v, cls()))
    sys.exit(f"unknown format {fmt!r}")


def serialize(ser, value, ctx):
    """One record through its serializer. Apicurio's in-memory store answers 500 when
    registrations race ("Concurrent update in table SEQUENCES"), as tests running side by side
    make them; the serializer caches nothing after a failure, so it simply registers again."""
    for attempt in range(8):
        try:
            return ser(value, ctx)
        except SchemaRegistryError as e:
            if e.http_status_code < 500 or attempt == 7:
                raise
            print(f"registry answered {e}; trying again", file=sys.stderr)
            time.sleep(0.3)


def main():
    spec = json.load(sys.stdin)
    registry = SchemaRegistryClient({"url": spec["registry"]})
    topic = spec["topic"]
    # What SerializingProducer does with its value.serializer and key.serializer, by hand so
    # that a record may pick one of several value schemas.
    values = [serializer(v, registry) for v in (spec.get("values") or [spec["value"]])]
    key = serializer(spec["key"], registry) if spec.get("key") else None
    value_ctx = SerializationContext(topic, MessageField.VALUE)
    key_ctx = SerializationContext(topic, MessageField.KEY)
    producer = Producer({"bootstrap.servers": spec["bootstrap"], "enable.idempotence": True,
                         "linger.ms": 5})
    delivered = []
    failures = []

    def report(err, msg):
        if err is not None:
            failures.append(str(err))
        else:
            delivered.append([msg.partition(), msg.offset()])

    for record in spec["records"]:
        kwargs = {"topic": topic, "on_delivery": report}
        value = record.get("value")
        if value is not None:
            ser, value_of = values[record.get("schema", 0)]
            kwargs["value"] = serialize(ser, value_of(value), value_ctx)
        if key is not None and record.get("key") is not None:
            ser, key_of = key
            kwargs["key"] = serialize(ser, key_of(record["key"]), key_ctx)
        if record.get("partition") is not None:
            kwargs["partition"] = record["partition"]
        # The idempotent producer keeps each partition in the description's order.
        producer.produce(**kwargs)
        producer.poll(0)
    producer.flush(60)
    if failures or len(delivered) != len(spec["records"]):
        sys.exit(f"{len(delivered)} of {len(spec['records'])} delivered; failures: {failures[:5]}")
    json.dump({"delivered": delivered}, sys.stdout)


if __name__ == "__main__":
    main()
