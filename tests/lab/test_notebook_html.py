"""The HTML that `make course` writes loads MathJax from the build folder, not from the network, and its links
lead to pages of the build."""

from __future__ import annotations

from html.parser import HTMLParser
from urllib.parse import unquote, urlsplit

import nbformat
from nbconvert import HTMLExporter

from course_lib.lab import notebooks


def test_html_pages_load_a_local_mathjax(tmp_path):
    url = notebooks.local_mathjax(tmp_path)
    assert url is not None, "jupyter-server-mathjax is a dependency of the course"
    assert url.startswith("mathjax/MathJax.js?config=")
    assert (tmp_path / "mathjax" / "MathJax.js").is_file()
    config = url.split("config=")[1].split(",")[0]
    assert (tmp_path / "mathjax" / "config" / f"{config}.js").is_file()
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("$A_i = r_i - \\bar r$")])
    body, _ = HTMLExporter(mathjax_url=url).from_notebook_node(notebook)
    assert 'src="mathjax/MathJax.js?config=' in body
    assert "libs/mathjax" not in body.lower()  # no MathJax from a CDN (nbconvert's default)


class Links(HTMLParser):
    """Every `href` and `src` of a page."""

    def __init__(self):
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.urls += [value for name, value in attrs if name in ("href", "src") and value]


def test_the_site_links_pages_that_exist_and_no_notebook_file(tmp_path):
    """A committed (executed) chapter exported as `run` exports it, with the README and docs pages and the index:
    every relative link of every page names a file of the site, never an `.ipynb` or `.md`. The other chapters'
    pages, which a full build exports, stand in as empty files (exporting them all would take a minute)."""
    mathjax = notebooks.local_mathjax(tmp_path)
    exporter = HTMLExporter(mathjax_url=mathjax)
    chapter = notebooks.NOTEBOOKS / "01_rap_world_model_mcts.ipynb"
    page = notebooks.export(nbformat.read(chapter, as_version=4), chapter, tmp_path, exporter)
    notebooks.write_site(tmp_path, [(chapter.stem, 60.0)], mathjax)
    for other in notebooks.NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"):
        if other != chapter:
            (tmp_path / other.with_suffix(".html").name).touch()
    body = (tmp_path / page).read_text()
    for link in ("00_tool_agent_grpo.html", "02_lats_grounded_search.html", "README.html", "docs/experiments/"):
        assert f'href="{link}' in body, link
    pages = sorted(tmp_path.rglob("*.html"))
    assert {"index.html", "README.html", "docs/claims.html", "docs/glossary.html"} <= {
        p.relative_to(tmp_path).as_posix() for p in pages
    }
    checked = 0
    for html_page in pages:
        parser = Links()
        parser.feed(html_page.read_text())
        for url in parser.urls:
            if url.startswith("#") or urlsplit(url).scheme:
                continue
            path = unquote(urlsplit(url).path)
            assert not path.endswith((".ipynb", ".md")), (html_page.name, url)
            target = (html_page.parent / path).resolve()
            assert target.is_relative_to(tmp_path.resolve()) and target.is_file(), (html_page.name, url)
            checked += 1
    assert checked > 30


def test_a_chapter_link_to_the_implementing_file_opens_its_copy_in_the_site(tmp_path):
    """Lessons link the file that implements a method (`../course_lib/rl/seams.py`): the site holds the library's and
    the exercises' Python files under `code/` and re-points such links there; other repository files stay unlinked."""
    assert notebooks.site_page("course_lib/rl/seams.py") == "code/course_lib/rl/seams.py"
    assert notebooks.site_page("exercises/measure.py") == "code/exercises/measure.py"
    assert notebooks.site_page("tests/rl/test_loop.py") is None and notebooks.site_page("LICENSE") is None
    page = '<a href="../course_lib/algos/gigpo.py">x</a> <a href="../course_lib/rl/seams.py#L3">y</a>'
    rewritten = notebooks.rewrite_links(page, "notebooks/07_x.ipynb", "07_x.html")
    assert rewritten == '<a href="code/course_lib/algos/gigpo.py">x</a> <a href="code/course_lib/rl/seams.py#L3">y</a>'
    notebooks.copy_sources(tmp_path)
    assert (tmp_path / "code/course_lib/algos/gigpo.py").read_text() == (
        notebooks.ROOT / "course_lib/algos/gigpo.py"
    ).read_text()
    assert (tmp_path / "code/exercises/measure.py").is_file()


def test_nbval_minutes_sum_each_notebooks_cells_from_a_junit_report(tmp_path):
    report = tmp_path / "report.xml"
    report.write_text(
        '<?xml version="1.0"?><testsuites><testsuite name="pytest">'
        '<testcase classname="notebooks.07_gigpo_step_credit.ipynb" name="Cell 0" time="30.0" />'
        '<testcase classname="notebooks.07_gigpo_step_credit.ipynb" name="Cell 1" time="60.0" />'
        '<testcase classname="notebooks.15_pitfalls_lab.ipynb" name="Cell 0" time="6.0" />'
        '<testcase classname="tests.test_loop" name="test_x" time="100.0" />'
        "</testsuite></testsuites>"
    )
    assert notebooks.nbval_minutes(report) == {"07_gigpo_step_credit.ipynb": 1.5, "15_pitfalls_lab.ipynb": 0.1}
