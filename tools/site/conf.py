"""Sphinx's settings for the course's site (``make site``; ``tools/build_site.py`` stages the pages).

Offline by design: the chapters are notebooks already executed (MyST-NB renders them, executing
nothing), MathJax is served from the ``jupyter-server-mathjax`` package's files, the theme's fonts
and scripts are its own, the search index is Sphinx's, and no widget script is embedded (a widget
shows its static picture). Not handled: moving a widget on the site (Colab or JupyterLab does).
"""

project = "Making LLMs cheaper and faster"
author = "the course's authors"
copyright = "the course's authors"  # noqa: A001 (Sphinx's name)

extensions = ["myst_nb", "sphinx.ext.mathjax"]
exclude_patterns = ["_extra", "conf.py"]
root_doc = "index"

# MyST: $...$ and $$...$$ formulas, as in JupyterLab; links to a guide's headings by their anchors.
myst_enable_extensions = ["dollarmath", "amsmath", "attrs_inline"]
myst_heading_anchors = 3

# MyST-NB: the notebooks come executed (the blank learners' copy, as a learner first runs it).
nb_execution_mode = "off"
nb_output_stderr = "remove"
nb_merge_streams = True  # a cell's printed lines in one block, as JupyterLab shows them
nb_ipywidgets_js = {}  # no widget manager from a CDN: each widget's output carries its picture
# A widget's picture (or a quiz's HTML), never its widget view, which needs a widget manager.
nb_mime_priority_overrides = [
    ("*", "application/vnd.jupyter.widget-view+json", None),
    ("*", "application/javascript", None),
]

# MathJax 2.7 from the jupyter-server-mathjax package, which tools/build_site.py copies into
# _static/mathjax/ (the configuration JupyterLab's predecessor used, with its STIX web fonts).
mathjax_path = "mathjax/MathJax.js?config=TeX-AMS-MML_HTMLorMML-full"
mathjax2_config = {
    # Sphinx and MyST mark each formula with the class "math" inside sections marked to be ignored
    "tex2jax": {
        "inlineMath": [["\\(", "\\)"]],
        "displayMath": [["\\[", "\\]"]],
        "processClass": "math|output_area",
        "ignoreClass": "tex2jax_ignore|mathjax_ignore|document",
        "processEscapes": True,
    },
    "messageStyle": "none",
    "HTML-CSS": {
        "availableFonts": [],
        "webFont": "STIX-Web",
        "imageFont": None,
        "preferredFont": None,
        "scale": 90,
    },
    # no hidden MathML copy for screen readers: its styles ask for TeX fonts this MathJax does not ship
    "menuSettings": {"zoom": "None", "assistiveMML": False},
}

html_theme = "pydata_sphinx_theme"
html_title = "Making LLMs cheaper and faster"
html_static_path = ["_static"]
html_extra_path = ["_extra"]  # downloads/: the learners' copy's notebooks, as they are
html_css_files = ["course.css"]
html_copy_source = False  # the pages' sources are the notebooks, whose download is on each page
html_show_sourcelink = False
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "header_links_before_dropdown": 2,
    "secondary_sidebar_items": ["page-toc"],
    "footer_start": ["copyright"],
    "footer_end": [],
}
