"""What an instance costs per hour, asked of AWS: on-demand from the Price List API (``pricing``
``GetProducts``: Linux, shared tenancy, no pre-installed software, in the cluster's region), spot
from EC2's ``DescribeSpotPriceHistory`` for ``--spot``. Answers are cached under the state home for
a day (spot prices for an hour: they move). Where the API cannot be reached (no network, no
``pricing:GetProducts`` permission, an endpoint without it, as moto's), the bundled table of
``pricing.py`` answers, and the price says so, with the table's date.

Pure here: the Price List filters, reading a Price List document and the spot history, and where
a price comes from in words (``source_text``); the adapter is ``hourly``.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from . import pricing

#: the Price List API answers in these regions only (us-east-1 for every region's prices)
PRICE_LIST_REGION = "us-east-1"
ON_DEMAND_TTL_S = 86400
SPOT_TTL_S = 3600
CACHE_FILE = "prices.json"


@dataclass(frozen=True)
class Price:
    """One instance's price per hour, and where it came from."""

    usd_per_hour: float | None  # None: not known
    #: "price list" (AWS's Price List API), "spot history" (DescribeSpotPriceHistory), "table" (ddpctl's)
    source: str
    #: one phrase for the user where the answer is not AWS's own: why, and the table's date
    note: str = ""
    at: float = 0.0  # when AWS answered (epoch seconds); 0: the table
    #: why AWS's answer is not the one shown ("" where it is): the note without the table's part
    why: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def price_list_filters(instance_type: str, region: str) -> list[dict[str, str]]:
    """GetProducts' filters for one instance type's Linux on-demand price in ``region`` (pure)."""
    fields = {
        "instanceType": instance_type,
        "regionCode": region,
        "operatingSystem": "Linux",
        "tenancy": "Shared",
        "preInstalledSw": "NA",
        "capacitystatus": "Used",
        "licenseModel": "No License required",
    }
    return [{"Type": "TERM_MATCH", "Field": k, "Value": v} for k, v in fields.items()]


def on_demand_usd(price_list: list[str]) -> float | None:
    """The hourly on-demand USD price in GetProducts' ``PriceList`` (each item a JSON document:
    ``terms.OnDemand.<offer>.priceDimensions.<dim>.pricePerUnit.USD`` per ``Hrs``); None if none (pure)."""
    for item in price_list:
        doc = json.loads(item) if isinstance(item, str) else item
        for offer in doc.get("terms", {}).get("OnDemand", {}).values():
            for dim in offer.get("priceDimensions", {}).values():
                usd = dim.get("pricePerUnit", {}).get("USD")
                if dim.get("unit", "Hrs") == "Hrs" and usd is not None and float(usd) > 0:
                    return float(usd)
    return None


def spot_usd(history: list[dict[str, Any]], zone: str = "") -> float | None:
    """The latest spot price of ``zone`` in ``DescribeSpotPriceHistory``'s answer, or (no zone
    given) the highest zone's latest: what the cluster may pay (pure)."""
    latest: dict[str, tuple[Any, float]] = {}
    for row in history:
        az, when, usd = row.get("AvailabilityZone", ""), row.get("Timestamp", ""), float(row["SpotPrice"])
        if az not in latest or str(when) > str(latest[az][0]):
            latest[az] = (when, usd)
    if zone and zone in latest:
        return latest[zone][1]
    return max((usd for _, usd in latest.values()), default=None)


def table_price(instance_type: str, why: str) -> Price:
    """The bundled table's price, saying why and of when."""
    usd = pricing.ON_DEMAND_USD_PER_HOUR.get(instance_type)
    where = f"{pricing.PRICE_REGION} on-demand" if usd is not None else "it does not list this type"
    note = f"ddpctl's price table of {pricing.price_date(instance_type)} ({where}): {why}"
    return Price(usd, "table", note, why=why)


def source_text(price: Price, *, instance_type: str, region: str, spot: bool) -> str:
    """Where a plan's price comes from, for which region and market, in words (pure): AWS's answer
    for the cluster's region and market, or ddpctl's table (``pricing.table_text``), and why AWS's
    answer is not the one shown."""
    if price.source == "spot history":
        text = f"spot in {region}, EC2's latest spot price (its spot price history; it moves by the hour)"
    elif price.source == "price list":
        text = f"on-demand in {region}, from AWS's Price List API"
    else:
        text = pricing.table_text(instance_type, region, spot)
    return text + (f" ({price.why})" if price.why else "")


# ---- the adapter --------------------------------------------------------------------------------


def cache_path() -> Path:
    from ...model.store import default_home

    return default_home() / "cache" / CACHE_FILE


