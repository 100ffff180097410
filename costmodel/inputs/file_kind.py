"""Which command reads a YAML file: scenarios (``costmodel run``), claims (``costmodel check``) and
prices (``costmodel plan --prices``) all live in ``scenarios/``; a file handed to the wrong command is
recognised by its top-level keys and the message names the command that reads it.

=========  ===========================================  =========================================
kind       recognised by                                read by
=========  ===========================================  =========================================
claims     a ``claims:`` list                           ``costmodel check FILE``
prices     a ``prices:`` mapping                        ``costmodel plan KEY=VALUE ... --prices FILE``
scenario   ``strategies:`` (and usually ``base:``)      ``costmodel run FILE``
=========  ===========================================  =========================================
"""

from __future__ import annotations

from costmodel.errors import InputError

KINDS = {
    "scenario": ("a scenario file", "costmodel run {path}"),
    "claims": ("a claims file", "costmodel check {path}"),
    "prices": ("a prices file", "costmodel plan model=... prompt_len=... --prices {path}"),
}


def file_kind(data) -> str | None:
    """'claims', 'prices', 'scenario' or None (not recognisably any of them) for a parsed YAML file."""
    if not isinstance(data, dict):
        return None
    if isinstance(data.get("claims"), list):
        return "claims"
    if isinstance(data.get("prices"), dict):
        return "prices"
    if "strategies" in data and "claims" not in data and "prices" not in data:
        return "scenario"
    return None


def refuse_other_kind(data, path, expected: str) -> None:
    """Raise an InputError naming the right command when ``data`` is a file of another kind."""
    kind = file_kind(data)
    if kind is None or kind == expected:
        return
    what, cmd = KINDS[kind]
    raise InputError(f"this is {what} (top-level '{_key(kind)}'), not {KINDS[expected][0]}; "
                     f"read it with `{cmd.format(path=path)}`", source=str(path))


def _key(kind: str) -> str:
    return {"claims": "claims:", "prices": "prices:", "scenario": "strategies:"}[kind]
