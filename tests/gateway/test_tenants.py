"""The tenants file: schema validation, key → tenant, header resolution, labels, reload."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rxpipe.gateway._tenants import Tenant, Tenants, TenantsFileError

DOC = {
    "acme": {"keys": ["sk-acme-1", "sk-acme-2"], "weight": 2, "priority": 1, "rpm": 600, "tpm": 90000},
    "beta": {"keys": ["sk-beta"]},
}


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_json_file_loads_with_defaults_and_an_implicit_default_tenant(tmp_path: Path) -> None:
    tenants = Tenants.load(write(tmp_path, "tenants.json", json.dumps(DOC)))
    assert tenants["acme"] == Tenant("acme", ("sk-acme-1", "sk-acme-2"), 2.0, 1, 600, 90000)
    assert tenants["beta"] == Tenant("beta", ("sk-beta",), 1.0, 0, None, None)
    assert tenants.default == Tenant("default")
    assert sorted(tenants) == ["acme", "beta", "default"]
    assert tenants.keys_configured == frozenset({"sk-acme-1", "sk-acme-2", "sk-beta"})
    assert dict(tenants.weights) == {"acme": 2.0, "beta": 1.0, "default": 1.0}


def test_toml_file_loads_the_same_tenants(tmp_path: Path) -> None:
    toml = """
[acme]
keys = ["sk-acme-1", "sk-acme-2"]
weight = 2
priority = 1
rpm = 600
tpm = 90000

[beta]
keys = ["sk-beta"]

[default]
weight = 0.5
"""
    tenants = Tenants.load(write(tmp_path, "tenants.toml", toml))
    assert tenants["acme"] == Tenant("acme", ("sk-acme-1", "sk-acme-2"), 2.0, 1, 600, 90000)
    assert tenants.default == Tenant("default", (), 0.5, 0, None, None)


def test_resolution_with_auth_uses_the_key_and_ignores_the_header() -> None:
    tenants = Tenants.from_mapping(DOC)
    assert tenants.resolve(key="sk-acme-2", header="beta", auth=True).name == "acme"
    assert tenants.resolve(key="sk-from-api-keys-only", auth=True).name == "default"
    assert tenants.for_key("sk-beta") is tenants["beta"]
    assert tenants.for_key("nope") is None


def test_resolution_without_auth_uses_the_header_unknown_is_default() -> None:
    tenants = Tenants.from_mapping(DOC)
    assert tenants.resolve(header=" beta ", auth=False).name == "beta"
    assert tenants.resolve(header="mallory", auth=False).name == "default"
    assert tenants.resolve(header=None, auth=False).name == "default"
    assert tenants.resolve(key="sk-acme-1", auth=False).name == "default"  # keys mean nothing without auth


def test_labels_are_configured_names_or_other() -> None:
    tenants = Tenants.from_mapping(DOC)
    assert [tenants.label(n) for n in ("acme", "default", "mallory", "")] == ["acme", "default", "other", "other"]


@pytest.mark.parametrize(("spec", "message"), [
    ({"weight": 0}, "tenant 'bad': field 'weight' must be a finite number > 0, got 0"),
    ({"weight": -1.5}, "tenant 'bad': field 'weight' must be a finite number > 0, got -1.5"),
    ({"weight": True}, "tenant 'bad': field 'weight' must be a finite number > 0, got True"),
    ({"weight": "2"}, "tenant 'bad': field 'weight' must be a finite number > 0, got '2'"),
    ({"priority": 1.5}, "tenant 'bad': field 'priority' must be an integer, got 1.5"),
    ({"rpm": 0}, "tenant 'bad': field 'rpm' must be a positive integer or null, got 0"),
    ({"tpm": 10.0}, "tenant 'bad': field 'tpm' must be a positive integer or null, got 10.0"),
    ({"keys": "sk-1"}, "tenant 'bad': field 'keys' must be a list of non-empty strings, got 'sk-1'"),
    ({"keys": ["sk-1", " "]}, "tenant 'bad': field 'keys' must be a list of non-empty strings, got ['sk-1', ' ']"),
    ({"wieght": 2}, "tenant 'bad': unknown field(s) 'wieght'; known: keys, weight, priority, rpm, tpm"),
    ([1], "tenant 'bad': expected a table/object of fields, got list"),
])
def test_validation_errors_name_the_tenant_and_the_field(spec: object, message: str) -> None:
    with pytest.raises(TenantsFileError) as info:
        Tenants.from_mapping({"bad": spec}, source="t.json")
    assert str(info.value) == f"t.json: {message}"


def test_a_key_in_two_tenants_is_an_error_that_does_not_echo_the_key() -> None:
    with pytest.raises(TenantsFileError) as info:
        Tenants.from_mapping({"a": {"keys": ["sk-secret"]}, "b": {"keys": ["sk-secret"]}})
    assert str(info.value) == "<tenants>: tenant 'b': field 'keys' lists a key that tenant 'a' lists too"
    assert "sk-secret" not in str(info.value)


def test_top_level_must_be_a_mapping_and_the_file_must_parse(tmp_path: Path) -> None:
    with pytest.raises(TenantsFileError, match=r"^<tenants>: the top level must map tenant names to tables, got list$"):
        Tenants.from_mapping([])
    with pytest.raises(TenantsFileError, match=r"^.*t\.json: not valid JSON: "):
        Tenants.load(write(tmp_path, "t.json", "{nope"))
    with pytest.raises(TenantsFileError, match=r"^.*t\.toml: not valid TOML: "):
        Tenants.load(write(tmp_path, "t.toml", "[a\n"))
    with pytest.raises(TenantsFileError, match="cannot read the tenants file"):
        Tenants.load(tmp_path / "missing.json")


def test_reload_returns_a_new_object_or_raises_leaving_the_old_one(tmp_path: Path) -> None:
    path = write(tmp_path, "tenants.json", json.dumps(DOC))
    old = Tenants.load(path)
    path.write_text(json.dumps({"gamma": {"weight": 3}}))
    new = old.reload()
    assert sorted(new) == ["default", "gamma"] and sorted(old) == ["acme", "beta", "default"]
    path.write_text(json.dumps({"gamma": {"weight": 0}}))
    with pytest.raises(TenantsFileError, match="tenant 'gamma': field 'weight'"):
        new.reload()
    assert new["gamma"].weight == 3.0  # still in force
    with pytest.raises(TenantsFileError, match="no file to reload"):
        Tenants.from_mapping(DOC).reload()
