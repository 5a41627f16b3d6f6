import pytest
import yaml

from airflow_cdc_provider.core.changelog import ChangelogSettings
from airflow_cdc_provider.core.config import (
    LEGACY_KEYS,
    SECTIONS,
    CdcConfig,
    ConfigError,
    HiveConfig,
    TableConfig,
    TablePattern,
    TableSettings,
    expectation,
)
from airflow_cdc_provider.core.errors import InvalidIdentifier
from airflow_cdc_provider.core.history import HistorySettings
from airflow_cdc_provider.core.identifiers import TableName
from airflow_cdc_provider.core.partitioning import PartitionSpec
from tests.conftest import DAGS, read_config


def test_example_config_reads():
    config = read_config(yaml.safe_load((DAGS / "cdc_config.yaml").read_text()))
    assert config.source.mysql_conn_id == "mysql_cdc" and config.hive.metastore_uri is None
    assert config.tables[0].source == TableName("shop", "orders")
    assert config.tables[0].target == "shop_orders"


def test_target_and_short_form():
    config = read_config({"tables": ["shop.a", {"source": "shop.b", "target": "bee"}]})
    assert [t.target for t in config.tables] == ["shop_a", "bee"]
    assert [t.group_id for t in config.tables] == ["shop__a", "shop__b"]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([], "must be a mapping"),
        ({"tables": []}, "non-empty `tables:`"),
        ({"tables": ["shop.a"], "tabels": 1}, "unknown keys \\['tabels'\\]"),
        ({"tables": [{"src": "shop.a"}]}, "must be `source: schema.table`"),
        ({"tables": ["shop.a", "shop.a"]}, "shop.a more than once"),
        ({"tables": ["shop.a"], "hive": {"db": "x"}}, (r"`hive:` in the configuration has unknown keys \['db'\]; the "
                                                      r"keys of `hive:` are changelog, database, history, keep_versions")),
    ],
)
def test_bad_configs_say_what_is_wrong(data, message):
    with pytest.raises(ConfigError, match=message):
        read_config(data)


def test_bad_table_name():
    with pytest.raises(InvalidIdentifier, match="'orders'"):
        read_config({"tables": ["orders"]})


def test_hive_names_are_checked_and_lower_cased():
    config = read_config({"tables": [{"source": "Shop.Orders"}], "hive": {"database": "ODS"}})
    assert config.hive.database == "ods" and config.tables[0].hive_table(config.hive) == "ods.shop_orders"
    with pytest.raises(ConfigError,
                       match=r"'shop_order-lines' is not a valid Hive name.*Set `target:` for shop.order-lines"):
        read_config({"tables": ["shop.`order-lines`"]})
    with pytest.raises(InvalidIdentifier, match="'my.db' is not a valid Hive name"):
        read_config({"tables": ["shop.a"], "hive": {"database": "my.db"}})


@pytest.mark.parametrize(("key", "value"),
                         [("keep_versions", 1), ("retries", -1), ("retries", "2"), ("keep_versions", True)])
def test_counts_must_be_whole_numbers_in_range(key, value):
    with pytest.raises(ConfigError, match=f"`{key}:`.*got {value!r}"):
        read_config({"tables": ["shop.a"], key: value})


def test_schema_changes_is_strict_unless_set_for_all_or_per_table():
    config = read_config({"schema_changes": "evolve",
                                  "tables": ["shop.a", {"source": "shop.b", "schema_changes": "strict"}]})
    assert [config.policy(t) for t in config.tables] == ["evolve", "strict"]
    assert read_config({"tables": ["shop.a"]}).policy(TableConfig(TableName("shop", "a"), "a")) == "strict"
    with pytest.raises(ConfigError, match="`schema_changes:` of shop.a in the configuration must be one of strict, "
                                          "evolve, got 'loose'"):
        read_config({"tables": [{"source": "shop.a", "schema_changes": "loose"}]})


# Patterns: one entry selecting many tables, resolved at each run (core.catalog).


def entries(*tables, **rest):
    return read_config({"tables": list(tables), **rest}).tables


def test_every_yaml_form_of_an_entry():
    text = r"""
tables:
  - shop.orders
  - source: shop.customers
  - source: shop.order_*
  - source: "*.orders"
  - source: shop.*
    exclude: shop.tmp_*
    target: raw_{table}
    schema_changes: evolve
  - regex: 'shop\.(orders|customers)_\d+'
    exclude: ['shop\.orders_0+']
"""
    tables = read_config(yaml.safe_load(text)).tables
    assert tables[:2] == (TableConfig(TableName("shop", "orders"), "shop_orders"),
                          TableConfig(TableName("shop", "customers"), "shop_customers"))
    assert tables[2] == TablePattern("shop", "order_*")
    assert tables[3] == TablePattern("*", "orders")
    assert tables[4] == TablePattern("shop", "*", exclude=("shop.tmp_*",), target="raw_{table}",
                                     settings=TableSettings(schema_changes="evolve"))
    assert tables[5].regex.pattern == r"shop\.(orders|customers)_\d+" and tables[5].exclude == (r"shop\.orders_0+",)
    assert [str(t) for t in tables[2:]] == ["shop.order_*", "*.orders", "shop.*", r"regex shop\.(orders|customers)_\d+"]


def test_named_tables_and_has_patterns():
    config = read_config({"tables": ["shop.*", "shop.a", {"source": "shop.b", "target": "bee"}]})
    assert config.named_tables() == (TableConfig(TableName("shop", "a"), "shop_a"),
                                     TableConfig(TableName("shop", "b"), "bee"))
    assert config.has_patterns
    assert not read_config({"tables": ["shop.a"]}).has_patterns


@pytest.mark.parametrize(("source", "schema", "table"), [
    ("shop.?rders", "shop", "?rders"),
    ("shop.[ab]*", "shop", "[ab]*"),
    ("sh*.orders", "sh*", "orders"),
    ("`my.db`.order_*", "my.db", "order_*"),  # the quoted part holds a dot, and is a name
    ("`my*db`.order_*", "my[*]db", "order_*"),  # a quoted part is literal: its * is escaped
])
def test_a_source_with_an_unquoted_wildcard_is_a_glob(source, schema, table):
    (pattern,) = entries(source)
    assert (pattern.schema, pattern.table, pattern.regex) == (schema, table, None)
    assert entries(str(pattern)) == (pattern,)  # str() gives back what parses to the same pattern


