"""The EC2 twin's instance metadata service (IMDSv2, as ddpctl's instances require it): a node asks it
for its instance profile role's credentials, as botocore does on an EC2 instance.

It listens on the bridge's host address (not 169.254.169.254: that address may be this machine's
own metadata service); each twin node's ``~/.aws/config`` names it (``ec2_metadata_service_endpoint``,
as the AWS CLI and botocore read it), and the twin's EC2 endpoint on the bridge (``endpoint_url``),
so nothing in ddpctl or on a node changes. The instance is known by the address the request comes
from; its credentials are the STS credentials of its profile's role (moto's AssumeRole), as EC2's are
short-lived credentials of the role. An instance with no profile gets a 404, as on EC2. Only what
botocore's credential chain asks is answered: the token (PUT /latest/api/token), the role's name,
its credentials, and the instance id.
"""

from __future__ import annotations

import json
import secrets
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TOKEN_PATH = "/latest/api/token"
ROLES_PATH = "/latest/meta-data/iam/security-credentials/"
INSTANCE_ID_PATH = "/latest/meta-data/instance-id"


class Imds:
    """What the service answers: ``instance_of`` (a source address -> the twin's instance id, "" for
    none), ``moto_url`` (where the profile, its role and STS credentials come from)."""

    def __init__(self, instance_of: Callable[[str], str], moto_url: str) -> None:
        self.instance_of = instance_of
        self.moto_url = moto_url
        self.tokens: dict[str, str] = {}  # token -> the address it was given to
        self.lock = threading.Lock()
        self._clients: dict[str, object] = {}

    def answer(self, method: str, path: str, headers: dict[str, str], source: str) -> tuple[int, str]:
        instance = self.instance_of(source)
        if not instance:
            return 403, "not a node of the twin"
        lower = {k.lower(): v for k, v in headers.items()}
        if method == "PUT" and path == TOKEN_PATH:
            if "x-aws-ec2-metadata-token-ttl-seconds" not in lower:
                return 400, "missing x-aws-ec2-metadata-token-ttl-seconds"
            token = secrets.token_urlsafe(32)
            with self.lock:
                self.tokens[token] = source
            return 200, token
        with self.lock:
            owner = self.tokens.get(lower.get("x-aws-ec2-metadata-token", ""))
        if owner != source:  # IMDSv2 only (HttpTokens=required): no token, no answer
            return 401, "unauthorized"
        if method != "GET":
            return 405, "method not allowed"
        if path == INSTANCE_ID_PATH:
            return 200, instance
        if not path.startswith(ROLES_PATH):
            return 404, "not found"
        role = self.role_of(instance)
        if role is None:
            return 404, "not found"
        name = path[len(ROLES_PATH) :]
        if not name:
            return 200, role[0]
        if name != role[0]:
            return 404, "not found"
        return 200, json.dumps(self.credentials(instance, role[1]))

    def _client(self, service: str):
        """One client per service, made once (botocore asks with a 1 s timeout by default)."""
        import boto3

        with self.lock:
            if service not in self._clients:
                self._clients[service] = boto3.session.Session(
                    region_name="us-east-1", aws_access_key_id="testing", aws_secret_access_key="testing"
                ).client(service, endpoint_url=self.moto_url)
            return self._clients[service]

    def role_of(self, instance: str) -> tuple[str, str] | None:
        """The role (name, ARN) of the instance profile associated with ``instance``; None: none."""
        found = self._client("ec2").describe_iam_instance_profile_associations(
            Filters=[{"Name": "instance-id", "Values": [instance]}]
        )["IamInstanceProfileAssociations"]
        current = [a for a in found if a.get("State") in ("associating", "associated")]
        if not current:
            return None
        profile = current[0]["IamInstanceProfile"]["Arn"].rsplit("/", 1)[1]
        roles = self._client("iam").get_instance_profile(InstanceProfileName=profile)["InstanceProfile"]["Roles"]
        return (roles[0]["RoleName"], roles[0]["Arn"]) if roles else None

    def credentials(self, instance: str, role_arn: str) -> dict[str, str]:
        """The role's short-lived credentials, as the metadata service gives them."""
        creds = self._client("sts").assume_role(RoleArn=role_arn, RoleSessionName=instance)["Credentials"]
        return {
            "Code": "Success",
            "LastUpdated": creds["Expiration"].strftime("%Y-%m-%dT%H:%M:%SZ"),
            "Type": "AWS-HMAC",
            "AccessKeyId": creds["AccessKeyId"],
            "SecretAccessKey": creds["SecretAccessKey"],
            "Token": creds["SessionToken"],
            "Expiration": creds["Expiration"].strftime("%Y-%m-%dT%H:%M:%SZ"),
        }


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    imds: Imds

    def _any(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        try:
            status, text = self.imds.answer(self.command, self.path, dict(self.headers.items()), self.client_address[0])
        except Exception as exc:  # moto unreachable: what EC2's service says when it cannot answer
            status, text = 500, f"{type(exc).__name__}: {exc}"
        out = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    do_GET = do_PUT = do_POST = _any

    def log_message(self, format: str, *args: object) -> None:
        pass


def server(imds: Imds, address: str) -> ThreadingHTTPServer:
    """The service, listening on ``address`` (a port of its own); serve it with ``serve_forever``."""
    handler = type("Handler", (_Handler,), {"imds": imds})
    made = ThreadingHTTPServer((address, 0), handler)
    made.daemon_threads = True
    return made
