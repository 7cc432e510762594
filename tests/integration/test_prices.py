"""Prices from AWS (issue 29): the Price List API for on-demand, DescribeSpotPriceHistory for spot,
cached a day under the state home, and ddpctl's dated table where the API cannot be reached.

moto (5.2) has no ``pricing`` service: its server answers GetProducts with HTTP 500. So the fallback
is tested for real against moto through the endpoint setting (never patching boto3), and the
reading of a Price List answer on a document in GetProducts' format for p3.2xlarge in us-west-2
(tests/golden/price_list_p3.2xlarge_us-west-2.json: written after AWS's format, not recorded from
a live call). moto does answer DescribeSpotPriceHistory (0.00001 USD for the types it offers),
which is tested for real, with the cache.

Its pure tests (no process beyond Python) are in tests/unit/test_prices.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ddpctl.infra.providers.aws import prices, pricing
from tests.support.moto import Moto
from tests.support.specs import cluster_spec


@pytest.fixture
def aws(moto: Moto, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This process's boto3 pointed at the moto server (its endpoint setting), a state home of its own."""
    for key, value in moto.env(tmp_path / "home", tmp_path).items():
        if key.startswith(("AWS_", "DDPCTL_HOME")):
            monkeypatch.setenv(key, value)
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    return tmp_path / "home"


def test_without_the_price_list_api_the_table_answers_and_says_so(aws: Path) -> None:
    price = prices.on_demand("p3.2xlarge", "us-west-2")
    assert price.usd_per_hour == pricing.ON_DEMAND_USD_PER_HOUR["p3.2xlarge"] and price.source == "table"
    assert price.note.startswith(f"ddpctl's price table of {pricing.PRICES_AS_OF} (us-east-1 on-demand): ")
    assert "the AWS Price List API could not be reached" in price.note
    assert not prices.cache_path().exists()  # a fallback is not cached: the next command asks again
    unknown = prices.on_demand("x9.huge", "us-west-2")
    assert unknown.usd_per_hour is None and "(it does not list this type)" in unknown.note


def test_spot_prices_come_from_ec2_and_are_cached(aws: Path) -> None:
    price = prices.spot("t3.micro", "us-east-1", "us-east-1a")
    assert (price.usd_per_hour, price.source, price.note) == (0.00001, "spot history", "")
    cached = json.loads(prices.cache_path().read_text())
    assert prices.cache_path().parent.parent == aws
    assert cached["us-east-1/us-east-1a/t3.micro/spot"]["usd_per_hour"] == 0.00001
    # within the hour the cache answers; an older entry is asked again
    cached["us-east-1/us-east-1a/t3.micro/spot"]["usd_per_hour"] = 0.5
    prices.cache_path().write_text(json.dumps(cached))
    assert prices.spot("t3.micro", "us-east-1", "us-east-1a").usd_per_hour == 0.5
    later = price.at + prices.SPOT_TTL_S + 1
    assert prices.spot("t3.micro", "us-east-1", "us-east-1a", now=later).usd_per_hour == 0.00001


def test_spot_without_a_spot_price_shows_on_demand_and_says_so(aws: Path) -> None:
    price = prices.hourly("p3.2xlarge", "us-east-1", spot_market=True)
    assert price.usd_per_hour == pricing.ON_DEMAND_USD_PER_HOUR["p3.2xlarge"]
    assert price.note.startswith("EC2 has no spot price for p3.2xlarge; ddpctl's price table of")


def test_a_cached_price_list_answer_is_used_for_a_day(aws: Path) -> None:
    answer = prices.Price(3.06, "price list", at=1000.0)
    prices._remember("us-west-2/p3.2xlarge/on-demand", answer)
    assert prices.on_demand("p3.2xlarge", "us-west-2", now=1000.0 + prices.ON_DEMAND_TTL_S - 1) == answer
    assert prices.on_demand("p3.2xlarge", "us-west-2", now=1000.0 + prices.ON_DEMAND_TTL_S + 1).source == "table"


def test_status_says_where_the_price_came_from(aws: Path) -> None:
    from ddpctl.infra.model.state import ClusterState
    from ddpctl.infra.providers.aws.defaults import with_defaults
    from ddpctl.infra.providers.aws.provider import AwsProvider

    spec = with_defaults(cluster_spec(name="c", provider="aws", nodes=2, options={"region": "us-east-1"}))
    live = AwsProvider().status(ClusterState(spec=spec, cluster_id="abc", status="up"))
    assert live.details["price_source"] == "table"
    assert live.to_dict()["price_note"].startswith("ddpctl's price table of")
    assert AwsProvider().hourly_cost(spec) == round(2 * pricing.ON_DEMAND_USD_PER_HOUR["p3.2xlarge"], 4)


def test_a_dry_run_with_credentials_prices_from_aws_and_names_the_source(moto: Moto, tmp_path: Path) -> None:
    """The dry run asks AWS as `up` does (one node here): moto answers spot prices (its history) but has
    no Price List API, so an on-demand plan shows the table's price and why."""
    from tests.support.aws_env import UP, Env

    env = Env(moto, tmp_path / "home", tmp_path)
    spot = env.ok(*UP, "--instance-type", "g5.xlarge", "--spot", "--dry-run").stdout
    [line] = [x for x in spot.splitlines() if x.startswith("  cost: ")]
    assert line.startswith("  cost: $0.00/h: spot in us-east-1, EC2's latest spot price"), line
    doc = json.loads(env.ok(*UP, "--instance-type", "g5.xlarge", "--spot", "--dry-run", "--json").stdout)
    assert {k: doc["aws"]["price"][k] for k in ("source", "region", "market")} == {
        "source": "spot history",
        "region": "us-east-1",
        "market": "spot",
    }
    on_demand = env.ok(*UP, "--instance-type", "g5.xlarge", "--dry-run").stdout
    [line] = [x for x in on_demand.splitlines() if x.startswith("  cost: ")]
    assert line.startswith(
        f"  cost: $1.01/h: the us-east-1 on-demand list price of {pricing.PRICES_AS_OF}, from ddpctl's table "
        "(the AWS Price List API could not be reached"
    ), line
    env.assert_clean()
