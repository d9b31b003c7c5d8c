"""The manual: the design document every "DESIGN §n" points into, the licence and changelog, the
generated migration page, and the built site (a reference entry for every public name, a drawn
marble for every operator), built with ``mkdocs build --strict`` as CI builds it."""

from __future__ import annotations

import importlib.util
import inspect
import re
import subprocess
import sys
import tomllib
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from rxpipe._docsite.migration import CLOSEST, NEVER, OWN, migration_page, reactivex_names
from rxpipe._docsite.reference import modules, picture_path, reference_pages
from rxpipe.testing._marble_parse import docstring_marble_rows

ROOT = Path(__file__).resolve().parent.parent
DESIGN = (ROOT / "docs" / "design.md").read_text()
SOURCES = [path for folder in ("rxpipe", "operators", "pipelines", "tests", "bench")
           for path in (ROOT / folder).rglob("*.py")]


def cited_sections() -> dict[str, list[str]]:
    """Section number -> the files citing "DESIGN §n" (also "§2–3" and "§5, §8" forms)."""
    cited: dict[str, list[str]] = {}
    for path in [*SOURCES, *(ROOT / "docs").rglob("*.md"), ROOT / "README.md"]:
        for match in re.finditer(r"DESIGN (§[0-9][0-9a-z]*(?:(?:[–,-]| and |, )§?[0-9][0-9a-z]*)*)", path.read_text()):
            for number in re.findall(r"[0-9]+[a-z]?", match.group(1)):
                cited.setdefault(number, []).append(str(path.relative_to(ROOT)))
    return cited


def test_every_cited_design_section_exists_in_docs_design_md() -> None:
    sections = re.findall(r"^## ([0-9]+[a-z]?)\. ", DESIGN, re.M)
    assert sections == ["1", "2", "3", "4", "5", "6", "7", "8", "8b", "9", "10", "11"]
    cited = cited_sections()
    assert len(cited) >= 11 and sum(map(len, cited.values())) >= 150
    assert {n: files for n, files in cited.items() if n not in sections} == {}


def test_the_cited_subsections_exist_too() -> None:
    # citations that name a part of a section by its title: 'DESIGN §5 "Many tenants"'
    named = set()
    for path in SOURCES:
        named |= {re.sub(r"\s+", " ", m.group(1))
                  for m in re.finditer(r'DESIGN §[0-9a-z]+,? "([A-Z][^"]{3,40})"', path.read_text())}
    assert named and {n for n in named if n.rstrip(".") not in DESIGN} == set()


def test_the_licence_is_apache_2_and_declared() -> None:
    text = (ROOT / "LICENSE").read_text()
    assert text.split()[:5] == ["Apache", "License", "Version", "2.0,", "January"]
    assert "END OF TERMS AND CONDITIONS" in text and len(text.splitlines()) == 202
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert (project["license"], project["license-files"]) == ("Apache-2.0", ["LICENSE"])


def test_the_changelog_keeps_a_changelog() -> None:
    text = (ROOT / "CHANGELOG.md").read_text()
    assert text.startswith("# Changelog\n") and "keepachangelog.com" in text
    assert re.findall(r"^## \[(.+?)\]", text, re.M)[:2] == ["Unreleased", "0.1.0"]
    assert set(re.findall(r"^### (\w+)", text, re.M)) <= {"Added", "Changed", "Deprecated", "Removed", "Fixed",
                                                         "Security"}


def test_the_migration_page_is_generated_and_lists_every_reactivex_name() -> None:
    text = (ROOT / "docs" / "migration.md").read_text()
    assert text == migration_page(), "docs/migration.md is stale: python -m rxpipe._docsite"
    operators, sources = reactivex_names()
    rows = re.findall(r"^\| `(\w+)` \| ", text, re.M)
    assert rows == operators + sources and len(operators) == 136
    # a reason is kept only for what rxpipe has not got
    import rxpipe
    from rxpipe import operators as ops

    assert (set(NEVER) | set(CLOSEST)) & (set(ops.__all__) | set(rxpipe.__all__)) == set()
    assert set(OWN) <= set(ops.__all__)
    assert "| `observe_on` | none | a scheduler hop" in text
    assert "| `map` | [`ops.map`](reference/operators.md#rxpipe.operators.map) |" in text


