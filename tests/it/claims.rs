//! README.md is a contract: every behavioural promise it makes is listed here with the tests
//! that prove it. The test below fails when a listed sentence is no longer in README.md (the
//! promise changed: update its entry and its tests) or when a listed test no longer exists
//! (renamed or removed: the promise lost its proof). A new promise gets a new entry.
//!
//! Whether each test really asserts its promise was checked by reading it; this file keeps
//! the two from drifting apart afterwards.

/// (a sentence fragment of README.md, the tests proving it: `file::test` for `tests/it/file.rs`,
/// `src/path.rs::test` for unit tests).
const CLAIMS: &[(&str, &[&str])] = &[
    ("1 when `/ready` would answer 200 at this scrape, else 0", &["operations::metrics_are_scraped_and_parsed_and_health_answers", "operations::readiness_flips_while_postgres_is_down"]),
    ("a process owns partitions but is not ready (`kafka_pg_sink_ready` 0), for 5 min", &["alerts::the_alert_rules_pass_promtool_check_and_their_unit_tests", "alerts::a_real_prometheus_scrapes_the_sink_and_evaluates_every_alert_rule"]),
    ("the topic's `time_unit` does not apply, and no unit is assumed, so a bare integer there is a `mapping` error", &["src/mapping/tests.rs::bytea_encoding_names_bytea_columns_and_time_units_take_times_of_day_and_intervals", "src/mapping/convert/clock.rs::integer_times_need_a_unit_and_must_lie_within_the_day", "src/mapping/convert/interval.rs::integers_need_a_unit_and_avro_durations_map_field_by_field", "types::json_records_of_every_new_type_land_as_postgresql_reads_them_and_bad_ones_are_dead_letters", "types::connect_json_debezium_durations_and_times_land_in_interval_and_time_columns"]),
    ("| | `google.protobuf.Duration` | proto3 JSON seconds, `\"1.5s\"` | interval (all of it time), text |", &["src/mapping/convert/interval.rs::protobuf_durations_are_seconds_with_up_to_nine_decimals", "types::protobuf_durations_land_in_interval_columns"]),
    ("Protobuf's `Duration` as its JSON seconds", &["src/mapping/convert/interval.rs::protobuf_durations_are_seconds_with_up_to_nine_decimals", "types::protobuf_durations_land_in_interval_columns"]),
    ("in a time or timetz column the count since midnight, in an interval column its length", &["src/mapping/tests.rs::bytea_encoding_names_bytea_columns_and_time_units_take_times_of_day_and_intervals", "src/mapping/convert/clock.rs::integer_times_need_a_unit_and_must_lie_within_the_day", "types::json_records_of_every_new_type_land_as_postgresql_reads_them_and_bad_ones_are_dead_letters"]),
    ("| `bytea_encoding` | base64 | per bytea column", &["src/mapping/tests.rs::bytea_encoding_names_bytea_columns_and_time_units_take_times_of_day_and_intervals", "src/mapping/convert.rs::bytea_takes_hex_where_the_column_says_so_and_base64_stays_the_default", "types::json_records_of_every_new_type_land_as_postgresql_reads_them_and_bad_ones_are_dead_letters"]),
    ("with `bytea_encoding` `hex` for the column, hex instead", &["src/mapping/convert.rs::bytea_takes_hex_where_the_column_says_so_and_base64_stays_the_default", "types::json_records_of_every_new_type_land_as_postgresql_reads_them_and_bad_ones_are_dead_letters"]),
    ("| `time` | `HH:MM`, `HH:MM:SS`, `HH:MM:SS.ffffff`", &["src/mapping/convert/clock.rs::times_of_day_are_microseconds_since_midnight", "src/mapping/convert/clock.rs::integer_times_need_a_unit_and_must_lie_within_the_day", "src/mapping/convert/clock.rs::any_time_and_zone_round_trips", "types::json_records_of_every_new_type_land_as_postgresql_reads_them_and_bad_ones_are_dead_letters", "types::connect_json_debezium_durations_and_times_land_in_interval_and_time_columns", "types::avro_durations_and_times_of_day_land_in_interval_and_time_columns"]),
    ("| `timetz` | as `time`, then `Z` or an offset", &["src/mapping/convert/clock.rs::timetz_writes_the_zone_west_of_utc", "src/mapping/convert/clock.rs::any_time_and_zone_round_trips", "types::json_records_of_every_new_type_land_as_postgresql_reads_them_and_bad_ones_are_dead_letters", "types::connect_json_debezium_durations_and_times_land_in_interval_and_time_columns", "types::avro_durations_and_times_of_day_land_in_interval_and_time_columns"]),
    ("| `interval` | an ISO 8601 duration", &["src/mapping/convert/interval.rs::iso_durations_keep_months_days_and_time_apart", "src/mapping/convert/interval.rs::integers_need_a_unit_and_avro_durations_map_field_by_field", "src/mapping/convert/interval.rs::any_interval_round_trips_through_iso_8601", "types::json_records_of_every_new_type_land_as_postgresql_reads_them_and_bad_ones_are_dead_letters", "types::connect_json_debezium_durations_and_times_land_in_interval_and_time_columns", "types::avro_durations_and_times_of_day_land_in_interval_and_time_columns"]),
    ("| `inet`, `cidr` | `address` or `address/prefix`", &["src/mapping/convert/network.rs::inet_keeps_host_bits_and_cidr_refuses_them", "src/mapping/convert/network.rs::any_network_round_trips", "types::json_records_of_every_new_type_land_as_postgresql_reads_them_and_bad_ones_are_dead_letters"]),
    ("| `macaddr`, `macaddr8` | six (macaddr8: six or eight) byte pairs", &["src/mapping/convert/network.rs::mac_addresses_in_every_common_spelling", "src/mapping/convert/network.rs::any_mac_round_trips", "types::json_records_of_every_new_type_land_as_postgresql_reads_them_and_bad_ones_are_dead_letters"]),
    ("| `citext` | as `text` (the extension's type, recognised by its name and send function", &["types::json_records_of_every_new_type_land_as_postgresql_reads_them_and_bad_ones_are_dead_letters"]),
    ("| domains over any type above | as their base type; PostgreSQL checks the domain's CHECK constraints", &["types::json_records_of_every_new_type_land_as_postgresql_reads_them_and_bad_ones_are_dead_letters"]),
    ("`time[]`, `interval[]`, `inet[]`, `cidr[]`, `macaddr[]`, `citext[]`", &["types::json_records_of_every_new_type_land_as_postgresql_reads_them_and_bad_ones_are_dead_letters"]),
    ("| `duration` (12-byte `fixed`) |", &["src/mapping/convert/interval.rs::integers_need_a_unit_and_avro_durations_map_field_by_field", "types::avro_durations_and_times_of_day_land_in_interval_and_time_columns"]),
    ("| `long` with Debezium's `MicroDuration` |", &["src/mapping/avro/mod.rs::debezium_micro_durations_become_iso_8601_seconds", "types::avro_durations_and_times_of_day_land_in_interval_and_time_columns"]),
    ("| `time-millis`/`-micros` | | `HH:MM:SS.ffffff` | time, timetz (UTC), text |", &["types::avro_durations_and_times_of_day_land_in_interval_and_time_columns"]),
    ("`MicroTimestamp`, `NanoTimestamp`, `MicroDuration`, `VariableScaleDecimal`, `Json`.", &["types::connect_json_debezium_durations_and_times_land_in_interval_and_time_columns"]),
    ("| `types::…` |", &["types::json_records_of_every_new_type_land_as_postgresql_reads_them_and_bad_ones_are_dead_letters", "types::protobuf_durations_land_in_interval_columns", "types::the_new_types_upsert_through_the_staging_table_with_the_last_record_per_key_winning", "types::connect_json_debezium_durations_and_times_land_in_interval_and_time_columns", "types::avro_durations_and_times_of_day_land_in_interval_and_time_columns"]),
    ("the schema is not used to validate them.", &["src/mapping/json_schema.rs::a_payload_that_is_not_one_json_value_is_refused", "src/mapping/json_schema.rs::the_payload_is_copied_as_it_is", "protobuf::json_schema_records_land_like_json"]),
    ("Protobuf scalars without presence (proto3) are written with their default when unset", &["src/mapping/protobuf.rs::unset_fields_write_their_defaults_but_absent_optional_ones_are_left_out"]),
    ("| `bearer_token` | | `Authorization: Bearer …` instead of basic auth |", &["registry::a_bearer_token_is_sent_and_a_wrong_one_refused"]),
    ("| `client_cert_file`, `client_key_file` | | PEM client certificate and key, for a registry that requires mutual TLS |", &["registry::mutual_tls_reads_records_with_the_client_certificate_and_none_without"]),
    ("so `key_from = \"key\"`, upserts and tombstone deletes work as with JSON keys", &["avro::avro_keys_upsert_and_delete_while_the_schema_evolves", "protobuf::debezium_change_events_in_protobuf_with_protobuf_keys_reproduce_the_source", "protobuf::json_schema_keys_upsert_and_delete"]),
    ("a required column the schema has no field for is a problem", &["cli::check_holds_a_registry_schema_against_the_table"]),
    ("a field whose type can never convert into its column", &["cli::check_holds_each_registry_field_type_against_its_column", "src/mapping/schema_types/mod.rs::avro_types_that_never_convert_are_told_from_those_that_may", "src/mapping/schema_types/mod.rs::json_schema_types_never_converting_are_found", "src/mapping/schema_types/mod.rs::protobuf_types_never_converting_are_found", "src/mapping/schema_types/mod.rs::debezium_after_records_are_typed_with_their_named_references"]),
    ("a field that may be null going into a `NOT NULL` column is a warning", &["cli::check_holds_each_registry_field_type_against_its_column", "src/mapping/schema_types/mod.rs::a_union_with_null_into_a_not_null_column_is_a_warning_only"]),
    ("| `ca_file` | the system's roots |", &["registry::https_trusts_the_ca_file_and_only_it"]),
    ("| `timeout` | `10s` | per request and URL |", &["registry::a_stopped_or_hung_registry_is_unavailable_within_the_timeout", "src/config/registry.rs::defaults_and_a_single_url"]),
    ("A record after the delete makes a new row: columns it does not carry take their defaults,", &["upsert::a_partial_record_after_a_delete_in_one_batch_does_not_revive_the_deleted_row", "avro::avro_keys_upsert_and_delete_while_the_schema_evolves"]),
    ("records in the Confluent wire format (magic", &["avro::avro_records_with_every_logical_type_land_exactly", "protobuf::protobuf_records_land_with_every_field_kind", "protobuf::json_schema_records_land_like_json", "src/mapping/transcode.rs::the_header_gives_the_schema_id_and_the_payload"]),
    ("A schema is fetched", &["registry::an_id_is_fetched_once_and_then_served_from_the_cache", "avro::a_registry_outage_delays_records_and_loses_none_with_basic_auth"]),
    ("A new schema id mid-stream (a producer's schema evolved) is just another", &["avro::avro_keys_upsert_and_delete_while_the_schema_evolves", "avro::unknown_schema_ids_and_corrupt_payloads_become_dead_letters"]),
    ("or on a 16-byte `fixed`: its raw bytes", &["src/mapping/avro/differential.rs::a_fixed_uuid_is_read_as_its_sixteen_bytes"]),
    ("the sink's own datum reader is tested against", &["src/mapping/avro/differential.rs::random_values_and_their_corruptions_read_the_same_both_ways", "src/mapping/avro/differential.rs::blocks_with_a_negative_count_carry_their_size_and_read_the_same"]),
    ("prost-reflect's `DynamicMessage` and serializer are the reference it is tested against", &["src/mapping/protobuf/differential.rs::random_messages_and_their_corruptions_read_the_same_both_ways"]),
    ("a Connect record whose schema is the last one seen is recognised by a", &["src/mapping/envelope.rs::a_known_schema_is_recognised_by_its_bytes_and_anything_else_is_read_in_full", "formats::connect_json_records_load_with_their_schema"]),
    ("What each type becomes (then converted to the column type as JSON is", &["avro::avro_records_with_every_logical_type_land_exactly", "protobuf::protobuf_records_land_with_every_field_kind", "src/mapping/avro/mod.rs::every_avro_type_and_logical_type_follows_the_conventions", "src/mapping/protobuf.rs::every_field_kind_follows_the_transcode_conventions"]),
    ("reads change events as Debezium's `AvroConverter` writes them", &["avro::debezium_change_events_in_avro_reproduce_the_source_table", "protobuf::debezium_change_events_in_protobuf_with_protobuf_keys_reproduce_the_source", "protobuf::debezium_change_events_in_json_schema_reproduce_the_source", "src/mapping/avro/mod.rs::debezium_envelopes_transcode_whole_with_their_connect_types"]),
    ("(`40403`), or whose schema is of another kind than the topic reads, is a `schema` error", &["src/pipeline/tests.rs::a_schema_that_does_not_compile_is_a_dead_letter", "avro::unknown_schema_ids_and_corrupt_payloads_become_dead_letters", "src/pipeline/tests.rs::a_registry_that_does_not_answer_is_retried_and_an_unknown_id_is_a_dead_letter", "src/pipeline/tests.rs::a_schema_of_the_wrong_kind_and_a_record_without_the_header_are_dead_letters"]),
    ("registry that does not answer is never the record's fault", &["avro::a_registry_outage_delays_records_and_loses_none_with_basic_auth", "src/pipeline/tests.rs::a_registry_that_does_not_answer_is_retried_and_an_unknown_id_is_a_dead_letter"]),
    ("tried in order from the last that answered (failover)", &["registry::failover_skips_a_dead_url_and_stays_with_the_one_that_answered"]),
    ("Passwords and tokens are never logged or printed", &["src/config/registry.rs::secrets_never_show", "registry::basic_auth_passes_with_the_right_credentials_only", "avro::a_registry_outage_delays_records_and_loses_none_with_basic_auth"]),
    ("registry formats without this section is refused at startup.", &["src/config/mod.rs::registry_formats_need_a_schema_registry"]),
    ("`subject_strategy` | `topic_name` | how `check` finds a topic's schemas", &["cli::check_holds_a_registry_schema_against_the_table", "src/config/registry.rs::subjects_follow_the_strategy"]),
    ("a failure chained after a transient error, a revoke with two batches in flight, an operator's", &["src/pipeline/tests.rs::a_failure_chained_after_a_transient_error_rewinds_once_and_loses_nothing", "src/pipeline/tests.rs::a_revoke_with_two_batches_in_flight_finishes_them_and_then_takes_nothing", "src/pipeline/tests.rs::an_operators_reset_is_followed_by_the_owner_and_fences_a_zombie"]),
    ("reset against a zombie, a rewind under `latest`, a record of another column list joining an upsert batch, a writer", &["src/pipeline/tests.rs::a_rewind_under_latest_returns_to_the_pinned_start", "src/pipeline/tests.rs::a_record_whose_shape_differs_stays_in_the_batch", "src/pipeline/tests.rs::a_writer_that_dies_stops_the_sink_without_hanging"]),
    ("that dies, and an advance past transaction markers; each test ends by checking that every", &["src/pipeline/tests.rs::an_offset_only_advance_moves_past_transaction_markers", "src/pipeline/tests.rs::a_position_from_before_the_assignment_is_not_a_gap"]),
    ("no module imports one that imports it back", &["layout::no_module_imports_one_that_imports_it_back"]),
    ("no file in `src/` grows past about 500 lines of code unless it is listed", &["layout::no_file_grows_past_the_budget_unless_it_is_one_concept"]),
    ("the rows and an advance of the partition's offset", &["crash::kill_9_at_random_moments_loses_and_duplicates_nothing", "crash::kill_9_at_random_moments_in_avro_loses_and_duplicates_nothing", "crash::kill_9_at_random_moments_in_upsert_mode_loses_nothing", "faults::writer_sessions_killed_mid_transaction_roll_back_and_rewind"]),
    ("a crash, a restart, a rebalance or a network partition can neither lose", &["crash::kill_9_at_random_moments_in_upsert_mode_loses_nothing", "crash::kill_9_at_random_moments_loses_and_duplicates_nothing", "delivery::a_stop_part_way_and_a_restart_leave_no_duplicate_and_no_gap", "restarts::postgres_stopped_and_restarted_during_a_load_loses_and_duplicates_nothing", "restarts::the_kafka_broker_stopped_and_restarted_during_a_load_loses_and_duplicates_nothing", "rebalance::join_and_leave_mid_stream_with_the_classic_protocol", "rebalance::join_and_leave_mid_stream_with_the_consumer_protocol", "zombie::a_claim_ends_a_stopped_owner_under_the_documented_minimal_grants", "zombie::a_claim_ends_the_session_of_a_previous_owner_stopped_inside_a_transaction", "zombie::a_claim_never_ends_the_session_of_another_application", "zombie::a_zombie_paused_past_its_session_timeout_commits_nothing_with_the_classic_protocol", "zombie::a_zombie_paused_past_its_session_timeout_commits_nothing_with_the_consumer_protocol", "zombie::a_zombie_waking_after_an_operator_reset_cannot_take_the_partition_back", "zombie::idle_in_transaction_timeout_ends_the_session_of_a_stopped_sink"]),
    ("source of truth for where each partition resumes", &["operations::the_sink_commits_to_kafka_only_when_mirroring_and_never_resumes_from_kafka"]),
    ("cannot commit", &["zombie::a_zombie_paused_past_its_session_timeout_commits_nothing_with_the_classic_protocol", "zombie::a_zombie_paused_past_its_session_timeout_commits_nothing_with_the_consumer_protocol"]),
    ("`kafka-pg-sink migrate` creates `kafka_offsets(consumer_group, topic, partition", &["cli::migrate_twice_is_a_no_op_and_concurrent_runs_do_not_collide"]),
    ("`next_offset` is the next offset to read: the last written offset + 1", &["mapping::a_record_that_cannot_be_mapped_stops_the_sink_at_that_record", "positions::positions_reach_the_end_of_topics_written_by_transactional_producers"]),
    ("It is `NULL` until the partition's first commit", &["rejected::a_second_refused_row_in_the_batch_commits_nothing"]),
    ("offsets to Kafka (unless", &["operations::the_sink_commits_to_kafka_only_when_mirroring_and_never_resumes_from_kafka"]),
    ("the partitions in one statement (insert or bump `owner_epoch`, set `owner_id`)", &["zombie::a_zombie_paused_past_its_session_timeout_commits_nothing_with_the_classic_protocol", "rebalance::join_and_leave_mid_stream_with_the_classic_protocol", "delivery::a_stop_part_way_and_a_restart_leave_no_duplicate_and_no_gap"]),
    ("starts by `kafka.auto_offset_reset`: `earliest` (default), `latest`, or `fail` (the sink stops", &["mapping::reset_policies_decide_where_a_partition_without_an_offset_starts", "src/config/mod.rs::defaults_fill_the_gaps"]),
    ("so a rewind or a restart", &["positions::latest_is_pinned_at_the_claim_so_a_kill_before_the_first_commit_skips_nothing", "positions::a_rewind_before_the_first_commit_under_latest_rereads_instead_of_skipping"]),
    ("they are abandoned client-side within", &["faults::a_claim_the_network_never_answers_is_abandoned_client_side_and_retried"]),
    ("retried with backoff for at most half of `max.poll.interval.ms`", &["supervision::a_claim_the_database_never_answers_stops_the_sink_within_the_poll_interval"]),
    ("a partition's batches commit in order.", &["faults::writer_sessions_killed_mid_transaction_roll_back_and_rewind", "delivery::a_stop_part_way_and_a_restart_leave_no_duplicate_and_no_gap"]),
    ("A writer holds at most `batch.max_in_flight` sealed", &["batching::a_writer_queues_at_most_max_in_flight_batches_and_then_the_consumer_waits"]),
    ("A writer task that dies (a panic) stops the sink with exit 1 and the writer's number", &["supervision::a_writer_that_panics_stops_the_sink_with_exit_1_and_a_restart_completes"]),
    ("`batch.max_records` records, at the record that brings its key and value bytes to", &["batching::a_batch_closes_at_max_records", "batching::a_batch_closes_at_max_bytes", "batching::a_lone_record_waits_max_wait_before_its_batch_commits"]),
    ("If fewer rows change than the batch has partitions, the transaction rolls back", &["zombie::a_claim_ends_a_stopped_owner_under_the_documented_minimal_grants", "zombie::a_claim_ends_the_session_of_a_previous_owner_stopped_inside_a_transaction", "zombie::a_claim_never_ends_the_session_of_another_application", "zombie::a_zombie_paused_past_its_session_timeout_commits_nothing_with_the_classic_protocol", "zombie::a_zombie_paused_past_its_session_timeout_commits_nothing_with_the_consumer_protocol", "zombie::a_zombie_waking_after_an_operator_reset_cannot_take_the_partition_back", "zombie::idle_in_transaction_timeout_ends_the_session_of_a_stopped_sink", "operations::offsets_reset_to_every_target_and_under_a_running_sink"]),
    ("records of aborted transactions are skipped (librdkafka reads `read_committed`", &["positions::positions_reach_the_end_of_topics_written_by_transactional_producers"]),
    ("Stored positions therefore reach the end offsets", &["positions::positions_reach_the_end_of_topics_written_by_transactional_producers"]),
    ("every later compare-and-set by the old owner matches nothing: its batch rolls back", &["zombie::a_claim_ends_a_stopped_owner_under_the_documented_minimal_grants", "zombie::a_claim_ends_the_session_of_a_previous_owner_stopped_inside_a_transaction", "zombie::a_claim_never_ends_the_session_of_another_application", "zombie::a_zombie_paused_past_its_session_timeout_commits_nothing_with_the_classic_protocol", "zombie::a_zombie_paused_past_its_session_timeout_commits_nothing_with_the_consumer_protocol", "zombie::a_zombie_waking_after_an_operator_reset_cannot_take_the_partition_back", "zombie::idle_in_transaction_timeout_ends_the_session_of_a_stopped_sink"]),
    ("the claim waits `postgres.lock_timeout` and then ends that", &["zombie::a_claim_ends_the_session_of_a_previous_owner_stopped_inside_a_transaction", "zombie::a_claim_never_ends_the_session_of_another_application"]),
    ("Even when no one claims its partitions, the", &["zombie::idle_in_transaction_timeout_ends_the_session_of_a_stopped_sink"]),
    ("When a transaction fails, or its outcome is unknown", &["faults::writer_sessions_killed_mid_transaction_roll_back_and_rewind", "faults::a_commit_whose_answer_is_lost_is_resolved_by_rereading_not_by_guessing", "restarts::postgres_stopped_and_restarted_during_a_load_loses_and_duplicates_nothing", "positions::a_rewind_before_the_first_commit_under_latest_rereads_instead_of_skipping"]),
    ("retried with capped exponential backoff (100 ms to 30 s) with jitter", &["src/pipeline/lanes.rs::backoff_grows_from_the_minimum_to_the_cap_with_jitter", "src/config/mod.rs::every_documented_default_holds"]),
    ("The consumer keeps polling meanwhile, so rebalances are served.", &["batching::rebalances_are_served_while_a_writer_retries"]),
    ("naming the record it refused first", &["rejected::two_refused_rows_on_one_partition_stop_the_sink_at_the_first", "rejected::a_second_refused_row_in_the_batch_commits_nothing"]),
    ("On revoke, the open batches of the revoked partitions are committed (or", &["batching::revoke_commits_the_open_batch_under_the_old_owners_epoch"]),
    ("commits every record already taken (open batches included), leaves the group", &["batching::sigterm_commits_the_open_batch_and_exits_0", "delivery::ten_thousand_records_become_exactly_ten_thousand_rows_with_their_values", "delivery::a_stop_part_way_and_a_restart_leave_no_duplicate_and_no_gap"]),
    ("A second signal exits at once (130), even while a batch is stuck in its", &["batching::a_second_signal_exits_130_at_once"]),
    ("`, the default) stops the sink with an error naming the topic, partition, offset", &["mapping::a_record_that_cannot_be_mapped_stops_the_sink_at_that_record", "formats::explicit_mappings_reach_nested_fields_and_name_what_is_missing"]),
    ("the table and constraint (or column) it names, and its detail", &["rejected::a_refused_row_is_named_with_its_column_constraint_and_detail", "rejected::a_refused_row_stops_the_sink_at_that_record"]),
    ("` it is kept in `kafka_dead_letters` in the same transaction", &["bad_input::every_offset_becomes_a_row_or_a_dead_letter_exactly_once"]),
    ("for one key in a batch are fine, and the last one wins", &["upsert::upsert_keeps_the_last_record_per_key_and_leaves_absent_columns_alone", "formats::upsert_applies_updates_and_tombstones_in_order_per_key", "crash::kill_9_at_random_moments_in_upsert_mode_loses_nothing"]),
    ("Columns a record does not carry (absent, not `null`", &["upsert::a_partial_upsert_leaves_the_columns_it_does_not_carry_alone", "upsert::upsert_keeps_the_last_record_per_key_and_leaves_absent_columns_alone", "src/mapping/tests.rs::upsert_leaves_absent_columns_out_in_every_format"]),
    ("records of every column list share the batch, and one statement merges column by column", &["upsert::sparse_upserts_and_deletes_keep_exactly_what_each_record_carried", "src/batch.rs::upsert_records_of_different_shapes_share_one_copy"]),
    ("new keys are inserted with the column's default where no record carried it", &["upsert::sparse_upserts_and_deletes_keep_exactly_what_each_record_carried", "upsert::a_partial_upsert_leaves_the_columns_it_does_not_carry_alone"]),
    ("A `NOT NULL` column without a default must be in every upsert record", &["upsert::a_partial_upsert_leaves_the_columns_it_does_not_carry_alone"]),
    ("stores the low and high watermarks", &["operations::lag_is_right_in_sql_and_from_the_cli_while_records_wait_and_after_they_drain"]),
    ("the low watermark stands in for a partition never", &["operations::a_partition_never_committed_lags_from_its_low_watermark"]),
    ("keep their last observation", &["operations::lag_is_right_in_sql_and_from_the_cli_while_records_wait_and_after_they_drain"]),
    ("prints one line per partition with totals per topic and overall", &["operations::lag_and_offsets_show_print_every_partition_with_totals_per_topic", "operations::lag_is_right_in_sql_and_from_the_cli_while_records_wait_and_after_they_drain"]),
    ("`total_lag`, `partitions[]`). `--max-lag N` exits 1 when the total lag exceeds N", &["operations::lag_is_right_in_sql_and_from_the_cli_while_records_wait_and_after_they_drain", "positions::positions_reach_the_end_of_topics_written_by_transactional_producers"]),
    ("`kafka.mirror_commits = true` commits each position to the Kafka consumer group", &["operations::mirrored_positions_are_visible_to_a_plain_kafka_group_offset_query"]),
    ("never reads those commits", &["operations::the_sink_commits_to_kafka_only_when_mirroring_and_never_resumes_from_kafka"]),
    ("`reset` refuses topics the sink does not read, partitions that do not exist and offsets outside", &["operations::offsets_reset_to_every_target_and_under_a_running_sink"]),
    ("records it in `kafka_offset_events`", &["operations::offsets_reset_to_every_target_and_under_a_running_sink"]),
    ("or within 5 s when idle", &["operations::a_reset_during_a_drain_records_the_position_it_replaced", "operations::offsets_reset_to_every_target_and_under_a_running_sink"]),
    ("`http.enabled = false` turns it off", &["cli::http_enabled_false_serves_nothing", "src/config/mod.rs::every_documented_default_holds"]),
    ("port `0` picks a free one (the log says which", &["operations::metrics_are_scraped_and_parsed_and_health_answers"]),
    ("`200 ok` while the process runs", &["operations::metrics_are_scraped_and_parsed_and_health_answers", "operations::readiness_flips_while_postgres_is_down"]),
    ("when partitions are assigned, PostgreSQL answers", &["metrics::ready_is_503_without_an_assigned_partition_and_without_a_broker", "operations::readiness_flips_while_postgres_is_down", "operations::metrics_are_scraped_and_parsed_and_health_answers"]),
    ("records taken from Kafka", &["operations::metrics_are_scraped_and_parsed_and_health_answers", "rejected::dead_lettered_rows_are_not_counted_as_written"]),
    ("one per record applied", &["metrics::rows_written_counts_every_upserted_and_deleted_record", "operations::metrics_are_scraped_and_parsed_and_health_answers", "rejected::dead_lettered_rows_are_not_counted_as_written"]),
    ("batch transactions committed", &["metrics::batches_committed_and_the_latency_histograms_count_each_committed_transaction"]),
    ("`stale`: a batch queued behind a failed one", &["operations::a_reset_during_a_drain_records_the_position_it_replaced", "supervision::batches_queued_behind_a_failure_are_not_counted_as_fenced"]),
    ("commits refused because another owner", &["operations::a_reset_during_a_drain_records_the_position_it_replaced", "supervision::batches_queued_behind_a_failure_are_not_counted_as_fenced"]),
    ("records written to `kafka_dead_letters` (refused", &["rejected::dead_lettered_rows_are_not_counted_as_written"]),
    ("rebalances handled", &["metrics::a_revoke_is_counted_and_the_revoked_partitions_gauges_disappear", "operations::metrics_are_scraped_and_parsed_and_health_answers"]),
    ("BEGIN to COMMIT of a batch", &["metrics::batches_committed_and_the_latency_histograms_count_each_committed_transaction"]),
    ("a batch's first record buffered to COMMIT", &["metrics::batches_committed_and_the_latency_histograms_count_each_committed_transaction"]),
    ("records after the stored position", &["operations::lag_is_right_in_sql_and_from_the_cli_while_records_wait_and_after_they_drain", "operations::metrics_are_scraped_and_parsed_and_health_answers"]),
    ("the two ends of the lag", &["operations::lag_is_right_in_sql_and_from_the_cli_while_records_wait_and_after_they_drain"]),
    ("`kafka_pg_sink_assigned_partitions` | gauge", &["operations::metrics_are_scraped_and_parsed_and_health_answers"]),
    ("Per-partition gauges disappear three watermark", &["metrics::a_revoke_is_counted_and_the_revoked_partitions_gauges_disappear"]),
    ("`rows_committed` without dead letters, `dead_letters` apart", &["rejected::dead_lettered_rows_are_not_counted_as_written", "rejected::a_refused_row_stops_the_sink_at_that_record", "src/stats.rs::percentiles_reflect_what_was_recorded"]),
    ("A TOML file (`--config`, or `KAFKA_PG_SINK_CONFIG`)", &["cli::the_config_file_can_come_from_kafka_pg_sink_config", "cli::settings_are_overridden_by_environment_then_flags", "src/config/mod.rs::flags_and_set_override_the_file"]),
    ("`DATABASE_URL` and `KAFKA_BOOTSTRAP_SERVERS` (the prefixed forms win)", &["cli::bootstrap_servers_come_from_the_file_then_the_environment_then_the_flag", "cli::settings_are_overridden_by_environment_then_flags"]),
    ("flags `--database-url`, `--bootstrap-servers`, `--group-id`", &["cli::bootstrap_servers_come_from_the_file_then_the_environment_then_the_flag", "cli::settings_are_overridden_by_environment_then_flags", "cli::migrate_twice_is_a_no_op_and_concurrent_runs_do_not_collide", "cli::json_logs_are_one_object_per_line_and_carry_the_progress_line", "src/config/mod.rs::flags_and_set_override_the_file"]),
    ("`${NAME}` in `postgres.url` and in `kafka.properties` values is replaced by the environment variable", &["src/config/secrets.rs::secrets_can_come_from_the_environment", "cli::migrate_reads_the_password_from_the_environment_like_run_and_check", "security::kafka_over_sasl_scram_and_over_ssl_delivers_exactly_once"]),
    ("Unknown keys are errors (a typo is named, not ignored).", &["src/config/mod.rs::unknown_keys_are_rejected_by_name", "cli::check_names_each_problem_in_a_bad_config", "cli::json_logs_are_one_object_per_line_and_carry_the_progress_line"]),
    ("`examples/orders.toml` is a complete,", &["cli::the_example_config_migrates_checks_and_drains_into_the_example_table"]),
    ("| `watermark_interval` | `5s` |", &["src/config/mod.rs::every_documented_default_holds"]),
    ("`classic` (cooperative-sticky assignor) or `consumer` (KIP-848)", &["src/kafka/clients.rs::the_consumer_gets_the_documented_settings_per_protocol"]),
    ("may keep failing before `run` exits 1 with the reason", &["supervision::run_with_a_wrong_kafka_password_says_not_ready_then_exits_1"]),
    ("`fail` (stop and say how to continue)", &["out_of_range::deleted_history_stops_the_sink_or_is_skipped_and_recorded_by_policy", "out_of_range::a_position_lost_while_running_moves_to_latest_or_stops_the_sink_by_policy"]),
    ("classic protocol only; KIP-848 takes it from the broker", &["src/kafka/clients.rs::the_consumer_gets_the_documented_settings_per_protocol", "src/config/mod.rs::every_documented_default_holds"]),
    ("`auto.offset.reset`, `group.id` and `bootstrap.servers` are managed by the sink", &["src/config/mod.rs::every_managed_kafka_property_is_refused", "src/config/mod.rs::managed_kafka_properties_are_refused"]),
    ("The sink sets `enable.auto.commit=false`, `enable.auto.offset.store=false`,", &["src/kafka/clients.rs::the_consumer_gets_the_documented_settings_per_protocol", "src/kafka/clients.rs::user_properties_override_the_fetch_settings", "src/config/mod.rs::every_managed_kafka_property_is_refused"]),
    ("never logged (passwords are shown as `***`", &["security::secrets_never_appear_in_logs_errors_or_check_output", "cli::check_reports_what_it_found_and_hides_the_password", "src/config/mod.rs::the_password_never_shows_in_debug_output"]),
    ("| `idle_in_transaction_timeout` | `60s` |", &["src/config/mod.rs::every_documented_default_holds"]),
    ("| `connect_timeout` | `10s` | per connection attempt |", &["cli::connect_timeout_bounds_an_attempt_to_a_server_that_never_answers", "src/config/mod.rs::every_documented_default_holds"]),
    ("bound on any statement of a batch transaction", &["batching::statement_timeout_fails_a_stuck_batch_which_is_rewound_and_retried"]),
    ("| `retry_backoff_min` / `retry_backoff_max` | `100ms` / `30s` |", &["src/config/mod.rs::every_documented_default_holds", "src/pipeline/lanes.rs::backoff_grows_from_the_minimum_to_the_cap_with_jitter"]),
    ("`text` or `json` (one object per line)", &["cli::json_logs_are_one_object_per_line_and_carry_the_progress_line"]),
    ("progress line (records/s, rows/s, rows committed, commit latency)", &["cli::json_logs_are_one_object_per_line_and_carry_the_progress_line", "src/config/mod.rs::every_documented_default_holds"]),
    ("`RUST_LOG` filters output (default `info`", &["cli::rust_log_filters_what_is_logged"]),
    ("a regular expression (anchored at the start): every matching topic", &["formats::a_pattern_subscription_picks_up_a_topic_created_while_running", "src/routing.rs::names_win_over_patterns_and_templates_sanitise"]),
    ("names are cut at 63 bytes like PostgreSQL does", &["src/routing.rs::names_win_over_patterns_and_templates_sanitise"]),
    ("the target table's schema", &["mapping::the_schema_setting_writes_into_a_table_outside_public", "src/config/mod.rs::defaults_fill_the_gaps"]),
    ("`insert` (`upsert` for debezium", &["formats::debezium_changes_replicate_the_source_state"]),
    ("upsert key columns; must be the primary key or a unique index", &["mapping::upsert_by_a_unique_index_that_is_not_the_primary_key", "src/mapping/tests.rs::upsert_keys_must_be_backed_by_a_unique_index", "formats::upsert_applies_updates_and_tombstones_in_order_per_key"]),
    ("a JSON object's fields by name, or a plain string or number", &["src/mapping/tests.rs::key_from_key_reads_plain_and_object_keys", "formats::upsert_applies_updates_and_tombstones_in_order_per_key"]),
    ("a record with a null value deletes its key's row (key columns from the record key", &["formats::upsert_applies_updates_and_tombstones_in_order_per_key", "src/mapping/tests.rs::tombstones_delete_by_the_record_key_when_asked", "cli::check_validates_modes_formats_and_columns_against_the_table"]),
    ("text: must be UTF-8; bytea: anything", &["src/mapping/tests.rs::raw_text_must_be_utf8_and_raw_bytea_takes_any_bytes", "src/mapping/tests.rs::raw_values_go_whole_into_one_column", "formats::raw_values_land_whole_with_their_metadata"]),
    ("map every column not otherwise mapped to the value field of the same name", &["src/mapping/tests.rs::fields_map_by_name_and_unknown_fields_are_ignored", "formats::explicit_mappings_reach_nested_fields_and_name_what_is_missing"]),
    ("larger records (key + value) are errors (`too_large`) without being decoded", &["src/mapping/tests.rs::max_record_bytes_counts_key_and_value_and_refuses_before_decoding", "bad_input::every_offset_becomes_a_row_or_a_dead_letter_exactly_once"]),
    ("a column that is not a timestamp, timestamptz, date, time, timetz or interval is refused at startup", &["formats::schemaless_debezium_microseconds_land_exactly_with_their_time_unit", "src/config/mod.rs::a_topic_time_unit_of_days_is_refused", "src/mapping/tests.rs::time_units_must_name_time_columns_and_fit_them", "src/mapping/tests.rs::bytea_encoding_names_bytea_columns_and_time_units_take_times_of_day_and_intervals"]),
    ("A named topic's entry wins over a pattern that also matches it", &["src/routing.rs::names_win_over_patterns_and_templates_sanitise"]),
    ("exist stops the sink with the table's name (tables are never created implicitly)", &["mapping::a_topic_whose_table_does_not_exist_stops_the_sink_and_no_table_is_created", "cli::check_names_each_problem_in_a_bad_config"]),
    ("read from PostgreSQL at startup", &["cli::check_reports_what_it_found_and_hides_the_password", "cli::check_validates_modes_formats_and_columns_against_the_table"]),
    ("`\"/items/0\"` indexes arrays; `\"value:\"` is the whole value", &["formats::explicit_mappings_reach_nested_fields_and_name_what_is_missing", "src/mapping/tests.rs::explicit_columns_take_pointers_keys_metadata_constants_and_defaults"]),
    ("the whole record key (JSON if it parses, else its text", &["src/mapping/tests.rs::explicit_columns_take_pointers_keys_metadata_constants_and_defaults", "src/mapping/envelope.rs::keys_are_json_or_plain_text"]),
    ("a JSON pointer into the record key", &["src/mapping/tests.rs::key_pointers_read_fields_of_the_record_key"]),
    ("`\"meta:topic\"`, `\"meta:partition\"`, `\"meta:offset\"`", &["src/mapping/tests.rs::meta_sources_fill_columns_like_the_metadata_settings", "src/mapping/tests.rs::explicit_columns_take_pointers_keys_metadata_constants_and_defaults"]),
    ("tables and arrays become JSON, dates and times their text", &["src/mapping/tests.rs::constants_are_any_toml_value_and_tables_and_arrays_become_json"]),
    ("A column without a value takes its default", &["formats::explicit_mappings_reach_nested_fields_and_name_what_is_missing", "mapping::every_supported_type_and_metadata_column_round_trips", "src/mapping/tests.rs::errors_name_the_column_and_the_problem", "src/mapping/tests.rs::missing_defaulted_columns_are_left_out_of_the_row"]),
    ("A column nothing maps to that is `NOT NULL` without a default is refused at startup", &["src/mapping/tests.rs::a_not_null_column_nothing_maps_to_is_refused_at_startup"]),
    ("A JSON `null` is SQL `NULL`", &["mapping::every_supported_type_and_metadata_column_round_trips", "upsert::a_partial_upsert_leaves_the_columns_it_does_not_carry_alone"]),
    ("**`json`** (default): the value is a JSON object", &["bad_input::every_offset_becomes_a_row_or_a_dead_letter_exactly_once", "src/mapping/tests.rs::errors_name_the_column_and_the_problem"]),
    ("taken as written", &["formats::connect_json_records_load_with_their_schema", "formats::connect_decimals_load_from_base64_and_from_json_numbers", "src/mapping/convert.rs::connect_decimals_decode_exactly", "src/mapping/convert.rs::connect_decimals_come_as_base64_or_as_json_numbers", "src/mapping/envelope.rs::connect_envelopes_give_the_payload_and_schema_hints", "src/mapping/tests.rs::connect_decimals_and_dates_use_the_schema"]),
    ("`d` deletes the row with `before`'s key (or the record key's)", &["src/mapping/tests.rs::a_debezium_delete_without_before_deletes_by_the_record_key", "src/mapping/tests.rs::debezium_deletes_use_before_or_the_key", "formats::debezium_changes_replicate_the_source_state"]),
    ("truncate, `m` message) are never skipped: they are `decode` errors", &["formats::debezium_truncates_and_messages_stop_the_sink_or_become_decode_dead_letters", "src/mapping/tests.rs::debezium_truncates_and_messages_are_decode_errors_not_skips"]),
    ("Schema hints understood: Connect `Decimal`", &["src/mapping/tests.rs::debezium_variable_scale_decimals_and_json_strings_follow_their_schema", "formats::connect_json_records_load_with_their_schema", "formats::schemaless_debezium_microseconds_land_exactly_with_their_time_unit", "src/mapping/envelope.rs::debezium_events_become_writes_and_deletes"]),
    ("**`insert`**: every record becomes a row. Exactly once means no duplicates even without a key", &["delivery::ten_thousand_records_become_exactly_ten_thousand_rows_with_their_values", "crash::kill_9_at_random_moments_loses_and_duplicates_nothing"]),
    ("A tombstone in any other configuration is an error that stops the sink at that record", &["src/mapping/tests.rs::a_tombstone_is_an_error_not_a_silent_drop", "src/mapping/envelope.rs::connect_envelopes_give_the_payload_and_schema_hints", "bad_input::every_offset_becomes_a_row_or_a_dead_letter_exactly_once"]),
    ("string; numbers, booleans, objects and arrays as their JSON text", &["src/mapping/convert.rs::text_takes_strings_and_the_json_text_of_anything_else", "mapping::text_columns_take_the_json_text_of_non_strings_and_char_pads", "mapping::every_supported_type_and_metadata_column_round_trips", "bad_input::every_offset_becomes_a_row_or_a_dead_letter_exactly_once"]),
    ("integer number, or a string holding one; Connect decimals with scale 0", &["src/mapping/convert.rs::integers_refuse_fractions_and_what_does_not_fit", "src/mapping/convert.rs::connect_decimals_come_as_base64_or_as_json_numbers", "mapping::every_supported_type_and_metadata_column_round_trips"]),
    ("any precision and exponent", &["mapping::every_supported_type_and_metadata_column_round_trips", "src/pgcopy.rs::numeric_matches_postgres_layout", "src/pgcopy.rs::numeric_rejects_what_is_not_a_number", "src/pgcopy.rs::numeric_encoding_preserves_every_digit", "bad_input::every_offset_becomes_a_row_or_a_dead_letter_exactly_once", "formats::connect_decimals_load_from_base64_and_from_json_numbers"]),
    ("a string holding one", &["src/mapping/convert.rs::floats_take_numbers_and_numeric_strings_but_never_overflow", "mapping::every_supported_type_and_metadata_column_round_trips"]),
    ("`true`/`false` (or those strings)", &["src/mapping/convert.rs::booleans_are_true_or_false_as_json_or_strings_and_nothing_else", "mapping::every_supported_type_and_metadata_column_round_trips"]),
    ("an integer in the column's unit", &["src/mapping/convert.rs::timestamps_accept_iso_strings_and_epoch_units", "src/mapping/convert.rs::every_time_unit_reads_integers_before_and_after_1970", "mapping::every_supported_type_and_metadata_column_round_trips"]),
    ("`YYYY-MM-DD`; an integer in the column's unit", &["src/mapping/convert.rs::dates_refuse_strings_that_are_not_dates", "src/mapping/convert.rs::every_time_unit_reads_integers_before_and_after_1970", "mapping::every_supported_type_and_metadata_column_round_trips"]),
    ("`uuid` | UUID string | anything else", &["src/mapping/convert.rs::uuids_must_be_uuid_strings", "mapping::every_supported_type_and_metadata_column_round_trips"]),
    ("any JSON value, stored as sent (jsonb normalises)", &["src/mapping/convert.rs::json_is_stored_as_sent_but_never_with_nul", "src/mapping/tests.rs::debezium_variable_scale_decimals_and_json_strings_follow_their_schema", "mapping::every_supported_type_and_metadata_column_round_trips"]),
    ("| `bytea` | base64 string (standard alphabet);", &["src/mapping/convert.rs::bytea_takes_standard_base64_and_refuses_anything_else", "mapping::every_supported_type_and_metadata_column_round_trips"]),
    ("A record whose schema gives the field another unit is a `mapping` error", &["src/mapping/tests.rs::time_units_apply_per_topic_and_per_column", "src/mapping/tests.rs::a_schema_unit_beats_the_topic_unit_but_must_agree_with_a_column_unit", "formats::schemaless_debezium_microseconds_land_exactly_with_their_time_unit"]),
    ("finer digits (nanoseconds) are dropped toward the past", &["src/mapping/convert.rs::every_time_unit_reads_integers_before_and_after_1970", "formats::schemaless_debezium_microseconds_land_exactly_with_their_time_unit"]),
    ("`check` warns about each time column that reads integers", &["cli::check_warns_about_integer_times_without_a_unit", "src/mapping/tests.rs::only_time_columns_fed_from_the_record_without_a_unit_are_guesses"]),
    ("`headers` keeps every header as sent, in order, repeated names included", &["src/mapping/tests.rs::header_columns_store_what_was_sent_and_text_refuses_what_it_cannot_hold", "mapping::every_supported_type_and_metadata_column_round_trips"]),
    ("Generated columns and identity columns `GENERATED ALWAYS` are never written.", &["mapping::generated_and_identity_columns_are_left_to_postgres"]),
    ("are refused at startup with the column's name", &["mapping::a_column_type_the_sink_cannot_write_stops_it_at_startup_naming_the_column"]),
    ("**in the same transaction** as its batch and the offsets", &["dead_letters::dead_letters_commit_with_their_batch_through_kill_9", "bad_input::every_offset_becomes_a_row_or_a_dead_letter_exactly_once"]),
    ("its row is refreshed (new reason, `failed_at`) rather than duplicated", &["bad_input::a_reread_after_a_reset_dead_letters_again_in_place"]),
    ("a constraint (unique, check, not null, foreign key)", &["dead_letters::every_error_kind_reaches_its_dead_letter", "bad_input::every_offset_becomes_a_row_or_a_dead_letter_exactly_once"]),
    ("those rows become dead letters and the rest commits normally", &["bad_input::every_offset_becomes_a_row_or_a_dead_letter_exactly_once", "rejected::dead_lettered_rows_are_not_counted_as_written"]),
    ("Errors that no row explains (a missing table, a", &["security::errors_no_row_explains_stop_the_sink_instead_of_dead_lettering"]),
    ("so the topic gets each", &["dead_letters::dead_letters_commit_with_their_batch_through_kill_9", "bad_input::a_dead_letter_keeps_every_header_of_its_record_byte_for_byte"]),
    ("kafka-pg-sink dead-letters list --config sink.toml [--topic orders] [--json]", &["dead_letters::dead_letters_are_listed_and_replayed_as_selected"]),
    ("one that still fails stays there with the new reason (and the command", &["dead_letters::dead_letters_are_listed_and_replayed_as_selected", "bad_input::every_offset_becomes_a_row_or_a_dead_letter_exactly_once"]),
    ("In upsert mode a replayed record overwrites any newer row with its key", &["dead_letters::a_replay_in_upsert_mode_overwrites_a_newer_row_for_its_key"]),
    ("a transaction fails (connection lost, server restart, serialization failure, deadlock, admin shutdown, timeout)", &["batching::serialization_failures_and_deadlocks_are_retried_to_exactly_once", "batching::statement_timeout_fails_a_stuck_batch_which_is_rewound_and_retried", "faults::writer_sessions_killed_mid_transaction_roll_back_and_rewind", "faults::a_commit_whose_answer_is_lost_is_resolved_by_rereading_not_by_guessing", "restarts::postgres_stopped_and_restarted_during_a_load_loses_and_duplicates_nothing"]),
    ("a committed batch is not written again, an uncommitted one is", &["faults::a_commit_whose_answer_is_lost_is_resolved_by_rereading_not_by_guessing"]),
    ("PostgreSQL down during a rebalance", &["faults::a_claim_the_network_never_answers_is_abandoned_client_side_and_retried", "supervision::a_claim_the_database_never_answers_stops_the_sink_within_the_poll_interval"]),
    ("a writer task dies", &["supervision::a_writer_that_panics_stops_the_sink_with_exit_1_and_a_restart_completes"]),
    ("a broker certificate the configured CA did not sign", &["security::a_rejected_broker_certificate_says_not_ready_then_exits_1", "supervision::run_with_a_wrong_kafka_password_says_not_ready_then_exits_1"]),
    ("the Kafka broker restarts or is unreachable", &["restarts::the_kafka_broker_stopped_and_restarted_during_a_load_loses_and_duplicates_nothing"]),
    ("`INFO revoked … lost=true`, or `WARN fenced: another consumer owns these partitions now`", &["zombie::a_claim_ends_the_session_of_a_previous_owner_stopped_inside_a_transaction"]),
    ("outside its range L..H", &["out_of_range::deleted_history_stops_the_sink_or_is_skipped_and_recorded_by_policy", "out_of_range::a_position_lost_while_running_moves_to_latest_or_stops_the_sink_by_policy", "out_of_range::a_recreated_topic_stops_the_sink_with_its_range"]),
    ("names from configuration are always quoted", &["security::hostile_identifiers_are_quoted_never_executed", "src/schema.rs::identifiers_are_quoted_and_escaped"]),
    ("`password`, `secret`, `token`, `sasl.jaas.config`, `ssl.key.pem` or `private`", &["src/config/kafka.rs::every_secret_looking_property_is_redacted", "cli::check_hides_every_secret_looking_property", "src/kafka/clients.rs::a_refused_secret_property_does_not_repeat_its_value", "security::secrets_never_appear_in_logs_errors_or_check_output"]),
    ("every command (`migrate` too) reads the URL this way, and a variable that is not set is an error naming it", &["cli::migrate_reads_the_password_from_the_environment_like_run_and_check", "src/config/mod.rs::migrate_reads_the_url_as_run_does"]),
    ("`migrate`, `check` and `run` use the same connection code", &["security::postgres_over_verified_tls"]),
    ("Tested here: `SSL` with `ssl.ca.location`, and `SASL_PLAINTEXT` with `PLAIN`", &["security::kafka_over_sasl_scram_and_over_ssl_delivers_exactly_once", "security::gssapi_is_not_built_in", "security::secrets_never_appear_in_logs_errors_or_check_output"]),
    ("`security::the_documented_minimal_grants_are_enough` runs the", &["security::the_documented_minimal_grants_are_enough"]),
    ("Fencing a stopped previous owner ends that session with `pg_terminate_backend`", &["zombie::a_claim_ends_a_stopped_owner_under_the_documented_minimal_grants"]),
    ("nested deeper than 64 levels is refused before it is parsed", &["src/mapping/tests.rs::nesting_of_64_levels_is_accepted_and_65_refused", "src/mapping/tests.rs::deep_nesting_is_refused_but_brackets_in_strings_do_not_count", "bad_input::every_offset_becomes_a_row_or_a_dead_letter_exactly_once"]),
    ("creates or upgrades the sink's tables; safe to run repeatedly and concurrently", &["cli::migrate_upgrades_a_database_migrated_to_v1_only", "cli::migrate_twice_is_a_no_op_and_concurrent_runs_do_not_collide", "cli::migrate_reads_the_password_from_the_environment_like_run_and_check"]),
    ("exits 1 listing every problem", &["cli::check_names_each_problem_in_a_bad_config", "cli::check_reports_what_it_found_and_hides_the_password", "cli::check_warns_about_integer_times_without_a_unit", "cli::connect_timeout_bounds_an_attempt_to_a_server_that_never_answers", "cli::check_hides_every_secret_looking_property"]),
    ("exits 0 after a clean stop, 1 on an error that needs a person (the log line says what to do", &["delivery::ten_thousand_records_become_exactly_ten_thousand_rows_with_their_values", "rejected::a_refused_row_stops_the_sink_at_that_record", "supervision::a_claim_the_database_never_answers_stops_the_sink_within_the_poll_interval", "supervision::a_writer_that_panics_stops_the_sink_with_exit_1_and_a_restart_completes", "supervision::batches_queued_behind_a_failure_are_not_counted_as_fenced", "supervision::run_with_a_wrong_kafka_password_says_not_ready_then_exits_1", "out_of_range::deleted_history_stops_the_sink_or_is_skipped_and_recorded_by_policy"]),
    ("| `kafka-pg-sink offsets show` / `reset` | read and move positions safely", &["operations::lag_and_offsets_show_print_every_partition_with_totals_per_topic", "operations::offsets_reset_to_every_target_and_under_a_running_sink"]),
    ("arrays of the types above (`text[]`, `integer[]`, `bigint[]`, `numeric[]`, `boolean[]`, `uuid[]`, `timestamptz[]`, `jsonb[]`,", &["arrays::json_arrays_of_every_element_type_land_exactly_and_bad_ones_are_dead_letters", "arrays::array_columns_upsert_with_the_last_record_per_key_winning", "src/mapping/convert/array.rs::elements_are_written_as_their_scalar_columns_with_nulls_flagged"]),
    ("a JSON array, each element converted exactly as for a column of the element type", &["src/mapping/convert/array.rs::each_element_converts_as_its_scalar_column_would", "src/mapping/convert/array.rs::integers_and_text_come_back_as_sent", "arrays::json_arrays_of_every_element_type_land_exactly_and_bad_ones_are_dead_letters"]),
    ("(a time unit applies to each element)", &["src/mapping/tests.rs::time_units_apply_to_each_element_of_an_array_of_times"]),
    ("`null` elements become NULL elements; `[]` is an empty array", &["src/mapping/convert/array.rs::elements_are_written_as_their_scalar_columns_with_nulls_flagged", "src/mapping/convert/array.rs::an_empty_array_has_no_dimensions", "arrays::json_arrays_of_every_element_type_land_exactly_and_bad_ones_are_dead_letters"]),
    ("Avro arrays and Protobuf repeated fields arrive as JSON arrays", &["arrays::avro_arrays_land_in_array_columns", "arrays::protobuf_repeated_fields_land_in_array_columns"]),
    ("anything but a JSON array: a scalar is never wrapped into one, a string such as `\"{1,2}\"` is not parsed; a nested array (multi-dimensional arrays are not supported, in `jsonb[]` and `text[]` too)", &["src/mapping/convert/array.rs::nested_arrays_scalars_and_bad_elements_are_refused_by_name", "arrays::json_arrays_of_every_element_type_land_exactly_and_bad_ones_are_dead_letters"]),
    ("an element its type refuses, named by position (`element 2: …`)", &["src/mapping/convert/array.rs::nested_arrays_scalars_and_bad_elements_are_refused_by_name", "src/mapping/convert/array.rs::each_element_converts_as_its_scalar_column_would", "arrays::json_arrays_of_every_element_type_land_exactly_and_bad_ones_are_dead_letters"]),
    ("arrays and repeated fields also array columns (`text[]`, `bigint[]`, …)", &["arrays::avro_arrays_land_in_array_columns", "arrays::protobuf_repeated_fields_land_in_array_columns"]),
    ("the chart never creates a Secret, it only references them", &["deploy::the_chart_renders_probes_secrets_the_migrate_hook_and_refuses_surplus_replicas"]),
    ("liveness on `/health`, readiness on `/ready`", &["deploy::the_chart_renders_probes_secrets_the_migrate_hook_and_refuses_surplus_replicas"]),
    ("A changed config rolls the pods", &["deploy::the_chart_renders_probes_secrets_the_migrate_hook_and_refuses_surplus_replicas"]),
    ("and rollouts that replace one process at a time without a surge pod", &["deploy::the_chart_renders_probes_secrets_the_migrate_hook_and_refuses_surplus_replicas"]),
    ("`migrate` as a **pre-install/pre-upgrade hook Job** with the database URL alone", &["deploy::the_chart_renders_probes_secrets_the_migrate_hook_and_refuses_surplus_replicas"]),
    ("so the chart refuses `replicaCount` above `partitions`", &["deploy::the_chart_renders_probes_secrets_the_migrate_hook_and_refuses_surplus_replicas", "deploy::deploy_check_validates_the_chart_the_keda_examples_and_the_alerts"]),
    ("validates every rendered manifest with `kubernetes-validate --strict` against the Kubernetes 1.33 JSON schemas", &["deploy::deploy_check_validates_the_chart_the_keda_examples_and_the_alerts"]),
    ("`maxReplicaCount` equal to the partition count", &["deploy::deploy_check_validates_the_chart_the_keda_examples_and_the_alerts"]),
    ("each alert fires on the series that should fire it and stays silent otherwise", &["alerts::the_alert_rules_pass_promtool_check_and_their_unit_tests"]),
    ("`alerts::` scrapes a running sink with a real Prometheus loading the rules", &["alerts::a_real_prometheus_scrapes_the_sink_and_evaluates_every_alert_rule"]),
    ("schema and table names are always quoted in SQL, so names with capitals, spaces or dashes", &["partitioned::a_range_partitioned_table_in_another_schema_takes_inserts_and_dead_letters_what_fits_no_partition", "partitioned::a_list_partitioned_table_takes_upserts_and_dead_letters_a_region_no_partition_lists"]),
    ("A declaratively partitioned table (`PARTITION BY RANGE` or `LIST`) is a target like any other", &["partitioned::a_range_partitioned_table_in_another_schema_takes_inserts_and_dead_letters_what_fits_no_partition", "partitioned::a_list_partitioned_table_takes_upserts_and_dead_letters_a_region_no_partition_lists"]),
    ("so the upsert key must include them", &["partitioned::a_list_partitioned_table_takes_upserts_and_dead_letters_a_region_no_partition_lists"]),
    ("A row that no partition accepts (SQLSTATE 23514", &["partitioned::a_range_partitioned_table_in_another_schema_takes_inserts_and_dead_letters_what_fits_no_partition", "partitioned::a_list_partitioned_table_takes_upserts_and_dead_letters_a_region_no_partition_lists", "rejected::a_refused_row_stops_the_sink_at_that_record"]),
    ("| `table_from` | | routing by record", &["routing::routing_to_three_tables_by_header_from_one_topic_exactly_once", "routing::a_multi_table_debezium_topic_reproduces_each_source_table_exactly_once", "src/config/table_from.rs::bad_routing_settings_are_refused"]),
    ("| `tables` | | with `table_from`: the only tables", &["routing::routing_to_three_tables_by_header_from_one_topic_exactly_once", "src/record_routing.rs::a_header_names_a_listed_table_and_anything_else_is_refused", "src/config/table_from.rs::bad_routing_settings_are_refused"]),
    ("| `table_pattern` | | with `table_from`, instead of `tables`", &["routing::a_multi_table_debezium_topic_reproduces_each_source_table_exactly_once", "routing::under_fail_a_missing_or_refused_table_stops_the_sink_at_its_record", "src/record_routing.rs::a_field_names_a_table_matching_the_whole_pattern"]),
    ("must then be in `tables` or match `table_pattern` whole **before any catalog lookup**", &["routing::routing_to_three_tables_by_header_from_one_topic_exactly_once", "routing::a_multi_table_debezium_topic_reproduces_each_source_table_exactly_once", "routing::under_fail_a_missing_or_refused_table_stops_the_sink_at_its_record", "src/record_routing.rs::a_header_names_a_listed_table_and_anything_else_is_refused", "src/record_routing.rs::a_field_names_a_table_matching_the_whole_pattern"]),
    ("a record naming a table outside the list is a `routing` error", &["routing::routing_to_three_tables_by_header_from_one_topic_exactly_once", "routing::a_multi_table_debezium_topic_reproduces_each_source_table_exactly_once", "routing::under_fail_a_missing_or_refused_table_stops_the_sink_at_its_record"]),
    ("A header must be UTF-8 without NUL; a missing header, a null value, an empty name or one longer than 63 bytes is a `routing` error too", &["routing::routing_to_three_tables_by_header_from_one_topic_exactly_once", "src/record_routing.rs::a_header_names_a_listed_table_and_anything_else_is_refused"]),
    ("into its `payload` when the value has the `{\"schema\", \"payload\"}` envelope) and must hold a string", &["routing::a_multi_table_debezium_topic_reproduces_each_source_table_exactly_once", "src/record_routing.rs::a_field_names_a_table_matching_the_whole_pattern"]),
    ("`table_from.field` is refused at startup for registry formats and `raw`", &["src/config/table_from.rs::bad_routing_settings_are_refused"]),
    ("the tables in `tables` are described at startup (a missing one stops the sink there", &["routing::under_fail_a_missing_or_refused_table_stops_the_sink_at_its_record"]),
    ("a table matching `table_pattern` when a record first names it (a missing one stops the sink at that record", &["routing::under_fail_a_missing_or_refused_table_stops_the_sink_at_its_record"]),
    ("All other settings of the topic (format, mode, key, metadata columns, `on_error`) apply to every table", &["routing::routing_to_three_tables_by_header_from_one_topic_exactly_once", "routing::a_multi_table_debezium_topic_reproduces_each_source_table_exactly_once"]),
    ("Rows of one topic for different tables in one batch commit in the batch's one transaction with the offsets", &["routing::routing_to_three_tables_by_header_from_one_topic_exactly_once", "routing::a_multi_table_debezium_topic_reproduces_each_source_table_exactly_once"]),
    ("foreign keys between routed tables must be `DEFERRABLE` (a parent and its child created, or deleted, in one batch then hold in either order)", &["routing_fixes::parents_and_children_in_one_batch_hold_deferrable_foreign_keys_both_ways", "src/writer/transaction.rs::constraints_are_deferred_only_for_one_topic_writing_several_tables"]),
    ("the sink stops with \"a deferred constraint failed at COMMIT\", under `on_error = \"dead_letter\"` too, with nothing of the batch written or dead-lettered and its position unchanged", &["routing_fixes::a_deferred_foreign_key_failing_at_commit_stops_the_sink_and_writes_nothing"]),
    ("a record larger than `max_record_bytes` is a `too_large` error and one nested deeper than 64 levels a `decode` error before any table is read from it", &["src/record_routing.rs::a_record_too_large_or_too_deep_is_refused_as_the_mapping_would", "routing_fixes::a_routed_record_too_large_or_too_deep_keeps_its_kind"]),
    ("PostgreSQL not answering while a table is described (the connection, a timeout, the pool) is not the record's fault and is retried after a backoff", &["src/pipeline/tests.rs::a_database_that_does_not_answer_while_a_routed_table_is_described_is_retried", "src/record_routing.rs::an_unanswered_describe_is_told_from_a_missing_table"]),
    ("`{topic}` in the template is the record's topic written as `sanitize` says, as for any topic", &["src/record_routing.rs::a_routed_template_replaces_topic_with_the_sanitised_topic"]),
    ("a letter naming a table that cannot be loaded, such as one the pattern allows but nobody created, still fails with the reason and the others are replayed", &["routing_fixes::replay_marks_a_letter_whose_table_cannot_be_loaded_and_writes_the_others"]),
    ("Per-column entries (`columns`, `time_units`, `bytea_encoding`) apply to the tables that have the column; one naming a column none of the listed `tables` has stops the sink at startup", &["routing_fixes::per_column_settings_apply_to_the_routed_tables_that_have_the_column"]),
    ("so it is taken as nothing and its offset advances", &["routing::a_multi_table_debezium_topic_reproduces_each_source_table_exactly_once", "src/record_routing.rs::a_field_names_a_table_matching_the_whole_pattern"]),
    ("`dead-letters replay` routes each letter again under the configuration of the day", &["routing::routing_to_three_tables_by_header_from_one_topic_exactly_once"]),
    ("`check` prints the routing and the mapping of every listed table", &["routing::routing_to_three_tables_by_header_from_one_topic_exactly_once"]),
    ("| `routing` | routing by record", &["routing::routing_to_three_tables_by_header_from_one_topic_exactly_once", "src/record_routing.rs::a_header_names_a_listed_table_and_anything_else_is_refused", "src/record_routing.rs::a_field_names_a_table_matching_the_whole_pattern"]),
    ("Each table has its own mapping, built once", &["src/pipeline/route.rs::each_table_is_described_once_and_only_when_allowed", "routing::a_multi_table_debezium_topic_reproduces_each_source_table_exactly_once"]),
];