def test_a_quoted_wildcard_is_a_name_not_a_pattern():
    (table,) = entries({"source": "shop.`order_*`", "target": "t"})
    assert table == TableConfig(TableName("shop", "order_*"), "t")
    # Messages print such a name quoted, as the configuration must write it.
    with pytest.raises(ConfigError,
                       match=r"'shop_order_\*' is not a valid Hive name.*Set `target:` for shop.`order_\*`"):
        entries("`shop`.`order_*`")


def test_quoted_literal_parts_match_only_themselves():
    (pattern,) = entries("`my*db`.order_*")
    assert pattern.matches(TableName("my*db", "order_1"))
    assert not pattern.matches(TableName("myXdb", "order_1"))
    assert str(pattern) == "my[*]db.order_*"
    (dotted,) = entries("`my.db`.order_*")
    assert dotted.matches(TableName("my.db", "order_1")) and not dotted.matches(TableName("myXdb", "order_1"))
    assert str(dotted) == "`my.db`.order_*"


def test_globs_match_case_sensitively_and_per_part():
    pattern = TablePattern("shop", "order_*")
    assert pattern.matches(TableName("shop", "order_2024"))
    assert not pattern.matches(TableName("shop", "Order_2024"))
    assert not pattern.matches(TableName("SHOP", "order_2024"))
    assert not pattern.matches(TableName("shop2", "order_1"))
    # A glob part never spans the dot between schema and table.
    assert not TablePattern("sh*", "orders").matches(TableName("shop.x", "y"))
    assert TablePattern("*", "orders").matches(TableName("my.db", "orders"))


def test_glob_exclude_is_matched_against_schema_dot_table():
    (pattern,) = entries({"source": "*.*", "exclude": ["*.tmp_*", "audit.*"]})
    assert pattern.matches(TableName("shop", "orders"))
    assert not pattern.matches(TableName("shop", "tmp_1"))
    assert not pattern.matches(TableName("audit", "log"))
    assert pattern.matches(TableName("shop", "TMP_1"))  # case-sensitive too
    (one,) = entries({"source": "shop.*", "exclude": "shop.orders"})
    assert one.exclude == ("shop.orders",) and not one.matches(TableName("shop", "orders"))


def test_regex_is_a_full_match_against_schema_dot_table():
    (pattern,) = entries({"regex": r"shop\.orders_\d+", "exclude": r"shop\.orders_0"})
    assert pattern.matches(TableName("shop", "orders_12"))
    assert not pattern.matches(TableName("shop", "orders_12x"))  # full match, not a prefix
    assert not pattern.matches(TableName("xshop", "orders_12"))
    assert not pattern.matches(TableName("shop", "Orders_12"))
    assert not pattern.matches(TableName("shop", "orders_0"))  # excluded, in full
    assert pattern.matches(TableName("shop", "orders_01"))
    # The text is the raw names joined by a dot: no backticks around a name holding a dot.
    (dotted,) = entries({"regex": r"my\.db\.o.*"})
    assert dotted.matches(TableName("my.db", "orders"))


def test_target_template_and_table_config():
    (pattern,) = entries({"source": "*.orders_*", "target": "raw_{schema}__{table}", "schema_changes": "evolve"})
    assert pattern.table_config(TableName("Shop", "orders_1")) == TableConfig(TableName("Shop", "orders_1"),
                                                                              "raw_shop__orders_1",
                                                                              TableSettings(schema_changes="evolve"))
    (default,) = entries("shop.*")
    assert default.table_config(TableName("shop", "a")).target == "shop_a"
    assert default.table_config(TableName("shop", "a")).hive_table(HiveConfig(warehouse_dir="/srv/cdc/warehouse")) == "ods.shop_a"


def test_a_template_that_makes_a_bad_hive_name_says_which_table_and_what_to_do():
    (pattern,) = entries("shop.*")
    with pytest.raises(ConfigError) as err:
        pattern.table_config(TableName("shop", "order-lines"))
    message = str(err.value)
    assert "'shop_order-lines' is not a valid Hive name" in message
    assert "'{schema}_{table}'" in message and "shop.*" in message
    assert "Set `target:` for shop.order-lines" in message


@pytest.mark.parametrize(("target", "message"), [
    ("raw_{schema}", r"'raw_\{schema\}' of the pattern shop.\* in the configuration lacks \{table\}"),
    ("{table}_{db}", r"uses \{db\}: only \{schema\} and \{table\} may appear"),
    ("{table!r}", r"uses \{table!r\}"),
    ("{table:>9}", r"uses \{table:>9\}"),
    ("{}", r"uses \{\}"),
    ("{table", r"'\{table' of the pattern shop.\* .*is not valid"),
    ("raw-{table}", r"makes Hive names like 'raw-t', which Hive refuses"),
    (3, r"must be a template string, got 3"),
])
def test_bad_target_templates(target, message):
    with pytest.raises(ConfigError, match=message) as err:
        entries({"source": "shop.*", "target": target})
    assert "for example 'raw_{schema}_{table}'" in str(err.value)


@pytest.mark.parametrize(("entry", "message"), [
    ({"source": "shop.a", "exclude": "shop.b"},
     r"The entry shop.a in the configuration has `exclude:`, but it names one table.*Remove it"),
    ({"source": "shop.*", "regex": "shop\\..*"}, r"has both `source:` and `regex:`: keep one of them"),
    ({"regex": "shop\\.(orders"}, r"The regular expression 'shop\\\\.\(orders' .*does not compile: "
                                  r"missing \), unterminated subpattern.*Fix it"),
    ({"regex": "shop\\..*", "exclude": ["a[b"]}, r"'a\[b' \(an `exclude:` of the pattern regex shop\\.\.\* in the "
                                                r"configuration\) does not compile: unterminated character set"),
    ({"regex": ""}, r"must be a non-empty regular expression, got ''"),
    ({"regex": 5}, r"must be a non-empty regular expression, got 5"),
    ({"source": "shop.*", "exclude": []}, r"`exclude:` of the pattern shop.\* .* got \[\]"),
    ({"source": "shop.*", "exclude": [1]}, r"non-empty string or list of strings .*got \[1\]"),
    ({"source": "shop.*", "exclude": "tmp"}, r"The `exclude:` 'tmp' of the pattern shop.\* .*can never match.*\*.tmp"),
    ({"source": "shop.*", "schema_changes": "loose"},
     r"`schema_changes:` of the pattern shop.\* in the configuration must be one of strict, evolve, got 'loose'"),
    ({"source": "shop.*", "tgt": "x"}, r"must be `source: schema.table`"),
    ({"target": "x"}, r"must be `source: schema.table`"),
    ("*", r"The table pattern '\*' in the configuration is not of the form schema.table.*shop.\*"),
    ("a.b.*", r"'a.b.\*' .*not of the form schema.table"),
    (".*", r"'.\*' .*not of the form schema.table: write both parts"),
])
def test_bad_entries_say_what_is_wrong(entry, message):
    with pytest.raises(ConfigError, match=message):
        entries(entry)


