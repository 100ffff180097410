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


def kept(exc: InputError) -> InputError:
    """``exc`` ready to be kept in a cache: without its traceback and context (which would keep the
    frames that raised it, and everything they held, alive)."""
    exc.__context__ = exc.__cause__ = None
    return exc.with_traceback(None)


def again(exc: InputError) -> InputError:
    """A fresh copy of a kept InputError to raise (the same message, source, field, value, allowed)."""
    new = type(exc).__new__(type(exc))
    new.__dict__.update(exc.__dict__)
    new.args = exc.args
    return new


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


def suggest(word: str, choices, aliases: dict | None = None, n: int = 3) -> str:
    """' (did you mean X, Y?)' for the likeliest of ``choices``, or ''.

    Ranked: choices named by an alias the word contains (``aliases``: {'tpot': 'target_time_per_output_token_s'}),
    then choices that start with the word, then choices that contain it or that it contains (at least 3
    characters), each group by similarity; only when none of these match, the closest by edit similarity (difflib
    ratio ≥ 0.6). So ``h100`` offers h100-sxm, h100-pcie (not v100 and h200).
    """
    import difflib

    w = str(word).strip().lower()
    if len(w) > 100:                # nothing is that long; difflib's cost grows with the product of lengths
        return ""
    names = [str(c) for c in choices]
    low = {c: c.lower() for c in names}

    def ratio(c):
        return -difflib.SequenceMatcher(None, w, low[c]).ratio()

    ranked = []
    for alias, target in (aliases or {}).items():
        if alias.lower() in w and target in low and target not in ranked:
            ranked.append(target)
    groups = ([c for c in names if low[c].startswith(w)],
              [c for c in names if len(w) >= 3 and (w in low[c] or (len(low[c]) >= 3 and low[c] in w))])
    for g in groups:
        ranked += [c for c in sorted(g, key=ratio) if c not in ranked]
    if not ranked:               # nothing obvious: fall back to edit similarity
        ranked = difflib.get_close_matches(w, names, n=n, cutoff=0.6)
    ranked = [c for c in ranked if low[c] != w][:n]
    return f" (did you mean {', '.join(ranked)}?)" if ranked else ""
