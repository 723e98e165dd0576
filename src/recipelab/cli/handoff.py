"""The hand-off to the cloud run: ``export`` (the winner at the target's shape), ``verify``
(a long run against its prediction) and ``cost`` (the arithmetic)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from pydantic import ValidationError
from rich.table import Table

from recipelab.cli.common import _cost_option, app, console, errors, fail
from recipelab.cli.watch import read_campaign
from recipelab.errors import one_line
from recipelab.targets import TARGETS

if TYPE_CHECKING:
    from recipelab.transfer.prediction import Prediction


@app.command()
def export(
    campaign: Annotated[str, typer.Argument(help="campaign name or directory")],
    out: Annotated[Path, typer.Option(help="directory for recipe.json and its companions")],
    tokens_per_param: Annotated[float, typer.Option(help="planned tokens per parameter")] = 20.0,
    gpus: Annotated[int, typer.Option(help="GPUs of the cloud run (the batch splits over them)")] = 8,
    gpu_memory_gib: Annotated[float, typer.Option(
        help="memory of each GPU; the micro-batch and grad_accum are chosen to fit it")] = 80.0,
    device: Annotated[str, typer.Option(
        help="cuda (bf16 and torch.compile unless the winner says otherwise) or cpu")] = "cuda",
    sharding: Annotated[str, typer.Option(
        help="auto: shard the weights, gradients and AdamW states over the GPUs (FSDP2) only "
             "where a whole copy per GPU does not fit; none; full")] = "auto",
    eval_bytes: Annotated[int, typer.Option(help="least held-out bytes to evaluate on")] = 8 << 20,
    trial: Annotated[str | None, typer.Option(
        help="export this proxy trial instead of the winner, by the same rules (p0000: the "
             "baseline, as a control arm)")] = None,
    target: Annotated[str | None, typer.Option(
        help=f"export to this target instead of the campaign's: {', '.join(TARGETS)}, or a "
             "config.json / target JSON file")] = None,
    lr_horizon_exponent: Annotated[float | None, typer.Option(
        hidden=True, help="deprecated and ignored: the rate follows Step Law")] = None,
) -> None:
    """Write the winner (or the baseline a campaign without one keeps) at the target's full
    shape (recipe.json for 'recipelab pretrain'), the runner-up, the transfer table, the
    predicted val_bpb curve and a manifest."""
    from recipelab.targets import get_target
    from recipelab.trajectory.calibration import load_calibration
    from recipelab.transfer.export import ExportOptions, write_export

    if lr_horizon_exponent is not None:
        errors.print("warning: --lr-horizon-exponent is deprecated and ignored: the exported "
                     "learning rate and batch follow Step Law anchored at the winner's measured "
                     "rate (transfer.md shows both); the option goes in the next release",
                     highlight=False, soft_wrap=True)
    settings, records = read_campaign(campaign)
    try:
        options = ExportOptions.model_validate({
            "tokens_per_param": tokens_per_param, "gpus": gpus, "gpu_memory_gib": gpu_memory_gib,
            "device": device, "sharding": sharding, "eval_bytes": eval_bytes})
        written = write_export(settings.ladder.ledger(records), settings.name,
                               get_target(target or settings.target or ""), options, out,
                               load_calibration(settings.search.calibrate_from).horizon_fits, trial,
                               corpus=settings.corpus.source)
    except ValidationError as error:
        fail(f"invalid export options: {one_line(error)}")
    except ValueError as error:
        fail(str(error))
    for path in written:
        console.print(f"wrote {path}", markup=False)
    manifest = json.loads((out / "manifest.json").read_text())
    run_on = manifest["run_on"]
    if run_on.get("problem"):
        errors.print(f"Warning: the recipe does not fit {gpus} GPU(s) of {gpu_memory_gib:g} GiB: "
                     f"{run_on['problem']}. recipe.json is written for another trainer.",
                     markup=False, soft_wrap=True)
    elif run_on.get("sharding") == "full":
        console.print(f"sharded (FSDP2): {run_on['why_sharded'] or '--sharding full'}; "
                      f"{run_on['command']}", markup=False, soft_wrap=True)
    for line in manifest["distance_lines"]:
        (errors if line.startswith("Warning:") else console).print(line, markup=False,
                                                                    soft_wrap=True)


def _prediction_of(source: str) -> Prediction:
    """The prediction an export directory holds, else the campaign's for its target's shape."""
    from recipelab.targets import get_target
    from recipelab.transfer.prediction import Prediction, predict

    written = Path(source) / "prediction.json"
    if written.is_file():
        try:
            return Prediction.from_json(json.loads(written.read_text()))
        except (OSError, KeyError, TypeError, ValueError) as error:  # JSONDecodeError too
            fail(f"{written} is not a prediction 'recipelab export' wrote ({error}); export again")
    settings, records = read_campaign(source)
    ledger = settings.ladder.ledger(records)
    chosen = ledger.recommended
    if chosen is None:
        fail(f"campaign {source} has no prediction: {ledger.no_winner_reason}")
    return predict(records, chosen[0], get_target(settings.target or "").shape)


@app.command()
def verify(
    campaign: Annotated[str, typer.Argument(
        help="an export directory (its prediction.json), or a campaign name or directory")],
    metrics: Annotated[Path, typer.Option(help="the run's metrics.csv ('recipelab pretrain')")],
) -> None:
    """Compare a long run's val_bpb at each evaluation with the prediction 'recipelab export'
    wrote (or the campaign's, at its target). Exit status 0 on track, 1 worse than predicted
    or diverging, 3 better than predicted (below the band: the prediction, not the run, is
    off)."""
    from recipelab.transfer.verify import MetricsError, read_evaluations
    from recipelab.transfer.verify import verify as check_run

    try:
        prediction = _prediction_of(campaign)
        found = check_run(prediction, read_evaluations(metrics))
    except (MetricsError, ValueError) as error:
        fail(str(error))
    table = Table(title=f"{metrics} against the prediction of campaign {campaign}")
    for column in ("step", "bytes seen", "val_bpb", "predicted", "band", "status"):
        table.add_column(column)
    for p in found.points:
        table.add_row(f"{p.step:,}", f"{p.bytes_seen:,.0f}", f"{p.measured:.4f}",
                      f"{p.predicted:.4f}", f"{p.low:.4f} – {p.high:.4f}", p.status)
    console.print(table)
    for line in prediction.assumptions():
        console.print(f"- {line}", markup=False, soft_wrap=True)
    console.print(f"verdict: {found.headline()}", markup=False, soft_wrap=True)
    if found.verdict != "on track":
        raise typer.Exit(EXIT_BETTER if found.verdict == "better" else 1)


EXIT_BETTER = 3  # verify: below the band; the run is fine and the prediction is not


@app.command()
def cost(
    campaign: Annotated[str | None, typer.Argument(
        help="a campaign whose measured iterations, wall time and energy replace the defaults")] = None,
    iterations: Annotated[int | None, _cost_option("RECIPELAB_COST_ITERATIONS", "proxy iterations (100)")
                          ] = None,
    seconds_per_iteration: Annotated[float | None, _cost_option(
        "RECIPELAB_COST_SECONDS_PER_ITERATION", "seconds per iteration (88)")] = None,
    h100_usd_per_hour: Annotated[float | None, _cost_option(
        "RECIPELAB_COST_H100_USD_PER_HOUR", "H100 $ per GPU-hour (2.50)")] = None,
    gpus_per_node: Annotated[int | None, _cost_option("RECIPELAB_COST_GPUS_PER_NODE", "GPUs per node (8)")
                             ] = None,
    target_scale: Annotated[float | None, _cost_option(
        "RECIPELAB_COST_TARGET_SCALE", "how many times slower a target-scale iteration is (60)")] = None,
    spark_watts: Annotated[float | None, _cost_option("RECIPELAB_COST_SPARK_WATTS", "Spark power, W (240)")
                           ] = None,
    usd_per_kwh: Annotated[float | None, _cost_option(
        "RECIPELAB_COST_USD_PER_KWH", "electricity $/kWh (0.13)")] = None,
    spark_price: Annotated[float | None, _cost_option(
        "RECIPELAB_COST_SPARK_PRICE_USD", "Spark price $ (5000)")] = None,
    spark_years: Annotated[float | None, _cost_option(
        "RECIPELAB_COST_SPARK_YEARS", "years the Spark is amortised over (1.5)")] = None,
    wrong_pick_rate: Annotated[float | None, _cost_option(
        "RECIPELAB_COST_WRONG_PICK_RATE", "chance a blind booking picks a bad recipe (0.5)")] = None,
    small_campaign_usd: Annotated[float | None, _cost_option(
        "RECIPELAB_COST_SMALL_CAMPAIGN_USD", "$ of the small cloud campaign at stake (3360)")] = None,
    target: Annotated[str | None, typer.Option(
        help="target of the cloud run priced (default: the campaign's, else llama2-7b)")] = None,
    gpu_peak_tflops: Annotated[float | None, _cost_option(
        "RECIPELAB_GPU_PEAK_TFLOPS", "cloud GPU peak TFLOP/s (989, H100 dense BF16)")] = None,
    mfu: Annotated[float | None, _cost_option("RECIPELAB_MFU", "assumed MFU (0.4)")] = None,
    tokens_per_param: Annotated[float | None, typer.Option(
        help="tokens per parameter of the cloud run (20)")] = None,
    campaigns_per_month: Annotated[float, typer.Option(
        help="cloud campaigns a month, for the Spark's payback")] = 1.0,
) -> None:
    """Print the cost arithmetic as JSON: a night of search here against H100 rental, the
    cloud run priced from its FLOPs (the report's figure), and the scenarios."""
    from recipelab.report import CloudRates
    from recipelab.report.cost import (
        cloud_run_cost,
        compute_cost,
        measured_inputs,
        resolve_inputs,
        scenarios,
        target_run_cost,
    )
    from recipelab.report.recommend import recommend
    from recipelab.targets import get_target

    given = {k: v for k, v in {
        "iterations": iterations, "seconds_per_iteration": seconds_per_iteration,
        "h100_usd_per_gpu_hour": h100_usd_per_hour, "gpus_per_node": gpus_per_node,
        "target_scale_factor": target_scale, "spark_power_w": spark_watts,
        "electricity_usd_per_kwh": usd_per_kwh, "spark_price_usd": spark_price,
        "spark_amortisation_years": spark_years, "wrong_pick_rate": wrong_pick_rate,
        "small_campaign_usd": small_campaign_usd}.items() if v is not None}
    measured = None
    ledger = None
    if campaign is not None:
        settings, records = read_campaign(campaign)
        ledger = settings.ladder.ledger(records)
        target = target or settings.target
        measured = measured_inputs(records)
        if not measured:
            fail(f"campaign {campaign!r} has no trained proxy trial to measure yet; "
                 "run it first, or drop the argument to use the published assumptions")
    rates_given = {k: v for k, v in {
        "gpu_peak_flops": gpu_peak_tflops and gpu_peak_tflops * 1e12, "mfu": mfu,
        "usd_per_gpu_hour": given.get("h100_usd_per_gpu_hour"),
        "gpus": given.get("gpus_per_node"), "tokens_per_param": tokens_per_param}.items()
        if v is not None}
    try:
        inputs, sources = resolve_inputs(given, measured)
        rates = CloudRates.model_validate(rates_given)
        chosen = get_target(target or "llama2-7b")
    except ValidationError as error:
        fail(f"invalid cost inputs:\n{error}")
    except ValueError as error:
        fail(str(error))
    found = recommend(ledger, chosen, rates) if ledger is not None else None
    if found is not None:  # exactly the report's recommendation
        run = cloud_run_cost(found.recipe.flops_per_token(), found.tokens, rates)
        what = f"the report's recommendation: {found.winner.trial_id} on {chosen.name}"
    else:
        run = target_run_cost(chosen, rates)
        what = f"{chosen.name} at {rates.tokens_per_param:g} tokens per parameter"
    others = {name: target_run_cost(get_target(name), rates) for name in ("llama2-7b", "llama3-70b")}
    published = compute_cost(inputs, sources).published()
    published["cloud_run"] = run.published(rates, what)
    published["scenarios"] = scenarios(inputs, rates, {"medium (llama2-7b)": others["llama2-7b"],
                                                       "70B (llama3-70b)": others["llama3-70b"]},
                                       campaigns_per_month)
    typer.echo(json.dumps(published, indent=2))
