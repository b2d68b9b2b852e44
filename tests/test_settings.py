"""Broker settings: defaults, the three sources, their precedence, and errors that name both
the setting and where it came from. No network, no real environment (``environ`` is injected).
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from weirmq.settings import (
    SETTING_SPECS,
    SPECS_BY_NAME,
    Settings,
    SettingsError,
    load_settings,
    parse_host_port,
)

REPO_ROOT = Path(__file__).resolve().parents[1]
CONFIGURATION_DOC = REPO_ROOT / "docs" / "configuration.md"


def write_toml(tmp_path: Path, text: str, name: str = "broker.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def error_of(**kwargs: object) -> str:
    """The message of the SettingsError that ``load_settings(**kwargs)`` raises."""
    with pytest.raises(SettingsError) as caught:
        load_settings(**kwargs)  # type: ignore[arg-type]
    return str(caught.value)


# --- Defaults and the table ------------------------------------------------------------------


def test_defaults_without_any_source() -> None:
    settings = load_settings(environ={})
    assert settings == Settings()
    assert settings.listen == "127.0.0.1:9092"
    assert settings.advertise is None
    assert settings.data_dir == Path("weirmq-data")
    assert settings.max_request_bytes == 104857600
    assert settings.message_max_bytes == 1048588
    assert settings.retention_ms == 7 * 24 * 3600 * 1000
    assert settings.retention_bytes == -1
    assert settings.auto_create_topics is True
    assert settings.listen_address() == ("127.0.0.1", 9092)


def test_table_and_dataclass_list_the_same_settings_in_the_same_order() -> None:
    names = [field.name for field in dataclasses.fields(Settings)]
    assert [spec.name for spec in SETTING_SPECS] == names
    assert len(set(names)) == len(names)


def test_every_default_is_within_its_own_bounds() -> None:
    defaults = Settings()
    for spec in SETTING_SPECS:
        value = getattr(defaults, spec.name)
        assert spec.from_value(value) == value, spec.name


def test_settings_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        Settings().node_id = 3  # type: ignore[misc]


def test_settings_checks_values_given_directly() -> None:
    with pytest.raises(SettingsError, match=r"^setting 'node_id' passed to Settings\(\): must"):
        Settings(node_id=-1)
    with pytest.raises(SettingsError, match=r"'segment_bytes'.*expected an integer, got '5'$"):
        Settings(segment_bytes="5")  # type: ignore[arg-type]
    assert Settings(data_dir="d").data_dir == Path("d")  # type: ignore[arg-type]


# --- Each source -----------------------------------------------------------------------------


def test_values_from_a_toml_file(tmp_path: Path) -> None:
    path = write_toml(
        tmp_path,
        """
        listen = "0.0.0.0:19092"
        advertise = "broker.example:9092"
        data_dir = "/var/lib/weirmq"
        node_id = 7
        auto_create_topics = false
        segment_bytes = 64_000_000
        retention_ms = -1
        """,
    )
    settings = load_settings(path, environ={})
    assert settings.listen == "0.0.0.0:19092"
    assert settings.advertise == "broker.example:9092"
    assert settings.data_dir == Path("/var/lib/weirmq")
    assert settings.node_id == 7
    assert settings.auto_create_topics is False
    assert settings.segment_bytes == 64_000_000
    assert settings.retention_ms == -1
    assert settings.message_max_bytes == Settings().message_max_bytes  # untouched: default


def test_values_from_the_environment() -> None:
    environ = {
        "WEIRMQ_LISTEN": "[::1]:0",
        "WEIRMQ_DATA_DIR": "/tmp/w",
        "WEIRMQ_MAX_REQUEST_BYTES": "2_000_000",
        "WEIRMQ_RETENTION_BYTES": "-1",
        "WEIRMQ_AUTO_CREATE_TOPICS": "off",
        "PATH": "/usr/bin",  # not ours: ignored
        "XWEIRMQ_NODE_ID": "x",  # not our prefix: ignored
    }
    settings = load_settings(environ=environ)
    assert settings.listen_address() == ("::1", 0)
    assert settings.data_dir == Path("/tmp/w")
    assert settings.max_request_bytes == 2_000_000
    assert settings.retention_bytes == -1
    assert settings.auto_create_topics is False


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("true", True), ("TRUE", True), ("1", True), ("yes", True), ("On", True),
        ("false", False), ("False", False), ("0", False), ("no", False), ("OFF", False),
    ],
)  # fmt: skip
def test_booleans_from_text(text: str, expected: bool) -> None:
    settings = load_settings(environ={"WEIRMQ_AUTO_CREATE_TOPICS": text})
    assert settings.auto_create_topics is expected


def test_os_environ_is_read_when_no_environ_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WEIRMQ_NODE_ID", "12")
    monkeypatch.delenv("WEIRMQ_CONFIG", raising=False)
    assert load_settings().node_id == 12


def test_values_from_overrides(tmp_path: Path) -> None:
    overrides: dict[str, object] = {
        "node_id": 4,
        "data_dir": tmp_path,
        "auto_create_topics": False,
        "listen": "localhost:0",
        "advertise": None,  # a flag not given: skipped
        "segment_bytes": "4096",  # a string is read as text, as on a command line
    }
    settings = load_settings(environ={}, overrides=overrides)
    assert settings.node_id == 4
    assert settings.data_dir == tmp_path
    assert settings.auto_create_topics is False
    assert settings.listen == "localhost:0"
    assert settings.advertise is None
    assert settings.segment_bytes == 4096


def test_an_empty_advertise_means_unset(tmp_path: Path) -> None:
    path = write_toml(tmp_path, 'advertise = "a.example:9092"\n')
    assert load_settings(path, environ={}).advertise == "a.example:9092"
    assert load_settings(path, environ={"WEIRMQ_ADVERTISE": ""}).advertise is None
    assert load_settings(path, environ={}, overrides={"advertise": ""}).advertise is None


# --- Precedence ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("in_file", "in_env", "in_flags", "expected"),
    [
        (False, False, False, 0),  # default
        (True, False, False, 1),  # file > default
        (True, True, False, 2),  # environment > file
        (False, True, False, 2),
        (True, True, True, 3),  # flags > environment > file
        (True, False, True, 3),
        (False, False, True, 3),
    ],
)
def test_flags_beat_environment_beat_file_beat_defaults(
    tmp_path: Path, in_file: bool, in_env: bool, in_flags: bool, expected: int
) -> None:
    path = write_toml(tmp_path, "node_id = 1\n" if in_file else "")
    environ = {"WEIRMQ_NODE_ID": "2"} if in_env else {}
    overrides = {"node_id": 3} if in_flags else {}
    assert load_settings(path, environ=environ, overrides=overrides).node_id == expected


def test_layers_merge_key_by_key(tmp_path: Path) -> None:
    path = write_toml(tmp_path, "node_id = 1\nhandles_max = 100\n")
    settings = load_settings(
        path, environ={"WEIRMQ_HANDLES_MAX": "200"}, overrides={"shutdown_timeout_ms": 0}
    )
    assert (settings.node_id, settings.handles_max, settings.shutdown_timeout_ms) == (1, 200, 0)


def test_a_bad_value_is_reported_even_when_a_later_source_overrides_it(tmp_path: Path) -> None:
    path = write_toml(tmp_path, 'node_id = "one"\n')
    message = error_of(config_file=path, environ={}, overrides={"node_id": 3})
    assert message == f"setting 'node_id' in {path}: expected an integer, got 'one'"


# --- The config file named by WEIRMQ_CONFIG --------------------------------------------------


def test_weirmq_config_names_the_file(tmp_path: Path) -> None:
    path = write_toml(tmp_path, "node_id = 5\n")
    assert load_settings(environ={"WEIRMQ_CONFIG": str(path)}).node_id == 5


def test_an_explicit_config_file_wins_over_weirmq_config(tmp_path: Path) -> None:
    explicit = write_toml(tmp_path, "node_id = 5\n", name="explicit.toml")
    named = write_toml(tmp_path, "node_id = 6\n", name="named.toml")
    settings = load_settings(explicit, environ={"WEIRMQ_CONFIG": str(named)})
    assert settings.node_id == 5


def test_an_empty_weirmq_config_means_no_file() -> None:
    assert load_settings(environ={"WEIRMQ_CONFIG": ""}) == Settings()


def test_the_client_commands_bootstrap_variable_is_not_a_broker_setting() -> None:
    # `export WEIRMQ_BOOTSTRAP=...` for `weirmq topics ...` must not stop `weirmq serve`.
    assert load_settings(environ={"WEIRMQ_BOOTSTRAP": "127.0.0.1:9999"}) == Settings()


def test_a_missing_file_named_by_weirmq_config_says_who_named_it(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    message = error_of(environ={"WEIRMQ_CONFIG": str(missing)})
    assert message == f"config file {missing} (named by WEIRMQ_CONFIG) does not exist"


# --- Unreadable files ------------------------------------------------------------------------


def test_a_missing_file_is_an_error_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "missing.toml"
    assert error_of(config_file=missing, environ={}) == f"config file {missing} does not exist"


def test_a_file_that_is_not_toml_is_an_error_naming_it(tmp_path: Path) -> None:
    path = write_toml(tmp_path, "node_id = = 3\n")
    message = error_of(config_file=path, environ={})
    assert message.startswith(f"config file {path} is not valid TOML: ")
    assert "line 1" in message


def test_a_file_that_is_not_utf8_is_an_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "latin1.toml"
    path.write_bytes('listen = "h\xf4te:1"\n'.encode("latin-1"))
    assert error_of(config_file=path, environ={}).startswith(f"config file {path} is not valid")


def test_a_directory_is_not_a_config_file(tmp_path: Path) -> None:
    message = error_of(config_file=tmp_path, environ={})
    assert message.startswith(f"cannot read config file {tmp_path}: ")


# --- Unknown settings ------------------------------------------------------------------------


def test_unknown_setting_in_the_file(tmp_path: Path) -> None:
    path = write_toml(tmp_path, "max_reqest_bytes = 2048\n")
    assert error_of(config_file=path, environ={}) == (
        f"unknown setting 'max_reqest_bytes' in {path} (did you mean 'max_request_bytes'?)"
    )


def test_a_table_in_the_file_is_an_unknown_setting(tmp_path: Path) -> None:
    # Kafka's dotted names become TOML tables; they are not WeirMQ's names.
    path = write_toml(tmp_path, "log.retention.ms = 1000\n")
    assert error_of(config_file=path, environ={}) == f"unknown setting 'log' in {path}"


def test_unknown_setting_in_the_environment() -> None:
    message = error_of(environ={"WEIRMQ_MAX_REQEST_BYTES": "2048"})
    assert message == (
        "unknown setting 'max_reqest_bytes' from environment variable WEIRMQ_MAX_REQEST_BYTES"
        " (did you mean WEIRMQ_MAX_REQUEST_BYTES?)"
    )


def test_environment_variable_names_are_upper_case() -> None:
    message = error_of(environ={"WEIRMQ_node_id": "1"})
    assert message.startswith("unknown setting 'node_id' from environment variable WEIRMQ_node_id")
    assert message.endswith("(did you mean WEIRMQ_NODE_ID?)")


def test_unknown_setting_in_the_overrides() -> None:
    message = error_of(environ={}, overrides={"nodeid": 1})
    assert message == (
        "unknown setting 'nodeid' from command-line flag --nodeid (did you mean --node-id?)"
    )


def test_unknown_setting_without_a_close_match() -> None:
    assert error_of(environ={"WEIRMQ_ZZZ": "1"}) == (
        "unknown setting 'zzz' from environment variable WEIRMQ_ZZZ"
    )


# --- Invalid values --------------------------------------------------------------------------


def test_a_non_integer_from_the_environment() -> None:
    message = error_of(environ={"WEIRMQ_MAX_REQUEST_BYTES": "abc"})
    assert message == (
        "setting 'max_request_bytes' from environment variable WEIRMQ_MAX_REQUEST_BYTES:"
        " expected an integer, got 'abc'"
    )


@pytest.mark.parametrize("text", ["", " 5", "5 ", "1.5", "1e3", "0x10", "5_", "_5", "١٢"])
def test_integers_from_text_are_plain_decimal(text: str) -> None:
    message = error_of(environ={"WEIRMQ_NODE_ID": text})
    assert message.endswith(f"expected an integer, got {text!r}")


@pytest.mark.parametrize(
    ("toml", "expected"),
    [
        ('node_id = "5"', "setting 'node_id' in {path}: expected an integer, got '5'"),
        ("node_id = true", "setting 'node_id' in {path}: expected an integer, got True"),
        ("node_id = 1.0", "setting 'node_id' in {path}: expected an integer, got 1.0"),
        (
            "auto_create_topics = 1",
            "setting 'auto_create_topics' in {path}: expected a boolean (true or false), got 1",
        ),
        (
            'auto_create_topics = "yes"',
            "setting 'auto_create_topics' in {path}: expected a boolean (true or false), got 'yes'",
        ),
        ("listen = 9092", "setting 'listen' in {path}: expected a HOST:PORT string, got 9092"),
        ("data_dir = 3", "setting 'data_dir' in {path}: expected a directory path, got 3"),
        ('data_dir = ""', "setting 'data_dir' in {path}: expected a directory path, got ''"),
    ],
)
def test_typed_values_in_the_file_must_have_the_right_type(
    tmp_path: Path, toml: str, expected: str
) -> None:
    path = write_toml(tmp_path, toml + "\n")
    assert error_of(config_file=path, environ={}) == expected.format(path=path)


def test_a_bad_boolean_from_the_environment() -> None:
    message = error_of(environ={"WEIRMQ_AUTO_CREATE_TOPICS": "maybe"})
    assert message == (
        "setting 'auto_create_topics' from environment variable WEIRMQ_AUTO_CREATE_TOPICS:"
        " expected a boolean (true/false, yes/no, on/off, 1/0), got 'maybe'"
    )


@pytest.mark.parametrize(
    ("name", "value", "reason"),
    [
        ("node_id", -1, "must be at least 0, got -1"),
        ("node_id", 2**31, "must be at most 2147483647, got 2147483648"),
        ("max_request_bytes", 1023, "must be at least 1024, got 1023"),
        ("max_in_flight_requests", 0, "must be at least 1, got 0"),
        ("idle_timeout_ms", 0, "must be at least 1, got 0"),
        ("default_partitions", 0, "must be at least 1, got 0"),
        ("message_max_bytes", 63, "must be at least 64, got 63"),
        ("segment_bytes", 2**31, "must be at most 2147483647, got 2147483648"),
        ("retention_ms", -2, "must be at least -1, got -2"),
        ("retention_bytes", -2, "must be at least -1, got -2"),
        ("flush_interval_ms", 0, "must be at least 1, got 0"),
        ("housekeeping_interval_ms", 0, "must be at least 1, got 0"),
        ("handles_max", 7, "must be at least 8, got 7"),
        ("producer_id_expiration_ms", 0, "must be at least 1, got 0"),
        ("shutdown_timeout_ms", -1, "must be at least 0, got -1"),
        ("amqp_channel_max", 0, "must be at least 1, got 0"),
        ("amqp_channel_max", 65536, "must be at most 65535, got 65536"),
        ("amqp_frame_max_bytes", 4095, "must be at least 4096, got 4095"),
        ("amqp_heartbeat_s", 65536, "must be at most 65535, got 65536"),
        ("amqp_handshake_timeout_ms", 0, "must be at least 1, got 0"),
        ("amqp_message_bytes_max", 2**29 + 1, "must be at most 536870912, got 536870913"),
        ("amqp_idle_timeout_ms", -1, "must be at least 0, got -1"),
        ("sqs_connections_max", 0, "must be at least 1, got 0"),
        ("sqs_request_bytes_max", 1114111, "must be at least 1114112, got 1114111"),
        ("sqs_long_polls_max", 0, "must be at least 1, got 0"),
        ("sqs_message_bytes_max", 1023, "must be at least 1024, got 1023"),
        ("sqs_message_bytes_max", 1048577, "must be at most 1048576, got 1048577"),
        ("sqs_idle_timeout_ms", 0, "must be at least 1, got 0"),
    ],
)
def test_out_of_range_values_name_their_source(
    tmp_path: Path, name: str, value: int, reason: str
) -> None:
    env_var = SPECS_BY_NAME[name].env_var
    path = write_toml(tmp_path, f"{name} = {value}\n")
    assert error_of(config_file=path, environ={}) == f"setting {name!r} in {path}: {reason}"
    assert error_of(environ={env_var: str(value)}) == (
        f"setting {name!r} from environment variable {env_var}: {reason}"
    )
    flag = "--" + name.replace("_", "-")
    assert error_of(environ={}, overrides={name: value}) == (
        f"setting {name!r} from command-line flag {flag}: {reason}"
    )


def test_bounds_are_inclusive() -> None:
    # AMQP off: its frames (4096 bytes at least) could not fit in 1024-byte requests.
    overrides = {
        "max_request_bytes": 1024,
        "handles_max": 8,
        "shutdown_timeout_ms": 0,
        "amqp_listen": "off",
    }
    settings = load_settings(environ={}, overrides=overrides)
    assert (settings.max_request_bytes, settings.handles_max, settings.shutdown_timeout_ms) == (
        1024,
        8,
        0,
    )


def test_a_bad_listen_address_names_its_source() -> None:
    message = error_of(environ={"WEIRMQ_LISTEN": "localhost"})
    assert message == (
        "setting 'listen' from environment variable WEIRMQ_LISTEN:"
        " expected HOST:PORT or [IPv6]:PORT, got 'localhost'"
    )


def test_listen_may_use_port_zero_but_advertise_may_not() -> None:
    assert load_settings(environ={"WEIRMQ_LISTEN": "127.0.0.1:0"}).listen_address()[1] == 0
    message = error_of(environ={}, overrides={"advertise": "h.example:0"})
    assert message == (
        "setting 'advertise' from command-line flag --advertise:"
        " cannot advertise port 0, clients need a real port; got 'h.example:0'"
    )


def test_long_values_are_cut_in_messages() -> None:
    message = error_of(environ={"WEIRMQ_NODE_ID": "x" * 500})
    assert len(message) < 200
    assert message.endswith("...")


# --- parse_host_port -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("127.0.0.1:9092", ("127.0.0.1", 9092)),
        ("localhost:0", ("localhost", 0)),
        ("broker-1.example.com:65535", ("broker-1.example.com", 65535)),
        ("0.0.0.0:09092", ("0.0.0.0", 9092)),
        ("[::1]:9092", ("::1", 9092)),
        ("[::]:0", ("::", 0)),
        ("[2001:db8::7]:19092", ("2001:db8::7", 19092)),
        ("[fe80::1%eth0]:9092", ("fe80::1%eth0", 9092)),
    ],
)
def test_parse_host_port_accepts(value: str, expected: tuple[str, int]) -> None:
    assert parse_host_port(value) == expected


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("localhost", "expected HOST:PORT or [IPv6]:PORT"),
        ("", "expected HOST:PORT or [IPv6]:PORT"),
        (":9092", "expected a host name or IP address before the port"),
        ("host name:9092", "expected a host name or IP address before the port"),
        ("localhost:", "expected a port number 0..65535 after the colon"),
        ("localhost:65536", "expected a port number 0..65535 after the colon"),
        ("localhost:-1", "expected a port number 0..65535 after the colon"),
        ("localhost:+1", "expected a port number 0..65535 after the colon"),
        ("localhost:90 92", "expected a port number 0..65535 after the colon"),
        ("localhost:٩٠٩٢", "expected a port number 0..65535 after the colon"),
        ("::1:9092", "an IPv6 address goes in brackets"),
        ("[::1:9092", "an IPv6 address goes in brackets"),
        ("[::1]9092", "an IPv6 address goes in brackets"),
        ("[127.0.0.1]:9092", "expected an IPv6 address in brackets"),
        ("[]:9092", "expected an IPv6 address in brackets"),
        ("[nothex::1]:9092", "expected an IPv6 address in brackets"),
    ],
)
def test_parse_host_port_rejects(value: str, reason: str) -> None:
    with pytest.raises(SettingsError) as caught:
        parse_host_port(value)
    message = str(caught.value)
    assert message.startswith(reason)
    assert message.endswith(f"got {value!r}")


# --- The AMQP listener's settings -------------------------------------------------------------


def test_amqp_defaults_are_rabbitmqs() -> None:
    settings = Settings()
    assert settings.amqp_listen == "127.0.0.1:5672"
    assert settings.amqp_users == (("guest", "guest"),)
    assert settings.amqp_loopback_users == ("guest",)
    assert settings.amqp_vhosts == ("/",)
    assert settings.amqp_channel_max == 2047
    assert settings.amqp_frame_max_bytes == 131072
    assert settings.amqp_heartbeat_s == 60
    assert settings.amqp_handshake_timeout_ms == 10000
    assert settings.amqp_message_bytes_max == 16 * 1024 * 1024
    assert settings.amqp_idle_timeout_ms == 0


@pytest.mark.parametrize("off", ["off", ""])
def test_amqp_listen_off_from_every_source(tmp_path: Path, off: str) -> None:
    path = write_toml(tmp_path, f'amqp_listen = "{off}"\n')
    assert load_settings(path, environ={}).amqp_listen is None
    assert load_settings(environ={"WEIRMQ_AMQP_LISTEN": off}).amqp_listen is None
    assert load_settings(environ={}, overrides={"amqp_listen": off}).amqp_listen is None
    flagged = load_settings(
        environ={"WEIRMQ_AMQP_LISTEN": "off"}, overrides={"amqp_listen": "0.0.0.0:0"}
    )
    assert flagged.amqp_listen == "0.0.0.0:0"  # port 0: a free one


def test_a_bad_amqp_listen_address_names_the_setting() -> None:
    assert error_of(environ={"WEIRMQ_AMQP_LISTEN": "5672"}) == (
        "setting 'amqp_listen' from environment variable WEIRMQ_AMQP_LISTEN: "
        "expected HOST:PORT or [IPv6]:PORT, got '5672'"
    )


def test_amqp_users_from_text_from_a_list_and_from_a_table(tmp_path: Path) -> None:
    environ = {"WEIRMQ_AMQP_USERS": "guest:guest, app:s3:cret"}  # split at the first colon
    assert load_settings(environ=environ).amqp_users == (("guest", "guest"), ("app", "s3:cret"))
    table = write_toml(tmp_path, 'amqp_users = { app = "a,b", ops = "x" }\n', "table.toml")
    assert load_settings(table, environ={}).amqp_users == (("app", "a,b"), ("ops", "x"))
    listed = write_toml(tmp_path, 'amqp_users = ["app:pw"]\n', "list.toml")
    assert load_settings(listed, environ={}).amqp_users == (("app", "pw"),)
    assert load_settings(environ={"WEIRMQ_AMQP_USERS": ""}).amqp_users == ()  # nobody


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("guest:guest,hunter2", "entry 2 is not USER:PASSWORD (no ':' in it)"),
        (":hunter2", "entry 1 has an empty user name"),
        ("app:", "user 'app' has an empty password"),
        ("app:hunter2,app:other", "user 'app' is listed twice"),
    ],
)
def test_a_bad_amqp_user_entry_is_named_without_its_password(text: str, reason: str) -> None:
    message = error_of(environ={"WEIRMQ_AMQP_USERS": text})
    assert message == (
        f"setting 'amqp_users' from environment variable WEIRMQ_AMQP_USERS: {reason}"
    )
    assert "hunter2" not in message and "other" not in message


def test_amqp_passwords_stay_out_of_repr_and_public_views() -> None:
    settings = Settings(amqp_users=(("app", "hunter2"),))
    assert "hunter2" not in repr(settings)
    public = SPECS_BY_NAME["amqp_users"].kind.public
    assert public is not None and public(settings.amqp_users) == ["app"]


def test_amqp_name_lists(tmp_path: Path) -> None:
    environ = {"WEIRMQ_AMQP_VHOSTS": "/, staging", "WEIRMQ_AMQP_LOOPBACK_USERS": ""}
    settings = load_settings(environ=environ)
    assert settings.amqp_vhosts == ("/", "staging")
    assert settings.amqp_loopback_users == ()
    path = write_toml(tmp_path, 'amqp_loopback_users = ["guest", "ops"]\n')
    assert load_settings(path, environ={}).amqp_loopback_users == ("guest", "ops")
    assert error_of(environ={"WEIRMQ_AMQP_VHOSTS": " , "}) == (
        "setting 'amqp_vhosts' from environment variable WEIRMQ_AMQP_VHOSTS: "
        "expected at least one virtual host, such as '/'"
    )
    assert "listed twice" in error_of(environ={"WEIRMQ_AMQP_VHOSTS": "/,/"})


def test_amqp_frames_must_fit_in_a_request_while_the_listener_is_on() -> None:
    message = error_of(environ={}, overrides={"max_request_bytes": 65536})
    assert message.startswith(
        "setting 'amqp_frame_max_bytes' (131072) must be at most max_request_bytes (65536)"
    )
    fits = {"max_request_bytes": 65536, "amqp_frame_max_bytes": 65536}
    assert load_settings(environ={}, overrides=fits).amqp_frame_max_bytes == 65536
    off = {"max_request_bytes": 65536, "amqp_listen": "off"}
    assert load_settings(environ={}, overrides=off).amqp_listen is None
    with pytest.raises(SettingsError, match="amqp_frame_max_bytes"):
        Settings(max_request_bytes=4096)


# --- The SQS API's settings ------------------------------------------------------------------


def test_sqs_defaults() -> None:
    settings = Settings()
    assert settings.sqs_listen == "127.0.0.1:9324"
    assert settings.sqs_region == "us-east-1"
    assert settings.sqs_account_id == "000000000000"
    assert settings.sqs_access_keys == ()  # signatures are not checked
    assert settings.sqs_connections_max == 1000
    assert settings.sqs_request_bytes_max == 8 * 1024 * 1024
    assert settings.sqs_long_polls_max == 1000
    assert settings.sqs_message_bytes_max == 1048576
    assert settings.sqs_idle_timeout_ms == 75000


@pytest.mark.parametrize("off", ["off", ""])
def test_sqs_listen_off_from_every_source(tmp_path: Path, off: str) -> None:
    path = write_toml(tmp_path, f'sqs_listen = "{off}"\n')
    assert load_settings(path, environ={}).sqs_listen is None
    assert load_settings(environ={"WEIRMQ_SQS_LISTEN": off}).sqs_listen is None
    assert load_settings(environ={}, overrides={"sqs_listen": off}).sqs_listen is None
    flagged = load_settings(
        environ={"WEIRMQ_SQS_LISTEN": "off"}, overrides={"sqs_listen": "[::1]:0"}
    )
    assert flagged.sqs_listen == "[::1]:0"


def test_a_bad_sqs_listen_address_names_the_setting() -> None:
    assert error_of(environ={"WEIRMQ_SQS_LISTEN": "9324"}) == (
        "setting 'sqs_listen' from environment variable WEIRMQ_SQS_LISTEN: "
        "expected HOST:PORT or [IPv6]:PORT, got '9324'"
    )
    assert error_of(environ={}, overrides={"sqs_listen": "127.0.0.1:99999"}).startswith(
        "setting 'sqs_listen' from command-line flag --sqs-listen: expected a port number"
    )


def test_sqs_region_and_account_id(tmp_path: Path) -> None:
    environ = {"WEIRMQ_SQS_REGION": "eu-west-3", "WEIRMQ_SQS_ACCOUNT_ID": "000000000042"}
    settings = load_settings(environ=environ)
    assert (settings.sqs_region, settings.sqs_account_id) == ("eu-west-3", "000000000042")
    for region in ("us east", "", "eu_west_1", "a" * 65):
        assert error_of(environ={"WEIRMQ_SQS_REGION": region}).startswith(
            "setting 'sqs_region' from environment variable WEIRMQ_SQS_REGION: expected a "
            "region name of letters, digits and '-'"
        )
    for account in ("12345678901", "1234567890123", "12345678901x"):
        assert error_of(environ={"WEIRMQ_SQS_ACCOUNT_ID": account}) == (
            "setting 'sqs_account_id' from environment variable WEIRMQ_SQS_ACCOUNT_ID: "
            f"expected an AWS account id of 12 decimal digits, got {account!r}"
        )
    # A TOML number would lose the leading zeros: the file must quote it.
    path = write_toml(tmp_path, "sqs_account_id = 42\n")
    assert error_of(config_file=path, environ={}) == (
        f"setting 'sqs_account_id' in {path}: expected an AWS account id of 12 decimal "
        "digits, as a string, got 42"
    )


def test_sqs_access_keys_are_written_as_amqp_users_are(tmp_path: Path) -> None:
    environ = {"WEIRMQ_SQS_ACCESS_KEYS": "AKIDEXAMPLE:wJalr/K7+MDENG, test:te:st"}
    assert load_settings(environ=environ).sqs_access_keys == (
        ("AKIDEXAMPLE", "wJalr/K7+MDENG"),  # a secret key may hold '/' and '+'
        ("test", "te:st"),  # split at the first colon
    )
    table = write_toml(tmp_path, 'sqs_access_keys = { AKID = "a,b" }\n', "table.toml")
    assert load_settings(table, environ={}).sqs_access_keys == (("AKID", "a,b"),)
    listed = write_toml(tmp_path, 'sqs_access_keys = ["AKID:s"]\n', "list.toml")
    assert load_settings(listed, environ={}).sqs_access_keys == (("AKID", "s"),)
    assert load_settings(environ={"WEIRMQ_SQS_ACCESS_KEYS": ""}).sqs_access_keys == ()


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("AKID:k,hunter2", "entry 2 is not ACCESS_KEY_ID:SECRET_KEY (no ':' in it)"),
        (":hunter2", "entry 1 has an empty access key id"),
        ("AKID:", "access key id 'AKID' has an empty secret key"),
        ("AKID:hunter2,AKID:other", "access key id 'AKID' is listed twice"),
        # SigV4's Credential=KEYID/DATE/... could not be split with a '/' in the key id.
        ("AK/ID:hunter2", "access key id 'AK/ID' may hold only letters, digits and '_'"),
    ],
)
def test_a_bad_sqs_access_key_is_named_without_its_secret(text: str, reason: str) -> None:
    message = error_of(environ={"WEIRMQ_SQS_ACCESS_KEYS": text})
    assert message.startswith(
        f"setting 'sqs_access_keys' from environment variable WEIRMQ_SQS_ACCESS_KEYS: {reason}"
    )
    assert "hunter2" not in message and "other" not in message


def test_sqs_secret_keys_stay_out_of_repr_and_public_views() -> None:
    settings = Settings(sqs_access_keys=(("AKID", "hunter2"),))
    assert "hunter2" not in repr(settings)
    public = SPECS_BY_NAME["sqs_access_keys"].kind.public
    assert public is not None and public(settings.sqs_access_keys) == ["AKID"]


# --- docs/configuration.md -------------------------------------------------------------------


def documented_rows() -> dict[str, list[str]]:
    """The settings table of docs/configuration.md: name -> its cells, backticks kept."""
    rows: dict[str, list[str]] = {}
    for line in CONFIGURATION_DOC.read_text(encoding="utf-8").splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        match = re.fullmatch(r"`([a-z_]+)`", cells[0])
        if match and len(cells) == 5:
            rows[match.group(1)] = cells
    return rows


def test_every_setting_is_documented_with_its_env_var_default_and_kafka_name() -> None:
    rows = documented_rows()
    assert sorted(rows) == sorted(field.name for field in dataclasses.fields(Settings))
    defaults = Settings()
    for spec in SETTING_SPECS:
        _, env_var, default, kafka_name, meaning = rows[spec.name]
        assert env_var == f"`{spec.env_var}`", spec.name
        assert kafka_name == (f"`{spec.kafka_name}`" if spec.kafka_name else "(none)"), spec.name
        # The documented default, read the way the environment would be, is the real one.
        literal = re.match(r"`([^`]*)`", default)
        documented = spec.from_text(literal.group(1) if literal else "")
        assert documented == getattr(defaults, spec.name), spec.name
        assert meaning, spec.name


def test_the_example_file_in_the_docs_loads(tmp_path: Path) -> None:
    text = CONFIGURATION_DOC.read_text(encoding="utf-8")
    example = re.search(r"```toml\n(.*?)```", text, re.DOTALL)
    assert example is not None
    path = write_toml(tmp_path, example.group(1))
    assert load_settings(path, environ={}) != Settings()
