"""The EC2 requests an ``AwsPlan`` makes, as plain dicts: pure, no boto3, no network.

``up`` sends them (``dry_run`` with DryRun=True), so the requests themselves are unit-tested: the
security group's rules, the nodes' network interfaces (EFA where the type has it), the one RunInstances call that launches every node, and its client token.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from .plan import AwsPlan

#: What RunInstances makes for each node, tagged at creation (docs/aws-iam-policy.json allows them).
NODE_RESOURCES = ("instance", "volume", "network-interface")


def ingress_rules(ssh_cidr: str, group_id: str) -> list[dict[str, Any]]:
    """SSH from ``ssh_cidr`` only, and all traffic between members of the group."""
    net = ipaddress.ip_network(ssh_cidr, strict=False)
    ranges = (
        {"IpRanges": [{"CidrIp": str(net), "Description": "ddpctl: SSH from the controller"}]}
        if net.version == 4
        else {"Ipv6Ranges": [{"CidrIpv6": str(net), "Description": "ddpctl: SSH from the controller"}]}
    )
    return [
        {"IpProtocol": "tcp", "FromPort": 22, "ToPort": 22, **ranges},
        {"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": group_id, "Description": "ddpctl: between the nodes"}]},
    ]


def egress_rules(plan: AwsPlan, group_id: str) -> list[dict[str, Any]]:
    """All traffic out to the group itself, where the nodes have EFA: EFA's OS-bypass traffic passes
    only a security group that allows all traffic to and from itself, both ways, in rules that name
    the group (a new group's allow-all egress to 0.0.0.0/0 does not count). None without EFA."""
    if not plan.efa_attached:
        return []
    return [
        {
            "IpProtocol": "-1",
            "UserIdGroupPairs": [{"GroupId": group_id, "Description": "ddpctl: EFA between the nodes"}],
        }
    ]


def network_interfaces(plan: AwsPlan, subnet_id: str, group_id: str) -> list[dict[str, Any]]:
    """The nodes' network interfaces. Without EFA, one. With EFA (``plan.efa_attached``), as AWS
    documents for EFA on several network cards: the primary one an EFA (with ENA) on network card 0,
    device index 0, with the security group and the public address; then one EFA-only interface
    (no IP address of its own: a p5's 32 would otherwise take 32 of the subnet's addresses per node)
    on each further network card, device index 1, in the same group."""
    primary: dict[str, Any] = {
        "DeviceIndex": 0,
        "SubnetId": subnet_id,
        "Groups": [group_id],
        "AssociatePublicIpAddress": not plan.private_ip,
        "DeleteOnTermination": True,
    }
    if not plan.efa_attached:
        return [primary]
    primary.update(NetworkCardIndex=0, InterfaceType="efa")
    if plan.efa_attached > 1:
        del primary["AssociatePublicIpAddress"]  # EC2 refuses it with several interfaces, even false
    more = [
        {
            "NetworkCardIndex": card,
            "DeviceIndex": 1,
            "SubnetId": subnet_id,
            "Groups": [group_id],
            "InterfaceType": "efa-only",
            "DeleteOnTermination": True,
        }
        for card in range(1, plan.efa_attached)
    ]
    return [primary, *more]


def run_instances_request(
    plan: AwsPlan,
    *,
    ami: str,
    root_device: str,
    subnet_id: str,
    group_id: str,
    key_name: str,
    az: str,
    count: int,
    placement_group: str | None,
    client_token: str,
) -> dict[str, Any]:
    """The one RunInstances call that launches every node (MinCount = MaxCount: all or none)."""
    placement: dict[str, Any] = {"AvailabilityZone": az}
    if placement_group:
        placement["GroupName"] = placement_group
    request: dict[str, Any] = {
        "ImageId": ami,
        "InstanceType": plan.instance_type,
        "MinCount": count,
        "MaxCount": count,
        "KeyName": key_name,
        "ClientToken": client_token,
        "Placement": placement,
        "NetworkInterfaces": network_interfaces(plan, subnet_id, group_id),
        "MetadataOptions": {"HttpTokens": "required", "HttpPutResponseHopLimit": 1, "HttpEndpoint": "enabled"},
        "BlockDeviceMappings": [
            {
                "DeviceName": root_device,
                "Ebs": {
                    "VolumeSize": plan.volume_gb,
                    "VolumeType": "gp3",
                    "Encrypted": True,
                    "DeleteOnTermination": True,
                },
            }
        ],
        # and with --spot the one-time spot request RunInstances makes: what ddpctl makes carries its tags
        "TagSpecifications": plan.tag_specs(
            "node", *NODE_RESOURCES, *(("spot-instances-request",) if plan.spot else ())
        ),
        # a node that shuts itself down (autodown, infra/node_programs/autodown.py) is terminated: it
        # bills nothing more, and no AWS credentials need to be on the nodes for it
        "InstanceInitiatedShutdownBehavior": "terminate",
    }
    if plan.spot:
        request["InstanceMarketOptions"] = {
            "MarketType": "spot",
            "SpotOptions": {"SpotInstanceType": "one-time", "InstanceInterruptionBehavior": "terminate"},
        }
    if plan.iam_instance_profile:  # the user's profile: the nodes' role credentials come from IMDS, not from ddpctl
        request["IamInstanceProfile"] = {"Name": plan.iam_instance_profile}
    # No UserData, and no IamInstanceProfile unless given: ddpctl copies no AWS credentials to the nodes.
    return request


def client_token(cluster_id: str, az: str, count: int) -> str:
    """Same launch, same token: a retried RunInstances does not launch twice (EC2 allows 64 chars)."""
    return f"ddpctl-{cluster_id}-{az}-{count}"[:64]
