"""Generated texts that can be read again in another language: a finding's summary and proposal are built
from catalog messages and their figures (`_("... %(share)s ...") % {...}`, joined with `+`), and stored in
the appliance's language (English: the API's, the audit log's) with a rendering for each other language of
the portal, so that a Russian operator reads them in Russian.

A Text is a str (its value is the rendering in the language active when it was made), so code and tests
that read it as one keep working; it also keeps its parts: (message, figures) pairs and literal strings.
`in_language` renders the parts again, figures that are Texts themselves (a span of hours, a reason) too.
"""

from __future__ import annotations

from django.utils import translation

MESSAGE, CONTEXT_MESSAGE, LITERAL = "message", "context-message", "literal"


def _render(parts: tuple) -> str:
    pieces = []
    for kind, text, figures in parts:
        if kind == LITERAL:
            pieces.append(text)
            continue
        translated = translation.pgettext(*text) if kind == CONTEXT_MESSAGE else translation.gettext(text)
        if figures is None:
            pieces.append(translated)
            continue
        values = {name: _render(value.parts) if isinstance(value, Text) else value for name, value in figures.items()}
        pieces.append(translated % values)
    return "".join(pieces)


def _parts(value) -> tuple:
    return value.parts if isinstance(value, Text) else ((LITERAL, str(value), None),)


class Text(str):
    parts: tuple

    def __new__(cls, parts: tuple):
        text = super().__new__(cls, _render(parts))
        text.parts = parts
        return text

    def __mod__(self, figures):
        if len(self.parts) != 1 or self.parts[0][0] == LITERAL or self.parts[0][2] is not None:
            raise TypeError("only a catalog message not yet given its figures takes them")
        if not isinstance(figures, dict):
            raise TypeError("a catalog message takes its figures by name")
        return Text(((self.parts[0][0], self.parts[0][1], dict(figures)),))

    def __add__(self, other):
        return Text(self.parts + _parts(other))

    def __radd__(self, other):
        return Text(_parts(other) + self.parts)

    def __reduce__(self):  # a copy or a pickle is the text as read
        return (str, (str(self),))

    def in_language(self, language: str) -> str:
        with translation.override(language):
            return _render(self.parts)


def gettext(message: str) -> Text:
    """The catalog's message (makemessages finds it under `_`), to be given its figures with `%`."""
    return Text(((MESSAGE, message, None),))


def pgettext(context: str, message: str) -> Text:
    """The catalog's message in its context (a word the catalog has in another sense elsewhere)."""
    return Text(((CONTEXT_MESSAGE, (context, message), None),))


def joined(separator: str, texts) -> Text | str:
    """`separator.join(texts)`, keeping each Text's parts."""
    result: Text | str = ""
    for index, text in enumerate(texts):
        result = (result + separator + text) if index else (Text(_parts(text)) if not isinstance(text, Text) else text)
    return result


def in_language(text, language: str) -> str:
    """A Text rendered in `language`; any other value as it is."""
    return text.in_language(language) if isinstance(text, Text) else str(text)