def test_a_named_target_is_a_name_not_a_template():
    with pytest.raises(ConfigError, match=r"'\{table\}_x' is not a valid Hive name.*Set `target:` for shop.a.*"
                                          r"apply only to a pattern's target"):
        entries({"source": "shop.a", "target": "{table}_x"})


def test_a_literal_part_of_a_pattern_must_be_a_valid_name():
    with pytest.raises(InvalidIdentifier, match="schema name 'shop ' ends with a space"):
        entries("`shop `.*")


def test_identical_patterns_are_refused_but_different_excludes_are_not():
    with pytest.raises(ConfigError, match=r"lists the pattern shop.\* more than once.*Keep one entry"):
        entries("shop.*", {"source": "shop.*", "target": "x_{table}"})
    with pytest.raises(ConfigError, match=r"pattern regex a\\..* more than once"):
        entries({"regex": r"a\..*"}, {"regex": r"a\..*"})
    assert len(entries("shop.*", {"source": "shop.*", "exclude": "shop.tmp_*"})) == 2
    assert len(entries("shop.*", "shop.a")) == 2  # a named entry beside a pattern that matches it is fine


@pytest.mark.parametrize(("key", "section", "default"), [("snapshot_concurrency", "source", 4),
                                                       ("merge_applications", "spark", 1)])
def test_concurrency_settings(key, section, default):
    assert getattr(getattr(read_config({"tables": ["shop.a"]}), section), key) == default
    assert getattr(getattr(read_config({"tables": ["shop.a"], key: 7}), section), key) == 7
    for bad in (0, -1, "2", True, 1.5):
        with pytest.raises(ConfigError, match=f"`{key}:` in the configuration must be a whole number >= 1, "
                                              f"got {bad!r}"):
            read_config({"tables": ["shop.a"], key: bad})


def test_the_readers_time_zone_is_utc_unless_set_to_a_region():
    assert read_config({"tables": ["shop.a"]}).hive.time_zone == "UTC"
    config = read_config({"tables": ["shop.a"], "hive": {"time_zone": "Asia/Shanghai"}})
    assert config.hive.time_zone == "Asia/Shanghai"
    with pytest.raises(ConfigError, match=r"`hive: time_zone:` in the configuration is 'Asia/Shangai', which is not "
                                          r"a time zone name: use an IANA name such as UTC, Asia/Shanghai"):
        read_config({"tables": ["shop.a"], "hive": {"time_zone": "Asia/Shangai"}})
    with pytest.raises(ConfigError, match="'EST': use a region name such as America/New_York"):
        read_config({"tables": ["shop.a"], "hive": {"time_zone": "EST"}})
    with pytest.raises(ConfigError, match="must be a zone name"):
        read_config({"tables": ["shop.a"], "hive": {"time_zone": 8}})


def test_a_lock_lease_shorter_than_a_retrys_wait_is_refused():
    with pytest.raises(ConfigError, match=r"`lock_lease_seconds:` in dag.yaml is 60, shorter than a retry's wait"):
        read_config({"tables": [{"source": "shop.orders"}], "lock_lease_seconds": 60}, "dag.yaml")
    assert read_config({"tables": [{"source": "shop.orders"}], "lock_lease_seconds": 15,
                                "retries": 0}).run.lock_lease_seconds == 15


def test_verify_settings_default_to_a_rolling_verify_that_repairs_and_bad_ones_are_named():
    from airflow_cdc_provider.core.config import VerifyConfig

    # By default each run checks 1/24 of each table, and the next run repairs what differs without failing a run.
    assert read_config({"tables": ["shop.a"]}).verify == VerifyConfig(every=0, slices=24, on_difference="warn",
                                                                      repair=True)
    config = read_config({"tables": ["shop.a"], "verify": {"every": 24, "on_difference": "warn",
                                                                   "bucket_rows": 500}})
    assert (config.verify.every, config.verify.on_difference, config.verify.bucket_rows) == (24, "warn", 500)
    for verify, message in (({"every": -1}, r"`verify: every:` .* >= 0, got -1"),
                            ({"on_difference": "ignore"}, r"`fail` .* or `warn` .*got 'ignore'"),
                            ({"repair": "yes"}, r"true or false, got 'yes'"),
                            ({"evry": 2}, r"`verify:` in the configuration has unknown keys \['evry'\] \(did you mean "
                                          r"`every`\?\); the keys of `verify:` are bucket_rows, detail_buckets, "
                                          r"every, on_difference, repair, slices, tables_per_run"),
                            ({"slices": -2}, r"`verify: slices:` .* >= 0, got -2"),
                            ("daily", r"must be a mapping")):
        with pytest.raises(ConfigError, match=message):
            read_config({"tables": ["shop.a"], "verify": verify})


# Sections, the flat keys of earlier versions, and the Spark settings.

SECTIONED = """
source:
  mysql_conn_id: mysql_prod
  snapshot_concurrency: 2
  snapshot_chunk_rows: 20000
  progress_seconds: 30
  statement_timeout_seconds: 900
  read_timeout_seconds: 120
work:
  dir: s3://bucket/cdc
  conn_id: aws_cdc
hive:
  database: raw
  keep_versions: 5
spark:
  conn_id: spark_yarn
  merge_applications: 2
  class_archive: false
  conf:
    spark.executor.memory: 4g
    spark.executor.instances: 3
  merge_conf:
    spark.executor.instances: 6
    spark.sql.adaptive.enabled: true
  verify_conf:
    spark.executor.memory: 2g
run:
  retries: 3
  lock_lease_seconds: 900
  schema_changes: evolve
  on_purged_binlog: snapshot
  on_server_change: snapshot
  replay_memory_mb: 256
tables:
  - source: shop.orders
    spark_conf: {spark.sql.shuffle.partitions: 64}
"""

