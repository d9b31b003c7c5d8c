"""One settings schema (``rxpipe.settings``): the field, the schema, the config objects and every
pipeline; ``--help-settings`` and the manual's generated tables, in real processes where a user meets them."""

from __future__ import annotations

import dataclasses
import math
import subprocess
import sys
from pathlib import Path

import pytest

from rxpipe._docsite.tables import marked_files, settings_tables
from rxpipe.engines import OpenAIEngine, SimulatedEngine
from rxpipe.gateway import EDGE_SETTINGS, GatewayConfig
from rxpipe.loader import load_module, load_pipeline
from rxpipe.settings import HIDDEN, Schema, Setting, SettingError, check_fields, check_int, schema_of, setting

ROOT = Path(__file__).resolve().parent.parent
PIPELINES = ["hello.py", "llm_gateway.py", "llm_gateway_redis.py", "llm_router.py", "llm_worker.py",
             "seed_petproject.py"]
#: what a pipeline needs to start at all (the router has no default backend)
REQUIRED = {"llm_router.py": ("backends=http://127.0.0.1:1", "model=m")}


def rxpipe(tmp_path: Path, *args: str) -> tuple[int, str]:
    out = tmp_path / "out.txt"
    with out.open("wb") as stdout:
        code = subprocess.run([sys.executable, "-m", "rxpipe", *args], stdout=stdout, stderr=subprocess.STDOUT,
                              cwd=ROOT, timeout=60).returncode
    return code, out.read_text()


# -- the field ------------------------------------------------------------------------------------
@pytest.mark.parametrize(("spec", "value", "message"), [
    (Setting("n", 1, "int", "", minimum=1), 0, "setting n must be an integer >= 1, got 0 (int)"),
    (Setting("n", 1, "int", "", minimum=1), True, "setting n must be an integer >= 1, got True (bool)"),
    (Setting("n", 1, "int", "", minimum=1), 2.0, "setting n must be an integer >= 1, got 2.0 (float)"),
    (Setting("n", 1, "int", "", minimum=0, maximum=9), 10,
     "setting n must be an integer >= 0 and <= 9, got 10 (int)"),
    (Setting("r", 1.0, "number", "", minimum=0, exclusive_minimum=True), 0,
     "setting r must be a number > 0, got 0 (int)"),
    (Setting("r", 1.0, "number", "", minimum=0, exclusive_minimum=True), False,
     "setting r must be a number > 0, got False (bool)"),
    (Setting("r", 1.0, "number", "", minimum=0), math.inf, "setting r must be a number >= 0, got inf (float)"),
    (Setting("r", 1.0, "number", "", minimum=0), math.nan, "setting r must be a number >= 0, got nan (float)"),
    (Setting("r", 1.0, "number", "", minimum=0), "1", "setting r must be a number >= 0, got '1' (str)"),
    (Setting("r", None, "number", "", minimum=0, nullable=True), "x",
     "setting r must be a number >= 0 or null, got 'x' (str)"),
    (Setting("m", "a", "str", "", allow_empty=False), None,
     "setting m must be a non-empty string, got None (NoneType)"),
    (Setting("m", "a", "str", "", allow_empty=False), " ", "setting m must be a non-empty string, got ' ' (str)"),
    (Setting("m", "a", "str", ""), True, "setting m must be a string, got True (bool)"),
    (Setting("m", "a", "str", "", choices=("a", "b")), "c", 'setting m must be one of "a", "b", got \'c\' (str)'),
    (Setting("b", True, "bool", ""), 1, "setting b must be true or false, got 1 (int)"),
])
def test_one_message_shape_naming_the_setting(spec: Setting, value: object, message: str) -> None:
    with pytest.raises(SettingError) as info:
        spec.check(value)
    assert str(info.value) == message and info.value.key == spec.name
    assert isinstance(info.value, ValueError)
    with pytest.raises(SettingError, match=r"^f\(x=\) must be ") as call:
        spec.check(value, "f(x=)")
    assert call.value.key is None  # an argument of a call, not a named setting


