"""The docs site builds with `mkdocs build --strict` (a broken link or anchor fails it), and every link
of the README into docs/ names a page and an anchor that exist."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    built = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-f", str(REPO / "mkdocs.yml"),
                            "-d", str(out)], capture_output=True, text=True, cwd=REPO,
                           env={**os.environ, "NO_MKDOCS_2_WARNING": "1"}, timeout=300)
    assert built.returncode == 0, built.stdout + built.stderr
    return out


def test_the_site_builds_strictly(site):
    assert (site / "index.html").is_file()
    assert (site / "environments" / "docker" / "index.html").is_file()


def test_readme_links_into_docs_name_pages_and_anchors_that_exist(site):
    links = re.findall(r"\]\((docs/[^)#\s]+)(?:#([^)\s]+))?\)", (REPO / "README.md").read_text())
    assert len(links) > 10
    for page, anchor in links:
        assert (REPO / page).is_file(), page
        if not page.endswith(".md"):
            continue
        html = site / page.removeprefix("docs/").removesuffix(".md").removesuffix("index") / "index.html"
        assert html.is_file(), page
        if anchor:
            assert f'id="{anchor}"' in html.read_text(), f"{page}#{anchor}"


def test_the_readme_stays_short():
    assert len((REPO / "README.md").read_text().splitlines()) <= 260