FLAT = """
mysql_conn_id: mysql_prod
snapshot_concurrency: 2
progress_seconds: 30
source: {snapshot_chunk_rows: 20000, statement_timeout_seconds: 900, read_timeout_seconds: 120}
work_dir: s3://bucket/cdc
work_conn_id: aws_cdc
hive: {database: raw}
keep_versions: 5
spark_conn_id: spark_yarn
merge_applications: 2
spark:
  class_archive: false
  conf: {spark.executor.memory: 4g, spark.executor.instances: 3}
  merge_conf: {spark.executor.instances: 6, spark.sql.adaptive.enabled: true}
  verify_conf: {spark.executor.memory: 2g}
retries: 3
lock_lease_seconds: 900
schema_changes: evolve
on_purged_binlog: snapshot
on_server_change: snapshot
run: {replay_memory_mb: 256}
tables:
  - source: shop.orders
    spark_conf: {spark.sql.shuffle.partitions: 64}
"""


def test_sections_and_the_earlier_flat_keys_read_the_same():
    config = read_config(yaml.safe_load(SECTIONED), "cdc.yaml")
    assert read_config(yaml.safe_load(FLAT), "cdc.yaml") == config
    assert (config.source.mysql_conn_id, config.source.snapshot_chunk_rows, config.source.progress_seconds) == (
        "mysql_prod", 20000, 30.0)
    assert (config.work.dir, config.work.conn_id, config.hive.database, config.hive.keep_versions) == (
        "s3://bucket/cdc", "aws_cdc", "raw", 5)
    assert (config.run.schema_changes, config.run.on_purged_binlog, config.run.replay_memory_mb) == (
        "evolve", "snapshot", 256)
    # Values are spark-submit's strings; merge_conf and verify_conf go over conf.
    assert config.spark.merge_settings() == {"spark.executor.memory": "4g", "spark.executor.instances": "6",
                                             "spark.sql.adaptive.enabled": "true"}
    assert config.spark.verify_settings() == {"spark.executor.memory": "2g", "spark.executor.instances": "3"}
    assert config.tables[0].settings.spark_conf == (("spark.sql.shuffle.partitions", "64"),)


def test_the_reread_parameter_is_off_unless_the_configuration_allows_it():
    tables = "tables: [{source: shop.orders}]\n"
    assert read_config(yaml.safe_load(tables), "cdc.yaml").run.allow_reread is False
    assert read_config(yaml.safe_load("run: {allow_reread: true}\n" + tables), "cdc.yaml").run.allow_reread
    with pytest.raises(ConfigError, match=r"`run: allow_reread:` in cdc.yaml must be true or false, got 'yes' "
                                          r"\(whether a run may be triggered with the `reread` parameter"):
        read_config(yaml.safe_load("run: {allow_reread: 'yes'}\n" + tables), "cdc.yaml")


def test_every_flat_key_lands_in_its_section():
    for key, (section, name) in LEGACY_KEYS.items():
        assert name in SECTIONS[section].model_fields, key


def test_a_flat_key_and_its_section_key_both_set_are_refused():
    with pytest.raises(ConfigError, match=r"cdc.yaml sets `work_dir:` and `work: dir:` both: keep one, under `work:`"):
        read_config({"tables": ["shop.a"], "work_dir": "/a", "work": {"dir": "/b"}}, "cdc.yaml")


def test_an_unknown_key_in_a_section_is_named_with_a_suggestion():
    with pytest.raises(ConfigError, match=r"`spark:` in cdc.yaml has unknown keys \['confs'\] \(did you mean `conf`\?\)"
                                          r"; the keys of `spark:` are class_archive, conf, conn_id"):
        read_config({"tables": ["shop.a"], "spark": {"confs": {}}}, "cdc.yaml")
    with pytest.raises(ConfigError, match=r"`run:` in cdc.yaml must be a mapping of retries, .*got 3"):
        read_config({"tables": ["shop.a"], "run": 3}, "cdc.yaml")


CHOICES = [(section, name) for section, model in SECTIONS.items() for name, field in model.model_fields.items()
           if isinstance(field.json_schema_extra, dict) and "choices" in field.json_schema_extra]


@pytest.mark.parametrize(("section", "key"), CHOICES)
def test_every_choice_refuses_other_values_naming_the_key_the_value_and_the_choices(section, key):
    assert CHOICES, "the model has choices"
    choices = SECTIONS[section].model_fields[key].json_schema_extra["choices"]
    flat = next((k for k, v in LEGACY_KEYS.items() if v == (section, key)), None)
    forms = [({section: {key: "maybe"}}, f"`{section}: {key}:`")]
    if flat:
        forms.append(({flat: "maybe"}, f"`{flat}:`"))
    for data, label in forms:
        with pytest.raises(ConfigError) as err:
            read_config({"tables": ["shop.a"], **data}, "cdc.yaml")
        message = str(err.value)
        assert message.startswith(f"{label} in cdc.yaml must be ") and "got 'maybe'" in message, message
        for choice, meaning in choices.items():
            assert f"`{choice}` ({meaning})" in message


BOUNDS = [(section, name, next(m.ge for m in field.metadata if getattr(m, "ge", None) is not None))
          for section, model in SECTIONS.items() for name, field in model.model_fields.items()
          if any(getattr(m, "ge", None) is not None for m in field.metadata)]


@pytest.mark.parametrize(("section", "key", "least"), BOUNDS)
def test_every_bound_refuses_a_value_below_it_and_a_value_of_another_type(section, key, least):
    for bad in (least - 1, "7", True):
        with pytest.raises(ConfigError) as err:
            read_config({"tables": ["shop.a"], section: {key: bad}}, "cdc.yaml")
        assert str(err.value).startswith(f"`{section}: {key}:` in cdc.yaml must be a "), str(err.value)
        assert f">= {least}, got {bad!r} (" in str(err.value)


