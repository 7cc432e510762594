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
from tests.support import GOLDEN, REPO

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


# ---- ddpctl's bundled table (issue 41): dated by its sources, current, the GPU types users pick ---

#: The GPU types users pick, which the table must price (p5e.48xlarge has no on-demand price: below).
PICKED = [
    *("g5.xlarge", "g5.2xlarge", "g5.12xlarge", "g5.48xlarge"),
    *("g6.xlarge", "g6.12xlarge", "g6.48xlarge"),
    *("g6e.xlarge", "g6e.12xlarge", "g6e.48xlarge"),
    *("p4d.24xlarge", "p5.48xlarge", "p5en.48xlarge"),
    *("p3.2xlarge", "p3.8xlarge", "p3.16xlarge", "p3dn.24xlarge"),
]


def test_the_table_prices_the_gpu_types_users_pick_and_knows_their_facts() -> None:
    from ddpctl.infra.providers.aws import pricing

    table = pricing.ON_DEMAND_USD_PER_HOUR
    assert [t for t in PICKED if t not in table] == []
    assert [t for t in table if t not in pricing.TYPES] == []  # every priced type has its vCPUs and GPUs
    for t in table:
        gpu = pricing.gpu(t)
        assert (pricing.TYPES[t].gpus > 0) == (gpu is not None), t  # a GPU family, and GPUs, or neither
    # after AWS's June 2025 cut of P4 and P5 (up to 45%): below what the table had before it
    assert table["p4d.24xlarge"] < 32.7726 and table["p5.48xlarge"] < 98.32
    # no source gives p5e.48xlarge an on-demand price: not priced (the plan says unknown), but known
    assert "p5e.48xlarge" not in table and pricing.TYPES["p5e.48xlarge"].gpus == 8


def test_the_tables_date_is_its_sources_and_each_figure_has_one() -> None:
    import datetime

    from ddpctl.infra.providers.aws import pricing

    as_of = datetime.date.fromisoformat(pricing.PRICES_AS_OF)
    for t, date in pricing.OLDER_PRICES.items():
        assert t in pricing.ON_DEMAND_USD_PER_HOUR and datetime.date.fromisoformat(date) < as_of
    assert pricing.price_date("p3dn.24xlarge") == "2026-01-21"
    assert pricing.price_date("g5.xlarge") == pricing.PRICES_AS_OF
    source = (REPO / "infra" / "providers" / "aws" / "pricing.py").read_text()
    assert source.count("[PL]") > 1 and source.count("[V]") > 1  # the sources, and where each is used


# ---- the plan's cost line: which source, region and market -----------------------------------------


def aws_plan(**options):
    from ddpctl.infra.providers.aws.defaults import with_defaults
    from ddpctl.infra.providers.aws.plan import plan_from_spec
    from tests.support.specs import cluster_spec

    spec = with_defaults(cluster_spec(name="c1", provider="aws", nodes=2, options=options))
    return plan_from_spec(spec, "abc", "/d")


def cost_line(lines: list[str]) -> str:
    [line] = [line for line in lines if line.startswith("  cost: ")]
    return line


def test_without_credentials_the_dry_run_says_the_table_is_us_east_1_on_demand_not_a_spot_price() -> None:
    from ddpctl.infra.providers.aws import pricing
    from ddpctl.infra.providers.aws.dry_run import offline_report

    report = offline_report(aws_plan(region="eu-west-1", spot=True, instance_type="g5.xlarge"))
    line = cost_line(report.lines)
    assert line.startswith("  cost: $2.01/h: ")  # 2 x $1.006
    assert f"the us-east-1 on-demand list price of {pricing.PRICES_AS_OF}, from ddpctl's table" in line
    assert "not eu-west-1's, not a spot price (spot is usually less)" in line
    assert "(no AWS credentials found: AWS's own prices were not asked)" in line
    assert "spot in eu-west-1" not in line
    assert report.to_dict()["price"] == {
        "usd_per_hour": 1.006,
        "source": "table",
        "note": f"ddpctl's price table of {pricing.PRICES_AS_OF} (us-east-1 on-demand): "
        "no AWS credentials found: AWS's own prices were not asked",
        "at": 0.0,
        "why": "no AWS credentials found: AWS's own prices were not asked",
        "region": "eu-west-1",
        "market": "spot",
        "text": line.split(": ", 2)[2].rsplit("; about", 1)[0],
    }
    # in the table's own region and market: no caveat to make
    home = cost_line(offline_report(aws_plan(region="us-east-1", instance_type="g5.xlarge")).lines)
    assert "not us-east-1's" not in home and "spot" not in home
    # a type the table does not price: unknown, never a guess
    unknown = cost_line(offline_report(aws_plan(instance_type="p5e.48xlarge")).lines)
    assert unknown.startswith(f"  cost: unknown: ddpctl's price table (of {pricing.PRICES_AS_OF}) does not list")


def test_with_aws_answering_the_line_names_its_source_region_and_market() -> None:
    from ddpctl.infra.providers.aws.dry_run import priced

    plan = aws_plan(region="eu-west-1", spot=True, instance_type="g5.xlarge")
    spot = plan.describe_cost(*priced(plan, prices.Price(0.41, "spot history", at=1.0)))
    assert spot.startswith("  cost: $0.82/h: spot in eu-west-1, EC2's latest spot price")
    assert "ddpctl's table" not in spot
    od_plan = aws_plan(region="eu-west-1", instance_type="g5.xlarge")
    on_demand = od_plan.describe_cost(*priced(od_plan, prices.Price(1.123, "price list", at=1.0)))
    assert on_demand.startswith("  cost: $2.25/h: on-demand in eu-west-1, from AWS's Price List API; about $54 a day")
    # AWS asked, but no answer: the table, and why
    asked = prices._instead(
        prices.table_price("g5.xlarge", "the AWS Price List API could not be reached (HTTP 500)"),
        "spot prices could not be read (HTTP 500): on-demand shown",
    )
    fallback = plan.describe_cost(*priced(plan, asked))
    assert "the us-east-1 on-demand list price of" in fallback and "not a spot price" in fallback
    assert fallback.endswith(
        "(spot prices could not be read (HTTP 500): on-demand shown; the AWS Price List API could not be "
        "reached (HTTP 500)); about $48 a day until `ddpctl down`"
    )


def test_ups_lines_show_the_price_the_question_showed_with_its_source() -> None:
    """`up`'s "creating ..." and "is up" lines: AWS's answer where it gave one, else the table's,
    dated and named as us-east-1 on-demand (before, always the table's, undated)."""

    def words(price: prices.Price, region: str = "us-west-2", spot: bool = False, itype: str = "p3.2xlarge") -> str:
        return prices.cluster_words(price, 2, instance_type=itype, region=region, spot=spot)

    assert words(prices.Price(3.5, "price list")) == "$7.00/h (on-demand in us-west-2, AWS's Price List)"
    assert words(prices.Price(1.25, "spot history"), spot=True) == (
        "$2.50/h (spot in us-west-2, EC2's spot price history)"
    )
    table = prices.table_price("p3.2xlarge", "no credentials")
    assert words(table, region="us-east-1") == "$6.12/h (ddpctl's table of 2026-09-24: us-east-1 on-demand)"
    assert words(table, spot=True) == (
        "$6.12/h (ddpctl's table of 2026-09-24: us-east-1 on-demand, not us-west-2's, not spot)"
    )
    unknown = prices.table_price("x9.huge", "no credentials")
    assert words(unknown, itype="x9.huge") == "unknown (not in ddpctl's price table)"