def _cached(key: str, ttl: float, now: float) -> Price | None:
    try:
        found = json.loads(cache_path().read_text()).get(key)
    except (OSError, ValueError):
        return None
    if not isinstance(found, dict) or now - float(found.get("at", 0)) > ttl:
        return None
    return Price(**found)


def _remember(key: str, price: Price) -> None:
    path = cache_path()
    try:
        doc = json.loads(path.read_text()) if path.exists() else {}
    except (OSError, ValueError):
        doc = {}
    doc[key] = price.to_dict()
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(doc, indent=1))
        os.replace(tmp, path)
    except OSError:
        pass  # a cache that cannot be written is asked again next time


def on_demand(instance_type: str, region: str, now: float | None = None) -> Price:
    """AWS's on-demand price of one instance in ``region`` (cached a day), else the table's."""
    from .boto import aws_exceptions, price_config
    from .ec2 import Aws

    now = time.time() if now is None else now
    key = f"{region}/{instance_type}/on-demand"
    found = _cached(key, ON_DEMAND_TTL_S, now)
    if found is not None:
        return found
    try:
        aws, filters = Aws(PRICE_LIST_REGION, price_config()), price_list_filters(instance_type, region)
        answer = aws.client("pricing").get_products(ServiceCode="AmazonEC2", Filters=filters, MaxResults=10)
    except aws_exceptions() as exc:
        return table_price(instance_type, f"the AWS Price List API could not be reached ({_short(exc)})")
    usd = on_demand_usd(answer.get("PriceList", []))
    if usd is None:
        return table_price(instance_type, f"the AWS Price List API has no price for {instance_type} in {region}")
    price = Price(usd, "price list", at=now)
    _remember(key, price)
    return price


def spot(instance_type: str, region: str, zone: str = "", now: float | None = None) -> Price:
    """EC2's latest spot price of one instance (``zone``'s, else the highest zone's; cached an
    hour), else the on-demand price, which spot does not exceed."""
    from .boto import aws_exceptions, price_config
    from .ec2 import Aws

    now = time.time() if now is None else now
    key = f"{region}/{zone or '*'}/{instance_type}/spot"
    found = _cached(key, SPOT_TTL_S, now)
    if found is not None:
        return found
    args: dict[str, Any] = {"AvailabilityZone": zone} if zone else {}
    try:
        history = Aws(region, price_config()).ec2.describe_spot_price_history(
            InstanceTypes=[instance_type], ProductDescriptions=["Linux/UNIX"], StartTime=now, **args
        )["SpotPriceHistory"]
    except aws_exceptions() as exc:
        why = f"spot prices could not be read ({_short(exc)}): on-demand shown"
        return _instead(on_demand(instance_type, region, now), why)
    usd = spot_usd(history, zone)
    if usd is None:
        return _instead(on_demand(instance_type, region, now), f"EC2 has no spot price for {instance_type}")
    price = Price(usd, "spot history", at=now)
    _remember(key, price)
    return price


def cluster_words(price: Price, count: int, *, instance_type: str, region: str, spot: bool) -> str:
    """A cluster's price per hour and its source in a few words, for ``up``'s lines (pure): the
    price the cost question showed, not the table's when AWS answered."""
    total = None if price.usd_per_hour is None else price.usd_per_hour * count
    if price.source == "spot history":
        where = f"spot in {region}, EC2's spot price history"
    elif price.source == "price list":
        where = f"on-demand in {region}, AWS's Price List"
    elif instance_type not in pricing.ON_DEMAND_USD_PER_HOUR:
        return pricing.format_usd(None)
    else:
        date = pricing.price_date(instance_type)
        where = (
            f"ddpctl's table of {date}: {pricing.PRICE_REGION} on-demand"
            + (f", not {region}'s" if region != pricing.PRICE_REGION else "")
            + (", not spot" if spot else "")
        )
    return f"{pricing.format_usd(total)} ({where})"


def hourly(instance_type: str, region: str, *, spot_market: bool, zone: str = "") -> Price:
    return spot(instance_type, region, zone) if spot_market else on_demand(instance_type, region)


def _instead(price: Price, why: str) -> Price:
    note = "; ".join(p for p in (why, price.note) if p)
    return Price(price.usd_per_hour, price.source, note, price.at, "; ".join(p for p in (why, price.why) if p))


def _short(exc: BaseException) -> str:
    """An API error in a few words: its code and HTTP status (an endpoint without the API answers
    with a page, not a message), else botocore's first line."""
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        code = response.get("Error", {}).get("Code", "")
        status = response.get("ResponseMetadata", {}).get("HTTPStatusCode", "")
        message = response.get("Error", {}).get("Message", "")
        if message.lstrip().startswith("<"):
            message = ""
        text = ", ".join(str(p) for p in (code if code != str(status) else "", f"HTTP {status}", message) if p)
    else:
        text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text if len(text) <= 160 else text[:157] + "..."
