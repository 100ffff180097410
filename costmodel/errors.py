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
        if value is not None and "got" not in message and str(value) not in message:
            text += f" (got {value!r})"
        if allowed:
            text += f"; allowed: {allowed}"
        super().__init__(text)


def suggest(word: str, choices) -> str:
    """' (did you mean X?)' for the closest of ``choices``, or ''."""
    import difflib

    close = difflib.get_close_matches(str(word).lower(), [str(c) for c in choices], n=3, cutoff=0.6)
    return f" (did you mean {', '.join(close)}?)" if close else ""