def test_the_operator_table_is_generated_from_the_facade() -> None:
    from rxpipe import operators as ops
    from rxpipe._docsite.operator_table import BEGIN, END, operator_table

    text = (ROOT / "docs" / "guides" / "operators.md").read_text()
    table = text[text.index(BEGIN) + len(BEGIN):text.index(END)].strip()
    assert table == operator_table(), "docs/guides/operators.md is stale: python -m rxpipe._docsite"
    assert re.findall(r"^\| [\w.]+ \| `(\w+)` \| ", table, re.M) == list(ops.__all__)


def operator_names() -> list[str]:
    from rxpipe import operators as ops

    return [n for n in ops.__all__ if inspect.isfunction(getattr(ops, n))]


def test_every_operator_has_a_drawn_marble() -> None:
    files = reference_pages()
    (operators,) = [m for m in modules() if m.name == "rxpipe.operators"]
    missing = []
    for name in operator_names():
        blocks = docstring_marble_rows(getattr(__import__("rxpipe.operators").operators, name).__doc__ or "")
        if not blocks:
            missing.append(name)
        for k in range(len(blocks)):
            svg = ET.fromstring(files[picture_path(operators, name, k)])
            assert svg.findall("{http://www.w3.org/2000/svg}circle") or svg.findall("{http://www.w3.org/2000/svg}rect")
    assert missing == [] and len(operator_names()) >= 45


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site as CI builds it: ``mkdocs build --strict`` (the docs extra)."""
    if importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("mkdocstrings") is None:
        pytest.skip("the docs extra is not installed (pip install -e '.[docs]'; .ci/run installs it)")
    out = tmp_path_factory.mktemp("site")
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not re.search(r"^(WARNING|ERROR) +-", proc.stderr, re.M), proc.stderr
    return out


@pytest.mark.timeout(300)
def test_the_site_has_a_reference_entry_for_every_public_name(site: Path) -> None:
    import importlib

    required = {"rxpipe", "rxpipe.operators", "rxpipe.stage", "rxpipe.testing", "rxpipe.engines", "rxpipe.gateway",
                "rxpipe.transport"}
    pages = {m.name: m for m in modules()}
    assert required <= set(pages)
    if importlib.util.find_spec("rxpipe.serving") is not None:
        assert "rxpipe.serving" in pages
    missing, total = [], 0
    for name, module in pages.items():
        html = (site / "reference" / module.page.removesuffix(".md") / "index.html").read_text()
        for public in importlib.import_module(name).__all__:
            total += 1
            at = html.find(f'id="{name}.{public}"')
            entry = html[at:html.find("<h2", at + 10)]
            # its heading, and mkdocstrings' rendering of the object with its docstring
            if at == -1 or 'class="doc doc-object' not in entry or 'class="doc doc-contents' not in entry:
                missing.append(f"{name}.{public}")
    assert missing == [] and total >= 200


@pytest.mark.timeout(300)
def test_the_site_shows_every_operators_marble_picture(site: Path) -> None:
    html = (site / "reference" / "operators" / "index.html").read_text()
    for name in operator_names():
        section = html[html.index(f'id="rxpipe.operators.{name}"'):]
        section = section[:section.find('<h2', 10)]
        assert f'src="../marbles/rxpipe.operators.{name}-0.svg"' in section, name
        assert (site / "reference" / "marbles" / f"rxpipe.operators.{name}-0.svg").is_file()


@pytest.mark.timeout(300)
def test_the_site_has_every_page_of_the_nav(site: Path) -> None:
    nav = re.findall(r":\s+([\w/.-]+\.md)$", (ROOT / "mkdocs.yml").read_text(), re.M)
    nav += [f"reference/{module.page}" for module in modules()]  # the Reference section the hook fills
    assert len(nav) >= 35
    for page in nav:
        built = site / (page.removesuffix(".md") + "/index.html" if page != "index.md" else "index.html")
        assert built.is_file(), page
