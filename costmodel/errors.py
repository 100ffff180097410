"""The one error type users see: bad input, named by file, field, value and what is allowed."""

from __future__ import annotations


class InputError(ValueError):
    """Bad input. The CLI prints ``str(err)`` and exits with status 2.

    Parameters name where the problem is: ``source`` (file or 'record'), ``field``,
    ``value`` (the bad value) and ``allowed`` (what would be accepted).
    """

    def __init__(self, message: str, *, source: str | None = None, field: str | None = None,
                 value=None, allowed: str | None = None):
        self.source, self.field, self.value, self.allowed = source, field, value, allowed
        parts = []
        if source:
            parts.append(str(source))
        if field:
            parts.append(f"field '{field}'")
        prefix = ": ".join(parts)
        text = f"{prefix}: {message}" if prefix else message
        if value is not None and "got" not in message:
            v = shown(value)
            if v.strip("'") not in message:
                text += f" (got {v})"
        if allowed:
            text += f"; allowed: {allowed}"
        super().__init__(shown_text(text, MAX_MESSAGE_CHARS))


#: an error message is cut to this many characters (a value is never printed in full)
MAX_MESSAGE_CHARS = 2000


def shown(value, limit: int = 60) -> str:
    """``repr(value)`` cut to about ``limit`` characters without building the full repr first
    (reprlib looks at a bounded number of elements and levels: an alias-bomb list of 10^9 items
    or a 1 GB string costs no more than a short one)."""
    import reprlib

    r = reprlib.Repr()
    r.maxstring = r.maxother = max(limit, 12)
    r.maxlist = r.maxtuple = r.maxdict = r.maxset = 6
    r.maxlevel = 3
    return shown_text(r.repr(value), limit)


def shown_text(text: str, limit: int = 60) -> str:
    """``text`` cut to ``limit`` characters ("..." marks the cut)."""
    return text if len(text) <= limit else text[:limit - 3] + "..."


def suggest(word: str, choices) -> str:
    """' (did you mean X?)' for the closest of ``choices``, or ''."""
    import difflib

    word = str(word)
    if len(word) > 100:             # nothing is that long; difflib's cost grows with the product of lengths
        return ""
    close = difflib.get_close_matches(word.lower(), [str(c) for c in choices], n=3, cutoff=0.6)
    return f" (did you mean {', '.join(close)}?)" if close else ""
