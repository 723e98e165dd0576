"""The throughput envelope: sweep batch x sequence x precision for one proxy on this machine.

Before a night of search a user wants to know where throughput peaks, where it plateaus and
what each token of a step costs in memory. The sweep (:mod:`~recipelab.envelope.measure`)
trains each point as a short trial; the analysis (:mod:`~recipelab.envelope.findings`) gives
each precision's gain, its plateau and its memory line peak memory = a x tokens + b, which
is saved so the memory guardrail can predict an OOM without trying it; the output
(:mod:`~recipelab.envelope.output`) shows the table and writes CSV, JSON and the plot
(:mod:`~recipelab.envelope.plot`, the only module that imports matplotlib, loaded when the
plot is drawn). The points and the report are in :mod:`~recipelab.envelope.points`, the
command line's values in :mod:`~recipelab.envelope.values`.

``recipelab gpu-check`` (:mod:`~recipelab.envelope.gpu_check`) checks what a GPU box can do
before a night or a cloud run: bf16 and fp8 proxies, and a two-process pretrain killed and
resumed.
"""

from recipelab.envelope.findings import PLATEAU_GROWTH, fit_memory, plateau_tokens, with_gains
from recipelab.envelope.measure import (
    DEFAULT_BATCH_SIZES,
    POINTS_DIR,
    TELEMETRY_CSV,
    TrialDevice,
    default_seq_lens,
    hardware_reasons,
    point_logger,
    run_points,
    sweep,
)
from recipelab.envelope.output import (
    PLOT_PNG,
    TABLE_CSV,
    TABLE_JSON,
    TELEMETRY_JSON,
    default_out_dir,
    describe_fits,
    render_table,
    table_rows,
    write_outputs,
)
from recipelab.envelope.points import (
    PRECISIONS,
    EnvelopePoint,
    EnvelopeReport,
    PointStatus,
    PrecisionFit,
    SweepAxes,
    point_id,
)
from recipelab.envelope.values import parse_bytes, parse_ints, parse_precisions
from recipelab.guardrails.hardware import supported_precisions

__all__ = [
    "DEFAULT_BATCH_SIZES",
    "PLATEAU_GROWTH",
    "PLOT_PNG",
    "POINTS_DIR",
    "PRECISIONS",
    "TABLE_CSV",
    "TABLE_JSON",
    "TELEMETRY_CSV",
    "TELEMETRY_JSON",
    "EnvelopePoint",
    "EnvelopeReport",
    "PointStatus",
    "PrecisionFit",
    "SweepAxes",
    "TrialDevice",
    "default_out_dir",
    "default_seq_lens",
    "describe_fits",
    "fit_memory",
    "hardware_reasons",
    "parse_bytes",
    "parse_ints",
    "parse_precisions",
    "plateau_tokens",
    "point_id",
    "point_logger",
    "render_table",
    "run_points",
    "supported_precisions",
    "sweep",
    "table_rows",
    "with_gains",
    "write_outputs",
]
