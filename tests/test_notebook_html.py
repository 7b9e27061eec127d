"""The HTML that `make course` writes loads MathJax from the build folder, not from the network."""

from __future__ import annotations

import nbformat
from nbconvert import HTMLExporter

from course_lib import notebooks


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
