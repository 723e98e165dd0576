"""The envelope's plot (:mod:`recipelab.envelope.plot`): drawn on a Figure of its own, never
through pyplot, and only when a sweep writes its files."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from recipelab.envelope import PLOT_PNG

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

WRITE_A_REPORT = """
import sys
from pathlib import Path
import recipelab.envelope as env
swept = "matplotlib" in sys.modules
report = env.EnvelopeReport(
    device={"kind": "cpu", "name": "cpu"}, recipe={}, params=1, steps=4, warmup=1,
    memory_limit_bytes=None, plateaus={"fp32": None}, fits=[], points=[env.EnvelopePoint(
        precision="fp32", batch_size=4, seq_len=64, tokens_per_step=256, status="complete",
        tokens_per_s=1000.0, step_ms=10.0, peak_memory_bytes=2**28)])
env.write_outputs(report, Path(sys.argv[1]))
print(swept, "matplotlib.pyplot" in sys.modules)
"""


def test_the_sweep_never_imports_matplotlib_and_the_plot_never_touches_pyplot(
        tmp_path: Path) -> None:
    """A plot drawn with pyplot joins its global figure registry and the user's backend; the
    envelope draws on a Figure of its own, and only once it writes."""
    done = subprocess.run([sys.executable, "-c", WRITE_A_REPORT, str(tmp_path)], text=True,
                          capture_output=True, timeout=120, check=False,
                          env={**os.environ, "MPLBACKEND": "module://no.such.backend"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "False"]
    assert (tmp_path / PLOT_PNG).read_bytes().startswith(PNG_SIGNATURE)