/// Where a test named in `CLAIMS` lives, and whether a function of that name is there.
fn test_exists(root: &std::path::Path, test: &str) -> bool {
    let Some((file, name)) = test.rsplit_once("::") else {
        return false;
    };
    let path = if file.starts_with("src/") {
        root.join(file)
    } else {
        root.join("tests/it").join(format!("{file}.rs"))
    };
    // A test, not a helper it calls: the function must carry a test attribute, so deleting
    // the test and keeping its helper does not keep the promise "proven".
    let Ok(text) = std::fs::read_to_string(&path) else {
        return false;
    };
    let lines: Vec<&str> = text.lines().collect();
    lines.iter().enumerate().any(|(i, line)| {
        let line = line.trim_start();
        (line.starts_with(&format!("fn {name}(")) || line.starts_with(&format!("async fn {name}(")))
            && lines[..i]
                .iter()
                .rev()
                .map(|l| l.trim())
                .take_while(|l| l.starts_with("#[") || l.starts_with("///"))
                .any(|l| l.starts_with("#[test]") || l.starts_with("#[tokio::test"))
    })
}

#[test]
fn every_readme_promise_is_listed_with_tests_that_exist() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    // Sentences wrap across lines in README.md: compare with white space folded.
    let readme = std::fs::read_to_string(root.join("README.md"))
        .expect("README.md")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    let mut problems = Vec::new();
    for (fragment, tests) in CLAIMS {
        if !readme.contains(fragment) {
            problems.push(format!("README.md no longer says {fragment:?}"));
        }
        if tests.is_empty() {
            problems.push(format!("{fragment:?} names no test"));
        }
        for test in tests.iter().filter(|t| !test_exists(root, t)) {
            problems.push(format!("{fragment:?}: test {test} does not exist"));
        }
    }
    assert!(
        problems.is_empty(),
        "README promises and their tests drifted apart:\n{}",
        problems.join("\n")
    );
}