def test_the_work_dir_rule_is_core_and_storage_shares_it():
    from airflow_cdc_provider import storage
    from airflow_cdc_provider.core import workdir

    assert storage.check_work_dir is workdir.check_work_dir and storage.StorageError is workdir.StorageError
    with pytest.raises(ConfigError, match=r"`work: dir:` in cdc.yaml is 'relative/dir': give an absolute path"):
        read_config({"tables": ["shop.a"], "work": {"dir": "relative/dir"}}, "cdc.yaml")


@pytest.mark.parametrize("key", ["spark.hadoop.fs.s3a.access.key", "spark.hadoop.fs.s3a.secret.key",
                                 "spark.hadoop.fs.s3a.session.token", "spark.ssl.keyStorePassword",
                                 "spark.authenticate.secret", "spark.kubernetes.authenticate.driver.oauthToken"])
@pytest.mark.parametrize("where", ["conf", "merge_conf", "verify_conf"])
def test_a_spark_setting_that_carries_a_credential_is_refused(key, where):
    with pytest.raises(ConfigError) as err:
        read_config({"tables": ["shop.a"], "spark": {where: {key: "x"}}}, "cdc.yaml")
    message = str(err.value)
    assert message.startswith(f"`spark: {where}:` in cdc.yaml has the key {key!r}, which carries a credential")
    assert "Spark connection" in message and "spark-defaults.conf" in message and "'x'" not in message


def test_a_credential_inside_a_settings_value_is_refused_too():
    with pytest.raises(ConfigError, match=r"'spark.driver.extraJavaOptions', which carries a credential"):
        read_config({"tables": ["shop.a"], "spark": {"conf": {
            "spark.driver.extraJavaOptions": "-Ddb.password=hunter2"}}})


@pytest.mark.parametrize(("conf", "message"), [
    ({"executor.memory": "4g"}, r"has the key 'executor.memory', which is not a Spark setting: .*start with `spark.`"),
    ({"spark.sql.warehouse.dir": "/x"}, r"sets 'spark.sql.warehouse.dir', which .* from `hive: warehouse_dir:`"),
    ({"spark.sql.session.timeZone": "Asia/Shanghai"}, r"sets 'spark.sql.session.timeZone', .* from `hive: time_zone:`"),
    ({"spark.executor.memory": None}, r"gives 'spark.executor.memory' the value None"),
    (["spark.executor.memory=4g"], r"must be a mapping of Spark settings"),
])
def test_bad_spark_settings_say_what_is_wrong(conf, message):
    with pytest.raises(ConfigError, match=r"`spark: conf:` in the configuration " + message):
        read_config({"tables": ["shop.a"], "spark": {"conf": conf}})


@pytest.mark.parametrize(("entry", "message"), [
    ({"source": "shop.a", "spark_conf": {"spark.executor.memory": "8g"}},
     (r"`spark_conf:` of shop.a in cdc.yaml has the key 'spark.executor.memory': a table's `spark_conf:` holds only "
      r"runtime SQL settings \(`spark.sql.\*`\).*under `spark: merge_conf:` instead")),
    ({"source": "shop.*", "spark_conf": {"spark.sql.extensions": "x"}},
     r"`spark_conf:` of the pattern shop.\* in cdc.yaml has the key 'spark.sql.extensions', a static SQL setting"),
    ({"source": "shop.a", "spark_conf": {"spark.sql.password": "x"}}, r"carries a credential"),
])
def test_a_tables_spark_conf_holds_runtime_sql_settings_only(entry, message):
    with pytest.raises(ConfigError, match=message):
        read_config({"tables": [entry]}, "cdc.yaml")


def test_a_patterns_spark_conf_goes_to_each_table_it_selects():
    (pattern,) = entries({"source": "shop.*", "spark_conf": {"spark.sql.shuffle.partitions": 8}})
    assert pattern.table_config(TableName("shop", "a")).settings.spark_conf == (("spark.sql.shuffle.partitions", "8"),)



def test_key_is_read_on_an_entry_and_goes_with_a_pattern_to_each_table_it_selects():
    named, pattern, plain = entries({"source": "shop.lines", "key": ["order_id", "line_no"]},
                                    {"source": "crm.log_*", "key": "id"}, "shop.a")
    assert named.settings.key == ("order_id", "line_no")
    assert pattern.table_config(TableName("crm", "log_2026")).settings.key == ("id",)
    assert plain.settings.key is None


@pytest.mark.parametrize(("value", "message"), [
    ([], r"`key:` of shop.lines in cdc.yaml must be a column name or a list of column names, such as "
         r"`key: \[order_id, line_no\]`, got \[\]"),
    (["a", 3], r"must be a column name or a list of column names.*got \['a', 3\]"),
    ({"a": 1}, r"got \{'a': 1\}"),
    (["a", " b"], r"got \['a', ' b'\]"),
    (["a", "b", "a"], r"`key:` of shop.lines in cdc.yaml names a more than once: name each column once"),
])
def test_a_bad_key_is_refused_naming_the_entry_the_file_and_the_value(value, message):
    with pytest.raises(ConfigError, match=message):
        read_config({"tables": [{"source": "shop.lines", "key": value}]}, "cdc.yaml")


def test_partition_by_is_parsed_on_an_entry_and_goes_with_a_pattern_to_each_table_it_selects():
    named, pattern, plain = entries({"source": "shop.orders", "partition_by": "day(created_at)"},
                                    {"source": "crm.*", "partition_by": "bucket(id, 64) AS b"}, "shop.a")
    assert named.settings.partition_by == PartitionSpec.parse("day(created_at)")
    contacts = pattern.table_config(TableName("crm", "contacts"))
    assert contacts.settings.partition_by == PartitionSpec.parse("bucket(id, 64) AS b")
    assert plain.settings.partition_by is None


@pytest.mark.parametrize(("entry", "message"), [
    ({"source": "shop.orders", "partition_by": "days(created_at)"},
     r"`partition_by:` of shop.orders in cdc.yaml: The partition spec 'days\(created_at\)' is not accepted: "
     r"days\(…\) is Spark's spelling: write day\(column\)"),
    ({"regex": "shop\\.o.*", "partition_by": "bucket(16, id)"},
     r"`partition_by:` of the pattern regex shop\\.o\.\* in cdc.yaml: The partition spec 'bucket\(16, id\)' is "
     r"not accepted: the number comes after the column .*write bucket\(id, 16\)"),
    ({"source": "shop.orders", "partition_by": 5},
     r"`partition_by:` of shop.orders in cdc.yaml must be a text such as 'day\(created_at\)'.*got 5 \(int\)"),
])
def test_a_partition_by_that_does_not_parse_is_refused_naming_the_entry_the_file_and_the_text(entry, message):
    with pytest.raises(ConfigError, match=message):
        read_config({"tables": [entry]}, "cdc.yaml")

