"""bench.cpu: CPU per turn of every process of a run, by role (issue 26's fair comparison).

Real child processes; the only figures asserted are CPU seconds a child spent
and where they were filed, never a duration.
"""

from __future__ import annotations

import subprocess
import sys

import psutil

from fore.bench.cpu import CpuMeter, process_role
from fore.testing import wait_until

BURN = "import sys\nn = 0\nfor i in range(int(sys.argv[1])):\n    n += i\nprint(n)\n"


def test_a_childs_cpu_is_filed_under_its_role_and_divided_by_the_turns() -> None:
    meter = CpuMeter()
    meter.start()
    # argv names the role (the rule reads the command line, as for a shard); the child
    # stays alive until stop(): the meter reads the processes alive then
    child = subprocess.Popen(
        [sys.executable, "-c", BURN + "import time\ntime.sleep(60)\n", "3000000", "ShardServer"],
        stdout=subprocess.PIPE,
    )
    try:
        assert child.stdout is not None
        child.stdout.readline()  # its work is done
        assert process_role(psutil.Process(child.pid)) == "shards"
        meter.stop()
    finally:
        child.kill()
        child.wait(30)
    cpu = meter.per_turn(turns=2)
    assert cpu["shards"] > 0
    assert cpu["fore"] == round(cpu["bench"] + cpu["shards"] + cpu["ray"], 2)
    assert cpu["total"] == round(cpu["fore"] + cpu["mock"], 2)
    assert meter.per_turn(turns=0) == {}


def test_roles_by_command_line() -> None:
    assert process_role(psutil.Process()) == "bench"
    with subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", "fore.actors.llm.mock_server"]
    ) as mock:
        try:
            process = psutil.Process(mock.pid)
            # right after the fork the child still has this process's command line
            wait_until(lambda: "fore.actors.llm.mock_server" in process.cmdline(), timeout=30)
            assert process_role(process) == "mock"
        finally:
            mock.kill()
