"""What tests/unit/test_bad_input.py and tests/integration/test_bad_input.py share."""

from __future__ import annotations

from ddpctl.infra.model.spec import MAX_NPROC
from ddpctl.infra.providers.local import LOCAL_RANKS_PER_CPU, local_cpus

LONG = "a" * 300  # longer than a file name may be (255)
LOCAL_LIMIT = LOCAL_RANKS_PER_CPU * local_cpus()
OVER_LOCAL = str(LOCAL_LIMIT + 1)
OVER_LOCAL_SAYS = "ranks on this machine" if LOCAL_LIMIT < MAX_NPROC else "is too many"


def inventory(line: str) -> dict[str, str]:
    return {"hosts.ini": f"[ddp_nodes]\n{line}\n"}


def toml(text: str | bytes) -> dict[str, str | bytes]:
    return {"ddpctl.toml": text}


ONPREM = ["up", "--provider", "onprem", "-i", "hosts.ini"]
RUN = ["run", "mnist", "--dry-run"]

# (id, args, files written first, what the one line says)
CASES = [
    # the inputs
    (
        "ansible_port=abc",
        ONPREM,
        inventory("n1 ansible_host=127.0.0.1 ansible_port=abc"),
        "ansible_port of host 'n1' in hosts.ini is 'abc': give a port number from 1 to 65535",
    ),
    (
        "ansible_port=99999",
        ONPREM,
        inventory("n1 ansible_host=127.0.0.1 ansible_port=99999"),
        "ansible_port of host 'n1' in hosts.ini is 99999",
    ),
    (
        "toml env string",
        RUN,
        toml('[cluster]\nenv = "X=1"\n'),
        "[cluster] env in ddpctl.toml is a string ('X=1'): give a table",
    ),
    ("toml cluster = 5", RUN, toml("cluster = 5\n"), "[cluster] in ddpctl.toml is an integer, not a table"),
    ("toml run env array", RUN, toml('[run]\nenv = ["A=1"]\n'), "[run] env in ddpctl.toml is an array"),
    ("toml not utf-8", RUN, toml(b'[cluster]\nname = "\xff"\n'), "config file ddpctl.toml is not UTF-8 text"),
    (
        "toml nodes = 2.7",
        ["up", "--dry-run"],
        toml("[cluster]\nnodes = 2.7\n"),
        "[cluster] nodes in ddpctl.toml is a decimal number (2.7): give an integer",
    ),
    (
        "toml nodes = true",
        ["up", "--dry-run"],
        toml("[cluster]\nnodes = true\n"),
        "[cluster] nodes in ddpctl.toml is true/false",
    ),
    ("status --name path", ["status", "--name", "../runs/r1/options"], {}, "invalid cluster name '../runs/r1/options'"),
    ("down --name path", ["down", "--name", "../runs/r1/options"], {}, "invalid cluster name '../runs/r1/options'"),
    ("up --name ''", ["up", "--name", ""], {}, "invalid cluster name ''"),
    (
        "run --python /bin/true",
        ["run", "mnist", "--python", "/bin/true"],
        {},
        "--python /bin/true is not a Python that imports torch",
    ),
    (
        "up --python /bin/true",
        ["up", "--python", "/bin/true"],
        {},
        "--python /bin/true is not a Python that imports torch",
    ),
    ("run -e 1X=y", [*RUN, "-e", "1X=y"], {}, "invalid environment variable name '1X' in --env"),
    ("run -e 'A B=x'", [*RUN, "-e", "A B=x"], {}, "invalid environment variable name 'A B' in --env"),
    ("run -e A-B=x", [*RUN, "-e", "A-B=x"], {}, "invalid environment variable name 'A-B' in --env"),
    ("up -e A-B=x", ["up", "--dry-run", "-e", "A-B=x"], {}, "invalid environment variable name 'A-B' in --env"),
    (
        "run --nodes 1e20",
        ["run", "mnist", "--nodes", "99999999999999999999"],
        {},
        "--nodes 99999999999999999999 is too many: at most 1024",
    ),
    ("up --nodes 1e20", ["up", "--nodes", "99999999999999999999"], {}, "--nodes 99999999999999999999 is too many"),
    ("up --nodes 100000", ["up", "--nodes", "100000"], {}, "--nodes 100000 is too many: at most 1024"),
    ("check --size-mb nan", ["check", "--size-mb", "nan"], {}, "nan is not a number in the range 0.001<=x<=8192"),
    ("check --size-mb inf", ["check", "--size-mb", "inf"], {}, "inf is not in the range 0.001<=x<=8192"),
    (
        "snapshot dir under a file",
        [*RUN, "--snapshot-dir", "/etc/passwd/snapshots"],
        {},
        "--snapshot-dir /etc/passwd/snapshots: /etc/passwd is not a directory",
    ),
    ("down --region xx-fake-9", ["down", "--name", "x", "--region", "xx-fake-9"], {}, "unknown AWS region 'xx-fake-9'"),
    (
        "down --region pcluster",
        ["down", "--name", "x", "--region", "xx-fake-9", "--provider", "pcluster"],
        {},
        "unknown AWS region 'xx-fake-9'",
    ),
    # names
    ("name with a slash", ["up", "--name", "a/b", "--dry-run"], {}, "invalid cluster name 'a/b'"),
    ("name with a dot", ["run", "mnist", "--name", "lab.json"], {}, "invalid cluster name 'lab.json'"),
    ("name with a space", ["check", "--name", "my lab"], {}, "invalid cluster name 'my lab'"),
    ("name with a newline", ["up", "--name", "lab\n"], {}, "invalid cluster name 'lab\\n'"),
    ("name in capitals", ["configure", "--name", "Lab"], {}, "invalid cluster name 'Lab'"),
    ("name of 40 characters", ["up", "--name", "a" * 40], {}, "invalid cluster name"),
    ("run id with a slash", [*RUN, "--run-id", "a/b"], {}, "invalid --run-id 'a/b'"),
    ("resume a path", ["run", "--resume", "../clusters/x"], {}, "invalid --resume '../clusters/x'"),
    ("resume an unknown run", ["run", "--resume", "r0000000000"], {}, "no run 'r0000000000' to resume"),
    # counts and their bounds
    ("up --port 0", ["up", "--port", "0"], {}, "0 is not in the range 1024<=x<=65535"),
    ("up --port 65536", ["up", "--port", "65536"], {}, "65536 is not in the range 1024<=x<=65535"),
    ("run --port 80", [*RUN, "--port", "80"], {}, "80 is not in the range 1024<=x<=65535"),
    ("check --port abc", ["check", "--port", "abc"], {}, "'abc' is not a valid integer"),
    ("up --nproc-per-node 0", ["up", "--nproc-per-node", "0"], {}, "0 is not in the range x>=1"),
    ("run --nproc-per-node 1,0", [*RUN, "--nodes", "2", "--nproc-per-node", "1,0"], {}, "1,0 is not in the range x>=1"),
    (
        "run --nproc-per-node 2000",
        [*RUN, "--nproc-per-node", "2000"],
        {},
        "--nproc-per-node 2000 is too many: at most 1024",
    ),
    ("local ranks past the machine", ["up", "--nproc-per-node", OVER_LOCAL], {}, OVER_LOCAL_SAYS),
    ("local nodes past the machine", [*RUN, "--nodes", OVER_LOCAL], {}, OVER_LOCAL_SAYS),
    ("elastic max 1e11", [*RUN, "--nodes", "1:99999999999"], {}, "--nodes 99999999999 is too many"),
    ("check --size-mb -1", ["check", "--size-mb", "-1"], {}, "-1.0 is not in the range 0.001<=x<=8192"),
    ("check --size-mb 0", ["check", "--size-mb", "0"], {}, "0.0 is not in the range 0.001<=x<=8192"),
    ("check --size-mb 1e9", ["check", "--size-mb", "1e9"], {}, "is not in the range 0.001<=x<=8192"),
    (
        "up --volume-gb 7",
        ["up", "--provider", "aws", "--volume-gb", "7", "--dry-run"],
        {},
        "7 is not in the range 8<=x<=16384",
    ),
    # -e forms
    ("-e =x", [*RUN, "-e", "=x"], {}, "--env '=x' is not KEY=VALUE"),
    ("-e ''", ["up", "-e", ""], {}, "--env '' is not KEY=VALUE"),
    ("-e A.B=x", ["up", "-e", "A.B=x"], {}, "invalid environment variable name 'A.B' in --env"),
    # paths
    (
        "snapshot dir relative",
        [*RUN, "--snapshot-dir", "rel/dir"],
        {},
        "--snapshot-dir rel/dir: give an absolute directory",
    ),
    ("snapshot dir s3:// alone", [*RUN, "--snapshot-dir", "s3://"], {}, "--snapshot-dir s3://: has no bucket"),
    ("snapshot dir name too long", [*RUN, "--snapshot-dir", f"/tmp/{LONG}"], {}, "File name too long"),
    ("script missing", ["run", "./missing.py"], {}, "script './missing.py' does not exist"),
    ("script a directory", ["run", "./jobs/"], {"jobs/train.py": "print(1)\n"}, "script './jobs/' is a directory"),
    ("script name too long", ["run", f"{LONG}.py"], {}, "File name too long"),
    ("unknown job", ["run", "MNIST"], {}, "unknown job 'MNIST'"),
    ("--python missing", [*RUN, "--python", "/nonexistent/python3"], {}, "--python /nonexistent/python3: no such file"),
    ("--python a directory", [*RUN, "--python", "/tmp"], {}, "--python /tmp cannot be run"),
    ("--python not a Python", [*RUN, "--python", "/bin/sh"], {}, "--python /bin/sh is not a Python that imports torch"),
    (
        "--python without torch",
        ["up", "--python", "./python3"],
        {"python3": "#!/bin/sh\necho \"ModuleNotFoundError: No module named 'torch'\" >&2\nexit 1\n"},
        "torch is not installed for --python ./python3",
    ),
    ("--config a directory", ["--config", ".", "up"], {}, "cannot read config file .: Is a directory"),
    (
        "--config missing",
        ["--config", "nope.toml", "up"],
        {},
        "cannot read config file nope.toml: No such file or directory",
    ),
    (
        "toml spot = 'yes'",
        ["up", "--dry-run"],
        toml('[cluster]\nspot = "yes"\n'),
        "[cluster] spot in ddpctl.toml is a string ('yes'): give true/false",
    ),
    ("toml env value array", RUN, toml("[cluster.env]\nA = [1]\n"), "[cluster.env] A in ddpctl.toml is an array"),
    (
        "toml port as text",
        ["up", "--dry-run"],
        toml('[cluster]\nport = "29500"\n'),
        "[cluster] port in ddpctl.toml is a string",
    ),
    (
        "toml nproc_per_node = 0",
        ["up", "--dry-run"],
        toml("[cluster]\nnproc_per_node = 0\n"),
        "0 is not in the range x>=1",
    ),
    ("toml run max_restarts = -1", RUN, toml("[run]\nmax_restarts = -1\n"), "-1 is not in the range x>=0"),
    ("toml name = ''", ["status"], toml('[cluster]\nname = ""\n'), "invalid cluster name ''"),
    (
        "inventory missing",
        ["up", "--provider", "onprem", "-i", "missing.ini"],
        {},
        "inventory 'missing.ini' does not exist",
    ),
    ("inventory empty", ONPREM, {"hosts.ini": ""}, "hosts.ini lists no hosts"),
    ("inventory a directory", ["up", "--provider", "onprem", "-i", "."], {}, "'.' is a directory"),
    ("inventory name too long", ["up", "--provider", "onprem", "-i", f"{LONG}.ini"], {}, "File name too long"),
    (
        "ansible_port=0",
        ONPREM,
        inventory("n1 ansible_host=127.0.0.1 ansible_port=0"),
        "ansible_port of host 'n1' in hosts.ini is 0",
    ),
    (
        "inventory for local",
        ["up", "-i", "hosts.ini"],
        inventory("n1"),
        "--inventory is for --provider onprem, not local",
    ),
    (
        "up --region unknown",
        ["up", "--provider", "aws", "--region", "xx-fake-9", "--dry-run"],
        {},
        "unknown AWS region 'xx-fake-9'",
    ),
    (
        "up --ssh-cidr",
        ["up", "--provider", "aws", "--ssh-cidr", "anywhere", "--dry-run"],
        {},
        "invalid --ssh-cidr 'anywhere'",
    ),
]