def test_changelog_is_read_on_an_entry_and_goes_with_a_pattern_to_each_table_it_selects():
    text = """
tables:
  - source: shop.a
    changelog: true
  - source: shop.b
    changelog: {snapshot: none, day_column: day}
  - source: shop.c
    changelog: false
  - shop.d
  - source: shop.e
    changelog:
  - source: crm.*
    changelog: {mode: net}
"""
    a, b, c, d, e, pattern = read_config(yaml.safe_load(text)).tables
    assert a.settings.changelog == ChangelogSettings() == ChangelogSettings(mode="net", snapshot="insert",
                                                                             day_column="dt")
    assert b.settings.changelog == ChangelogSettings(snapshot="none", day_column="day")
    assert c.settings.changelog is False, "an entry's `false` is kept: it overrides `hive: changelog:`"
    assert d.settings.changelog is None and e.settings.changelog is None, \
        "no key, or an empty one, leaves it to `hive: changelog:`"
    assert pattern.table_config(TableName("crm", "contacts")).settings.changelog == ChangelogSettings()
    # Without `hive: changelog:`, only the tables that ask for one have a changelog.
    hive = read_config(yaml.safe_load(text)).hive
    assert hive.changelog is None
    assert [t.changelog_settings(hive.changelog) for t in (a, b, c, d, e)] == [
        ChangelogSettings(), ChangelogSettings(snapshot="none", day_column="day"), None, None, None]


def test_hive_changelog_is_every_tables_unless_its_entry_says_otherwise_false_included():
    config = read_config({"tables": [{"source": "shop.a", "changelog": True}, {"source": "shop.b", "changelog": False},
                                     "shop.c", {"source": "shop.*", "changelog": {"day_column": "day"}}, "crm.*"],
                          "hive": {"changelog": {"snapshot": "none"}}})
    default = config.hive.changelog
    assert default == ChangelogSettings(snapshot="none")
    a, b, c, shop, crm = config.tables
    assert a.changelog_settings(default) == ChangelogSettings(), "its own `true`: the defaults, not the hive's"
    assert b.changelog_settings(default) is None
    assert c.changelog_settings(default) == default
    assert shop.table_config(TableName("shop", "x")).changelog_settings(default) == ChangelogSettings(day_column="day")
    assert crm.table_config(TableName("crm", "x")).changelog_settings(default) == default
    assert read_config({"tables": ["shop.a"], "hive": {"changelog": True}}).hive.changelog == ChangelogSettings()
    for none in (False, None):
        assert read_config({"tables": ["shop.a"], "hive": {"changelog": none}}).hive.changelog is None
    # Given in code, the settings are taken as they are.
    assert HiveConfig(warehouse_dir="/w", changelog=ChangelogSettings(snapshot="none")).changelog == default


WRITE = r"Write `changelog: true` for the defaults, or a mapping such as `changelog: \{snapshot: none\}`\.$"


@pytest.mark.parametrize(("entry", "hive", "message"), [
    ({"source": "shop.a", "changelog": {"mode": "every"}}, None,
     r"^`changelog:` of shop.a in cdc.yaml has `mode: every`, which is not accepted: `mode` takes `net` or `all`\. "
     + WRITE),
    ({"source": "shop.*", "changelog": {"snapshot": "full", "modes": "net"}}, None,
     r"^`changelog:` of the pattern shop.\* in cdc.yaml has `snapshot: full`, which is not accepted: `snapshot` takes "
     r"`insert` or `none`; it has the key `modes` \(did you mean `mode`\?\), which a changelog does not have: its keys "
     r"are `mode`, `snapshot`, `day_column`\. " + WRITE),
    ({"source": "shop.a", "changelog": {"day_column": "Dt"}}, None,
     r"^`changelog:` of shop.a in cdc.yaml has `day_column: Dt`: the changelog day column 'Dt' must be in lower case"),
    ({"source": "shop.a", "changelog": {"day_column": "a-b"}}, None,
     r"^`changelog:` of shop.a in cdc.yaml has `day_column: a-b`: The changelog day column 'a-b' is not a valid Hive "
     r"name"),
    ({"regex": "shop\\.a", "changelog": "yes"}, None,
     r"^`changelog:` of the pattern regex shop\\.a in cdc.yaml must be true, false or a mapping .*got 'yes' \(str\)\. "
     + WRITE),
    ("shop.a", {"mode": "every"},
     r"^`hive: changelog:` in cdc.yaml has `mode: every`, which is not accepted: `mode` takes `net` or `all`\. " + WRITE),
    ("shop.a", 1, r"^`hive: changelog:` in cdc.yaml must be true, false or a mapping .*got 1 \(int\)\. " + WRITE),
])
def test_a_bad_changelog_is_refused_naming_the_entry_the_file_the_value_and_what_to_write(entry, hive, message):
    with pytest.raises(ConfigError, match=message):
        read_config({"tables": [entry], **({"hive": {"changelog": hive}} if hive is not None else {})}, "cdc.yaml")


