"""MkDocs hooks (mkdocs.yml, `hooks:`): the home page is README.md and the contributing page DEVELOPING.md,
read from the repository's root at build time so that each text lives in one file. Their links are written
for a reader of the repository (docs/translation.md); on the site the pages sit side by side (translation.md).
"""
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]  # the repository: this file is scripts/docs_hooks.py
FROM_ROOT = {"index.md": "README.md", "contributing.md": "DEVELOPING.md"}


def site_links(markdown):
    """A root file's Markdown with its links into docs/ made relative to the site's pages."""
    markdown = re.sub(r"\]\(docs/", "](", markdown)
    return re.sub(r"\]\(DEVELOPING\.md\)", "](contributing.md)", markdown)


def on_page_read_source(page, config):
    source = FROM_ROOT.get(page.file.src_uri)
    if source is None:
        return None
    return site_links((ROOT / source).read_text(encoding="utf-8"))
