"""Prices for capacity plans: the prices YAML (per device-hour, with its source), and the cost of a
plan's answer from them (cost_per_hour = price × devices; cost_per_million_tokens = cost_per_hour /
(3600 s × tokens/s) × 1e6). Used by :func:`costmodel.analysis.plan.plan` to pick the cheapest hardware.
"""

from __future__ import annotations

import os

from costmodel.errors import InputError, shown, shown_text

def load_prices(path) -> dict:
    """Prices YAML -> {'currency', 'source', 'prices': {hardware id: price per device-hour}}.

    Format (see scenarios/prices_example.yaml)::

        currency: USD
        source: "where the figures come from, or 'illustrative'"
        prices:                     # per device-hour
          h100-sxm: 3.00
          a100-80gb: {per_device_hour: 1.80, source: "..."}
    """
    from costmodel.inputs.file_kind import refuse_other_kind
    from costmodel.inputs.specs import load_yaml
    data = load_yaml(path)
    src = str(path)
    refuse_other_kind(data, src, "prices")
    if not isinstance(data, dict) or not isinstance(data.get("prices"), dict) or not data["prices"]:
        raise InputError("a prices file needs a 'prices' mapping of hardware id: price per device-hour",
                         source=src, field="prices")
    unknown = sorted(set(data) - {"name", "currency", "source", "notes", "prices"})
    if unknown:
        raise InputError("unknown field", source=src, field=unknown[0],
                         allowed="name, currency, source, notes, prices")
    return {"currency": str(data.get("currency", "USD")), "source": str(data.get("source", "")),
            "prices": price_table(data["prices"], src)}


#: largest price per device-hour accepted (a unit mistake beyond this)
MAX_PRICE = 1e6


def price_table(prices: dict, src: str = "prices") -> dict:
    """{hardware id: price per device-hour}: each a finite number in 0..MAX_PRICE (or a mapping with
    ``per_device_hour``)."""
    out = {}
    for hw, v in prices.items():
        x = v.get("per_device_hour") if isinstance(v, dict) else v
        ok = not isinstance(x, bool) and isinstance(x, (int, float))
        if not ok or not 0 <= x <= MAX_PRICE:          # also refuses nan, inf and huge integers
            raise InputError(f"must be a number per device-hour in 0..{MAX_PRICE:g}, got {shown(v)}", source=src,
                             field=f"prices.{shown_text(str(hw))}")
        out[str(hw).strip().lower()] = float(x)
    return out


def prices_from_option(p) -> dict | None:
    """{"currency", "source", "prices": {hardware id: price per device-hour}} from the ``prices``
    option (a path to a prices YAML, or its parsed mapping), or None without one."""
    if p is None:
        return None
    if isinstance(p, dict) and "prices" in p and isinstance(p["prices"], dict):
        p = p["prices"]
    if not isinstance(p, (dict, str, os.PathLike)):
        raise InputError(f"must be a path to a prices YAML or a mapping, got {type(p).__name__}", field="prices")
    return load_prices(p) if not isinstance(p, dict) else {
        "currency": "USD", "source": "", "prices": price_table(p)}


def add_price(ans: dict, hw: str, price_info: dict, several: bool) -> None:
    """cost_per_hour = price × devices; cost_per_million_tokens = cost_per_hour / (3600 s × tokens/s) × 1e6."""
    price = price_info["prices"].get(hw.lower())
    if price is None and several:
        raise InputError(f"no price for hardware '{hw}'", field="prices",
                         allowed=", ".join(sorted(price_info["prices"])))
    if price is not None:
        ans["price_per_device_hour"] = price
        ans["cost_per_hour"] = price * ans["n_devices_total"]
        tps = ans.get("tokens_per_s") or 0.0
        ans["cost_per_million_tokens"] = ans["cost_per_hour"] / (3600.0 * tps) * 1e6 if tps > 0 else None
        ans["currency"] = price_info["currency"]