def test_a_changelog_table_that_would_be_another_named_tables_hive_table_is_refused_when_read():
    clash = [{"source": "shop.a", "changelog": True}, {"source": "shop.b", "target": "Shop_A_Changelog"}]
    with pytest.raises(ConfigError) as err:
        read_config({"tables": clash}, "cdc.yaml")
    assert str(err.value) == ("The changelog table of shop.a would be ods.shop_a_changelog, the Hive table shop.b is "
                              "copied into: give one of them another `target:`, or set `changelog: false` for shop.a "
                              "(in cdc.yaml).")
    # The same through `hive: changelog:`, unless the entry says `false`.
    with pytest.raises(ConfigError, match="^The changelog table of shop.a would be raw.shop_a_changelog"):
        read_config({"tables": ["shop.a", clash[1]], "hive": {"database": "raw", "changelog": True}}, "cdc.yaml")
    assert read_config({"tables": [{"source": "shop.a", "changelog": False}, clash[1]], "hive": {"changelog": True}})
    assert read_config({"tables": ["shop.a", clash[1]]}), "no changelog, no clash"
    # A changelog table's name longer than Hive allows.
    with pytest.raises(ConfigError, match=r"^The changelog table of shop.a would be named 'x{119}_changelog', longer "
                                          r"than the 128 characters a Hive name may have: give shop.a a shorter "
                                          r"`target:`, or set `changelog: false` for it \(in cdc.yaml\)\.$"):
        read_config({"tables": [{"source": "shop.a", "target": "x" * 119, "changelog": True}]}, "cdc.yaml")
    # A pattern's tables are known at the check only (core.catalog): the file reads.
    assert read_config({"tables": [{"source": "shop.*", "changelog": True}, clash[1]]})


def test_history_is_read_on_an_entry_and_goes_with_a_pattern_and_hive_history_is_the_default_false_included():
    text = """
hive:
  history: {daily: true, keep_days: 400}
tables:
  - source: shop.a
    history: {scd2: true, granularity: run, hard_deletes: new_record}
  - source: shop.b
    history: false
  - source: shop.c
    history: {daily: false, scd2: false}
  - shop.d
  - source: shop.e
    history:
  - source: crm.*
    history: {daily: true, scd2: true, day_column: day}
  - source: web.*
"""
    config = read_config(yaml.safe_load(text))
    default = config.hive.history
    assert default == HistorySettings(daily=True, keep_days=400)
    a, b, c, d, e, crm, web = config.tables
    assert a.settings.history == HistorySettings(scd2=True, granularity="run", hard_deletes="new_record")
    assert b.settings.history is False and c.settings.history is False, \
        "`false`, or both off, overrides `hive: history:`"
    assert d.settings.history is None and e.settings.history is None, \
        "no key, or an empty one, leaves it to `hive: history:`"
    assert [t.history_settings(default) for t in (a, b, c, d, e)] == [a.settings.history, None, None, default, default]
    assert crm.table_config(TableName("crm", "x")).history_settings(default) == HistorySettings(
        daily=True, scd2=True, day_column="day")
    assert web.table_config(TableName("web", "x")).history_settings(default) == default
    assert [t.history_settings(None) for t in (a, d)] == [a.settings.history, None], "no default: only those that ask"
    for none in (False, None):
        assert read_config({"tables": ["shop.a"], "hive": {"history": none}}).hive.history is None
    # Given in code, the settings are taken as they are.
    assert HiveConfig(warehouse_dir="/w", history=default).history == default


WRITE_HISTORY = r"Write a mapping such as `history: \{daily: true, scd2: true\}`, or `history: false` for none\.$"


@pytest.mark.parametrize(("entry", "hive", "message"), [
    ({"source": "shop.a", "history": {"scd2": True, "granularity": "hour"}}, None,
     r"^`history:` of shop.a in cdc.yaml has `granularity: hour`, which is not accepted: `granularity` takes `day` or "
     r"`run`\. " + WRITE_HISTORY),
    ({"source": "shop.*", "history": {"daily": True, "keep_day": 3, "keep_days": 0}}, None,
     r"^`history:` of the pattern shop.\* in cdc.yaml has `keep_days: 0`, which is not accepted: `keep_days` takes a "
     r"whole number >= 1, or null; it has the key `keep_day` \(did you mean `keep_days`\?\), which a history does not "
     r"have: its keys are `daily`, `keep_days`, `scd2`, `granularity`, `hard_deletes`, `day_column`\. " + WRITE_HISTORY),
    ({"source": "shop.a", "history": {"daily": [1]}}, None,
     r"^`history:` of shop.a in cdc.yaml has `daily: \[1\]`, which is not accepted: `daily` takes `true` or `false`"),
    ({"source": "shop.a", "history": {"daily": True, "day_column": "Dt"}}, None,
     r"^`history:` of shop.a in cdc.yaml has `day_column: Dt`: the snapshot day column 'Dt' must be in lower case"),
    ({"source": "shop.a", "history": {"keep_days": 30}}, None,
     r"^`history:` of shop.a in cdc.yaml turns on neither `daily` nor `scd2`: give `daily: true`, `scd2: true` or "
     r"both\. " + WRITE_HISTORY),
    ({"regex": "shop\\.a", "history": True}, None,
     r"^`history:` of the pattern regex shop\\.a in cdc.yaml must be false or a mapping .*got True \(bool\)\. "
     + WRITE_HISTORY),
    ("shop.a", {"scd2": True, "hard_deletes": "ignore"},
     r"^`hive: history:` in cdc.yaml has `hard_deletes: ignore`, which is not accepted: `hard_deletes` takes "
     r"`invalidate` or `new_record`\. " + WRITE_HISTORY),
    ("shop.a", "daily", r"^`hive: history:` in cdc.yaml must be false or a mapping .*got 'daily' \(str\)\. "
     + WRITE_HISTORY),
])
def test_a_bad_history_is_refused_naming_the_entry_the_file_the_value_and_what_to_write(entry, hive, message):
    with pytest.raises(ConfigError, match=message):
        read_config({"tables": [entry], **({"hive": {"history": hive}} if hive is not None else {})}, "cdc.yaml")


def test_a_snapshots_or_history_table_that_would_be_another_named_tables_hive_table_is_refused_when_read():
    other = {"source": "shop.b", "target": "Shop_A_History"}
    with pytest.raises(ConfigError) as err:
        read_config({"tables": [{"source": "shop.a", "history": {"scd2": True}}, other]}, "cdc.yaml")
    assert str(err.value) == ("The history table of shop.a would be ods.shop_a_history, the Hive table shop.b is "
                              "copied into: give one of them another `target:`, or set `history: false` for shop.a "
                              "(in cdc.yaml).")
    # Only the tables the settings ask for: daily snapshots are `_snapshots`.
    assert read_config({"tables": [{"source": "shop.a", "history": {"daily": True}}, other]})
    with pytest.raises(ConfigError, match="^The snapshots table of shop.a would be raw.shop_a_snapshots, the Hive "
                                          "table shop.b is copied into"):
        read_config({"tables": ["shop.a", {"source": "shop.b", "target": "shop_a_snapshots"}],
                     "hive": {"database": "raw", "history": {"daily": True}}}, "cdc.yaml")
    assert read_config({"tables": [{"source": "shop.a", "history": False}, other],
                        "hive": {"history": {"scd2": True}}}), "the entry's `false` wins"
    with pytest.raises(ConfigError, match=r"^The history table of shop.a would be named 'x{121}_history', longer than "
                                          r"the 128 characters a Hive name may have: give shop.a a shorter `target:`, "
                                          r"or set `history: false` for it \(in cdc.yaml\)\.$"):
        read_config({"tables": [{"source": "shop.a", "target": "x" * 121, "history": {"scd2": True}}]}, "cdc.yaml")
    assert read_config({"tables": [{"source": "shop.*", "history": {"scd2": True}}, other]}), "a pattern: at the check"