def test_values_that_pass_and_how_they_are_normalized() -> None:
    assert Setting("m", "a", "str", "").check(7) == "7"  # --set model=7: JSON's number, the text meant
    assert Setting("r", 1.0, "number", "", minimum=0).check(3) == 3
    assert Setting("r", None, "number", "", nullable=True).check(None) is None
    def keys(value: object) -> tuple[str, ...]:  # a kind's parser raises TypeError or ValueError
        if not isinstance(value, str):
            raise TypeError("not keys")
        return tuple(value.split(","))

    assert Setting("k", "", "keys", "", parse=keys, expected="keys").check("a,b") == ("a", "b")
    with pytest.raises(SettingError, match=r"^setting k must be keys, got 5 \(int\)$"):
        Setting("k", "", "keys", "", parse=keys, expected="keys").check(5)
    assert check_int(3, "f(n=)", minimum=1) == 3
    with pytest.raises(ValueError, match="needs a parse function"):
        Setting("x", 1, "weird", "")


def test_a_schema_resolves_picks_renames_and_hides_secrets() -> None:
    schema = Schema(Setting("a", 1, "int", "the a", minimum=0), Setting("key", "", "str", "a key", secret=True),
                    Setting("url", "redis://h:1/0", "str", "where"))
    assert schema.resolve({"a": 2}) == {"a": 2, "key": "", "url": "redis://h:1/0"}
    with pytest.raises(SettingError, match=r"^unknown setting\(s\) b, c; known: a, key, url \(rxpipe run FILE "
                                           r"--help-settings lists them\)$"):
        schema.resolve({"b": 1, "c": 2})
    assert schema.changed({"a": 1, "key": "sk-1", "url": "redis://u:pw@h:1/0"}) == {
        "key": HIDDEN, "url": "redis://u@h:1/0"}
    assert schema.shown({"a": 1, "key": ""}) == {"a": 1, "key": ""}
    assert list(schema.pick("url", "a")) == ["url", "a"] and list(schema.without("key")) == ["a", "url"]
    assert schema.replace("a", default=5)["a"].default == 5
    assert list(schema.rename("url", "redis_url"))[-1] == "redis_url"
    with pytest.raises(ValueError, match="in the schema twice"):
        Schema(schema, Setting("a", 0, "int", ""))
    assert schema.table() == ("setting  type      default          meaning\n"
                              "a        int >= 0  1                the a\n"
                              "key      string    \"\"               a key\n"
                              "url      string    \"redis://h:1/0\"  where\n")
    assert schema.table("markdown").splitlines()[:3] == [
        "| setting | type | default | meaning |", "|---|---|---|---|", "| `a` | int >= 0 | `1` | the a |"]


def test_an_unknown_setting_close_to_a_known_one_says_did_you_mean() -> None:
    schema = Schema(Setting("queue_capacity", 1, "int", ""), Setting("max_num_seqs", 1, "int", ""))
    with pytest.raises(SettingError) as caught:
        schema.resolve({"queue_capacty": 3, "max_seqs": 2, "zzz": 1})
    assert str(caught.value) == ("unknown setting(s) max_seqs, queue_capacty, zzz (max_seqs: did you mean "
                                 "max_num_seqs?; queue_capacty: did you mean queue_capacity?); known: "
                                 "queue_capacity, max_num_seqs (rxpipe run FILE --help-settings lists them)")
    assert caught.value.key == "max_seqs"


def test_the_command_line_says_did_you_mean(tmp_path: Path) -> None:
    code, output = rxpipe(tmp_path, "run", "pipelines/llm_gateway.py", "--port", "0", "--set", "queue_capacty=3")
    assert code == 1
    (line,) = output.splitlines()
    assert line.startswith("rxpipe: error: unknown setting(s) queue_capacty (queue_capacty: did you mean "
                           "queue_capacity?); known: queue_capacity, rate, ")


def test_a_config_dataclass_checks_its_fields_by_their_settings() -> None:
    @dataclasses.dataclass(frozen=True)
    class Config:
        size: int = setting(4, "int", "slots", minimum=1)
        name: str = setting("x", "str", "a name")

        def __post_init__(self) -> None:
            check_fields(self)

    assert list(schema_of(Config)) == ["size", "name"] and schema_of(Config)["size"].doc == "slots"
    assert Config(name=5).name == "5"  # type: ignore[arg-type]  # normalized, frozen or not
    with pytest.raises(SettingError, match=r"^setting size must be an integer >= 1, got True \(bool\)$"):
        Config(size=True)


