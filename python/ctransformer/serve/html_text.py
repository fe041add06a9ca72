"""The text of an HTML document, to translate while its markup stays as it was (LibreTranslate's ``format: "html"``).

``split(document)`` cuts a document into the pieces the standard library's HTML parser finds, in order: markup (tags,
comments, declarations, the insides of ``<script>`` and ``<style>``) and text. ``join(pieces, translations)`` puts it
back with each text piece replaced: the markup byte for byte as it came, each translation escaped for HTML, and the
whitespace around a piece's words kept. A text piece is what the parser gives between two tags, entities decoded
(``&amp;`` is ``&`` to the translator), so a sentence split by inline markup (``<b>``) is translated in parts, as
LibreTranslate's own HTML translation does.
"""
import html
import html.parser

__all__ = ["split", "join", "texts"]

# Elements whose content is not text to read: kept as markup.
_RAW = ("script", "style", "template", "textarea", "code", "pre")


class _Pieces(html.parser.HTMLParser):
    """Records where each event of the parser starts; the raw document between two starts is that event's."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.starts, self.kinds = [], []   # offset in the document, and "text" or "markup"
        self.line_starts = [0]                   # offset of each line's start, for getpos()'s (line, column)
        self.raw_depth = 0

    def _at(self):
        line, column = self.getpos()
        return self.line_starts[line - 1] + column

    def mark(self, kind):
        self.starts.append(self._at())
        self.kinds.append(kind)

    def handle_starttag(self, tag, attrs):
        self.mark("markup")
        if tag in _RAW:
            self.raw_depth += 1

    def handle_startendtag(self, tag, attrs):
        self.mark("markup")

    def handle_endtag(self, tag):
        self.mark("markup")
        if tag in _RAW and self.raw_depth:
            self.raw_depth -= 1

    def handle_data(self, data):
        self.mark("markup" if self.raw_depth else "text")

    def handle_comment(self, data):
        self.mark("markup")

    def handle_decl(self, decl):
        self.mark("markup")

    def handle_pi(self, data):
        self.mark("markup")

    def unknown_decl(self, data):
        self.mark("markup")


def split(document):
    """[(kind, raw), ...]: the document cut into "markup" and "text" pieces whose raws join to it exactly."""
    parser = _Pieces()
    for line in document.splitlines(keepends=True):
        parser.line_starts.append(parser.line_starts[-1] + len(line))
    parser.feed(document)
    parser.close()
    pieces, ends = [], parser.starts[1:] + [len(document)]
    if parser.starts and parser.starts[0] > 0:   # nothing precedes the first event but what the parser skipped
        pieces.append(("markup", document[:parser.starts[0]]))
    for kind, start, end in zip(parser.kinds, parser.starts, ends):
        if end > start:
            if pieces and pieces[-1][0] == kind == "text":   # text the parser handed over in two calls
                pieces[-1] = ("text", pieces[-1][1] + document[start:end])
            else:
                pieces.append((kind, document[start:end]))
    if not parser.starts and document:
        pieces.append(("text", document))
    return pieces


def texts(pieces):
    """The words to translate: each text piece with entities decoded and its surrounding whitespace off; "" for a
    piece of whitespace only (not sent)."""
    return [html.unescape(raw).strip() if kind == "text" else None for kind, raw in pieces]


def join(pieces, translations):
    """The document with each text piece's words replaced by its translation (a list as long as pieces, None for
    markup and ignored for a blank piece): markup as it came, each translation escaped, whitespace kept."""
    out = []
    for (kind, raw), translation in zip(pieces, translations):
        words = html.unescape(raw).strip() if kind == "text" else ""
        if kind == "markup" or not words:
            out.append(raw)
            continue
        lead = raw[:len(raw) - len(raw.lstrip())]
        trail = raw[len(raw.rstrip()):]
        out.append(lead + html.escape(translation, quote=False) + trail)
    return "".join(out)