def test_expectations_read_as_sentences():
    fields = SECTIONS["run"].model_fields
    assert expectation(fields["retries"]) == "a whole number >= 0"
    assert expectation(fields["on_purged_binlog"]).startswith("`heal` (the same run brings it level by a diff")
    assert expectation(SECTIONS["work"].model_fields["conn_id"]) == "a string, or null"


def test_the_reference_of_every_key_is_the_models():
    from airflow_cdc_provider.core.config_reference import COMMAND, reference
    from tests.conftest import ROOT

    written = (ROOT / "docs" / "configuration.md").read_text()
    assert written == reference(), f"docs/configuration.md differs from the model: regenerate it with {COMMAND}"
    for section, model in SECTIONS.items():
        assert f"## `{section}:`" in written
        for name, field in model.model_fields.items():
            assert field.description, f"{section}: {name} needs a description"
            assert f"| `{name}`" in written


def test_the_work_directory_and_the_warehouse_have_no_default_and_their_absence_is_named_with_an_example():
    with pytest.raises(ConfigError) as err:
        CdcConfig.from_dict({"tables": ["shop.a"]}, "cdc.yaml")
    message = str(err.value)
    assert "`work: dir:` is missing in cdc.yaml: it has no default" in message
    assert "for example `work: {dir: /var/lib/airflow-cdc/work}`" in message
    assert "`hive: warehouse_dir:` is missing in cdc.yaml" in message
    assert "for example `hive: {warehouse_dir: /var/lib/airflow-cdc/warehouse}`" in message
    with pytest.raises(ConfigError, match=r"^`hive: warehouse_dir:` is missing in cdc.yaml") as err:
        CdcConfig.from_dict({"tables": ["shop.a"], "work_dir": "/srv/cdc/work", "hive": {"database": "raw"}},
                            "cdc.yaml")
    assert "work: dir" not in str(err.value), "the flat `work_dir:` gave it"
    with pytest.raises(ConfigError, match=r"`hive: warehouse_dir:` in cdc.yaml is 'warehouse': .*neither an absolute "
                                          r"path nor a URI"):
        read_config({"tables": ["shop.a"], "hive": {"warehouse_dir": "warehouse"}}, "cdc.yaml")


def test_no_example_or_default_puts_the_work_directory_under_tmp():
    texts = [(DAGS / "cdc_config.yaml").read_text(), (DAGS / "cdc_config.docker.yaml").read_text(),
             (DAGS.parent / "README.md").read_text()]
    assert not any("/tmp/cdc" in text for text in texts)


def test_capture_is_the_sources_unless_an_entry_says_and_a_bad_one_is_refused():
    config = read_config({"source": {"capture": "diff"},
                          "tables": ["shop.a", {"source": "shop.b", "capture": "binlog"}, {"source": "crm.*"}]})
    named, other, pattern = config.tables
    assert [config.capture(named), config.capture(other)] == ["diff", "binlog"]
    assert config.capture(pattern.table_config(TableName("crm", "x"))) == "diff"
    assert read_config({"tables": ["shop.a"]}).capture(read_config({"tables": ["shop.a"]}).tables[0]) == "binlog"
    with pytest.raises(ConfigError, match=r"`capture:` of shop.a in cdc.yaml must be one of binlog, diff, got 'diffs'"):
        read_config({"tables": [{"source": "shop.a", "capture": "diffs"}]}, "cdc.yaml")


def test_each_table_setting_is_declared_once_and_the_reference_the_entry_forms_and_the_refusal_agree():
    """A table setting is one field of TableSettings: its type, parser and words. The reference lists it, a named
    entry and a pattern read it alike into the same settings, and a wrong key's message names it."""
    import dataclasses

    from airflow_cdc_provider.core.config import TableEntry
    from airflow_cdc_provider.core.config_reference import reference

    settings = list(TableSettings.model_fields)
    section = reference().split("## `tables:`")[1]
    listed = [line.split("`")[1] for line in section.splitlines() if line.startswith("| `")]
    assert listed == [*TableEntry.model_fields, *settings]
    for holder in (TableConfig, TablePattern):  # carried whole: none of them a field of the entry's table again
        assert not {f.name for f in dataclasses.fields(holder)} & set(settings), holder

    every = {"schema_changes": "evolve", "spark_conf": {"spark.sql.shuffle.partitions": "8"},
             "partition_by": "day(created_at)", "changelog": True, "history": {"scd2": True}, "capture": "diff",
             "shards": {"server": "eu"}, "key": ["id"]}
    assert sorted(every) == sorted(settings), "a value for each setting"
    named, pattern = entries({"source": "shop.a", "target": "all_a", **every},
                             {"source": "crm.*", "target": "all_b", **every})
    assert isinstance(named, TableConfig) and isinstance(pattern, TablePattern)
    made = pattern.table_config(TableName("crm", "a")).settings
    assert named.settings == made == pattern.settings
    assert all(getattr(made, name) != field.default for name, field in TableSettings.model_fields.items()), made

    with pytest.raises(ConfigError) as refused:
        entries({"source": "shop.a", "partition": "day(created_at)"})
    assert all(f"`{name}:`" in str(refused.value) for name in settings), str(refused.value)
    # A setting's own parser speaks for it, naming the entry and the file.
    with pytest.raises(ConfigError, match=r"`key:` of the pattern crm\.\* in the configuration must be a column name"):
        entries({"source": "crm.*", "key": [""]})
