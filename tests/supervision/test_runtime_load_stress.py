"""Many short runs of ``fore bench``'s workload: no leak after any close (issue 30).

Each run is the load benchmark itself (:func:`bench.load.run_load`: the mock
LLM server over real HTTP, simulated users typing, pressing Tab, editing the
files a speculation touched) made small: ten sessions, a few seconds each,
the load governor off so every suggestion is speculated. Seeds alternate two
shapes: rounds that finish (Tab applies, conflicts, aborts by typing) and
rounds cut by the wall-clock bound with no drain, so sessions are closed
under speculations that still run, accepts that are still applying and
overlays whose removal is under way -- the cases that left overlay
directories behind ``close()``.

After every run each leak counter must be zero: a session's overlays still on
disk when its ``Session.close()`` returned, overlay directories on disk when
``Runtime.close()`` returned, threads, file descriptors, live actors, an
unclean close. Nothing here is timed; ``duration`` only bounds each run
(about 35 s for the whole test on an idle 2-core machine).
"""

from __future__ import annotations

import pytest

from fore.bench.load import run_load
from fore.bench.load_options import LoadOptions

SEEDS = range(1, 9)


def options(seed: int) -> LoadOptions:
    cut = seed % 2 == 0
    return LoadOptions(
        sessions=10,
        turns=50 if cut else 3,
        duration=4.0 if cut else 7.0,
        drain_s=0.0 if cut else 1.0,
        think_ms=600.0,
        accept_p=0.8,
        edit_p=0.2,
        ttft_ms=5.0,
        tokens_per_s=3000.0,
        governor=False,
        seed=seed,
        progress=False,
    )


@pytest.mark.slow
def test_no_leak_after_any_close_over_many_short_load_runs() -> None:
    speculated = 0
    for seed in SEEDS:
        report, _samples = run_load(options(seed))
        assert report.leaks == dict.fromkeys(report.leaks, 0), (seed, report.leaks, report.errors)
        assert set(report.leaks) >= {"session_overlays", "overlay_dirs", "unclean_shutdown"}
        speculated += report.speculations_started
    assert speculated > 0  # the runs did speculate (and so made overlays to clean up)
