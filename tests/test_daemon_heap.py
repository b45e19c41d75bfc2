"""The daemon's C heap: a long-lived process hands freed blocks back to the kernel instead of
keeping them (glibc's threshold otherwise rises to the largest block ever freed)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt, read from /proc")

PROBE = textwrap.dedent("""
    import sys
    from memstore.surfaces.loadgc import tune_heap

    def rss():
        for line in open("/proc/self/status"):
            if line.startswith("VmRSS"):
                return int(line.split()[1])
    if sys.argv[1] == "tuned":
        tune_heap()
    block = bytearray(16 << 20)  # a load's temporary: freed, it raises glibc's own threshold
    del block
    before = rss()
    block = bytearray(6 << 20)  # a read's temporary of the same order (100k rows' positions)
    del block
    print(rss() - before)
""")


def _kept_kib(mode: str) -> int:
    out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True)
    return int(out.stdout)


def test_a_freed_block_goes_back_to_the_kernel_under_the_daemons_heap_settings() -> None:
    assert _kept_kib("plain") > 4096  # the probe sees what it looks for: glibc's default keeps it
    assert _kept_kib("tuned") < 1024