def test_the_config_objects_and_engines_share_it() -> None:
    from rxpipe.redis import RedisSettings

    with pytest.raises(SettingError, match=r"^setting key_burst must be an integer >= 1, got True \(bool\)$"):
        GatewayConfig(key_burst=True)
    with pytest.raises(SettingError, match=r"^setting pool_size must be an integer >= 1, got True \(bool\)$"):
        RedisSettings(pool_size=True)
    with pytest.raises(SettingError, match=r"^SimulatedEngine\(step_overhead_s=\) must be a number >= 0, got True"):
        SimulatedEngine(step_overhead_s=True)
    with pytest.raises(SettingError, match=r"^OpenAIEngine\(retry_after_cap_s=\) must be a number > 0, got 0"):
        OpenAIEngine("http://127.0.0.1:1", "m", 1, retry_after_cap_s=0)
    assert set(EDGE_SETTINGS) == set(schema_of(GatewayConfig))


# -- the pipelines ----------------------------------------------------------------------------------
@pytest.mark.parametrize("file", PIPELINES)
def test_every_pipeline_declares_its_settings_and_help_settings_prints_them(tmp_path: Path, file: str) -> None:
    module, _ = load_module(f"pipelines/{file}")
    assert isinstance(module.SETTINGS, Schema) and all(s.doc for s in module.SETTINGS.values())
    code, output = rxpipe(tmp_path, "run", f"pipelines/{file}", "--help-settings")
    assert code == 0 and output == module.SETTINGS.table("text")
    assert output.startswith("setting ")


@pytest.mark.parametrize("file", PIPELINES)
def test_api_keys_true_is_refused_by_every_pipeline(tmp_path: Path, file: str) -> None:
    settings = [arg for pair in REQUIRED.get(file, ()) for arg in ("--set", pair)]
    code, output = rxpipe(tmp_path, "run", f"pipelines/{file}", "--port", "0", *settings, "--set", "api_keys=true")
    assert code == 1
    (line,) = output.splitlines()
    module, _ = load_module(f"pipelines/{file}")
    if "api_keys" in module.SETTINGS:
        assert line == "rxpipe: error: setting api_keys must be a string of comma-separated keys, got True (bool)"
    else:
        assert line.startswith("rxpipe: error: unknown setting(s) api_keys; known: ")


@pytest.mark.parametrize(("file", "pair", "line"), [
    ("llm_router.py", "backends=localhost:8001",
     "setting backends must be comma-separated http(s) URLs, got 'localhost:8001' (str)"),
    ("llm_worker.py", "backend_url=localhost:8001", "setting backend_url must be an http(s) URL or null, "
                                                   "got 'localhost:8001' (str)"),
    ("llm_gateway_redis.py", "redis_url=http://h:1",
     "setting redis_url must be a redis:// (or rediss://, unix://) URL, got 'http://h:1' (str)"),
    ("llm_gateway.py", "key_burst=true", "setting key_burst must be an integer >= 1, got True (bool)"),
    ("seed_petproject.py", "max_s=0.1", "setting max_s (0.1) must not be below min_s (0.5)"),
])
def test_errors_name_the_setting_not_the_class_it_feeds(tmp_path: Path, file: str, pair: str, line: str) -> None:
    settings = [arg for p in (*REQUIRED.get(file, ()), pair) for arg in ("--set", p)]
    code, output = rxpipe(tmp_path, "run", f"pipelines/{file}", "--port", "0", *settings)
    assert (code, output.splitlines()) == (1, [f"rxpipe: error: {line}"])


def test_every_edge_setting_can_be_set_from_the_command_line() -> None:
    pipeline = load_pipeline("pipelines/llm_gateway.py", {"stream_buffer_bytes": 65536, "retry_after_max_s": 30,
                                                          "stream_window": 4})
    config = pipeline.stages[0].config  # type: ignore[attr-defined]
    assert (config.stream_buffer_bytes, config.retry_after_max_s, config.stream_window) == (65536, 30, 4)
    router = load_pipeline("pipelines/llm_router.py", {"backends": "http://127.0.0.1:1", "model": "m",
                                                      "retry_after_cap_s": 5, "stream_buffer_bytes": 4096})
    assert router.stages[0].config.stream_buffer_bytes == 4096  # type: ignore[attr-defined]
    engine = router.stages[-1].engine.engines[0]  # type: ignore[attr-defined]
    assert engine.retry_after_cap_s == 5.0


def test_the_manuals_tables_are_generated_from_the_schemas() -> None:
    assert marked_files(ROOT) == {"docs/guides/settings.md": ["pipelines/llm_gateway.py", "pipelines/llm_router.py",
                                                             "pipelines/llm_gateway_redis.py",
                                                             "pipelines/llm_worker.py"]}
    text = (ROOT / "docs" / "guides" / "settings.md").read_text()
    stale = "the manual's settings tables are stale: python -m rxpipe._docsite"
    assert settings_tables(text, ROOT) == text, stale
