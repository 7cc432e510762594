"""Prices from AWS (issue 29): the Price List API for on-demand, DescribeSpotPriceHistory for spot,
cached a day under the state home, and ddpctl's dated table where the API cannot be reached.

moto (5.2) has no ``pricing`` service: its server answers GetProducts with HTTP 500. So the fallback
is tested for real against moto through the endpoint setting (never patching boto3), and the
reading of a Price List answer on a document in GetProducts' format for p3.2xlarge in us-west-2
(tests/golden/price_list_p3.2xlarge_us-west-2.json: written after AWS's format, not recorded from
a live call). moto does answer DescribeSpotPriceHistory (0.00001 USD for the types it offers),
which is tested for real, with the cache.

Its tests that start processes (real parts) are in tests/integration/test_prices.py.
"""

from __future__ import annotations

import json

from ddpctl.infra.providers.aws import prices
from tests.support import GOLDEN

PRICE_LIST = GOLDEN / "price_list_p3.2xlarge_us-west-2.json"


def test_the_filters_ask_for_linux_on_demand_in_the_region() -> None:
    filters = {f["Field"]: f["Value"] for f in prices.price_list_filters("p3.2xlarge", "us-west-2")}
    assert filters == {
        "instanceType": "p3.2xlarge",
        "regionCode": "us-west-2",
        "operatingSystem": "Linux",
        "tenancy": "Shared",
        "preInstalledSw": "NA",
        "capacitystatus": "Used",
        "licenseModel": "No License required",
    }
    assert all(f["Type"] == "TERM_MATCH" for f in prices.price_list_filters("p3.2xlarge", "us-west-2"))


def test_a_price_list_document_is_read_on_demand_not_reserved() -> None:
    answer = json.loads(PRICE_LIST.read_text())
    assert prices.on_demand_usd(answer["PriceList"]) == 3.06  # not the reserved 1.074, nor the upfront fee
    assert prices.on_demand_usd([]) is None


def test_the_latest_spot_price_of_the_zone_or_the_highest() -> None:
    history = [
        {"AvailabilityZone": "us-east-1a", "SpotPrice": "0.90", "Timestamp": "2026-11-26T20:00:00Z"},
        {"AvailabilityZone": "us-east-1a", "SpotPrice": "0.95", "Timestamp": "2026-11-26T21:00:00Z"},
        {"AvailabilityZone": "us-east-1b", "SpotPrice": "1.20", "Timestamp": "2026-11-26T19:00:00Z"},
    ]
    assert prices.spot_usd(history, "us-east-1a") == 0.95
    assert prices.spot_usd(history) == 1.20
    assert prices.spot_usd([]) is None
