"""``weirmq storage``: check and repair the partition logs of a stopped broker.

Theory of operation: both commands work on the files alone (storage/verify.py and
storage/repair.py say how), never through a broker. They take the data directory's lock
for their whole run, as a broker does (storage/lock.py): a broker cannot start on the
directory while they read or change it, and while a broker holds it they refuse to run,
naming its pid, rather than read files that are being written or repair under its feet.

The data directory is ``--data-dir``, else the one ``weirmq serve`` would use with the
same ``--config`` file and ``WEIRMQ_*`` environment (default ./weirmq-data).

As in the client commands, the findings are gathered into plain data first (the
``--json`` shape), then printed as JSON or as lines: results on stdout, notes and the
summary on stderr, a failure as one line with no traceback.

``repair`` verifies first, plans from the findings, applies the plan (``--dry-run``
stops after printing it), then verifies the repaired partitions again: what it reports
as done is what the next broker start will see.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from weirmq.cli.clients import EXIT_BROKER_ERROR, EXIT_USAGE, CommandError, json_option
from weirmq.cli.output import note, plural, print_json, print_line

if TYPE_CHECKING:
    from weirmq.storage.lock import DataDirLock
    from weirmq.storage.repair import PartitionPlan, Step
    from weirmq.storage.verify import DataDirReport, Finding, PartitionReport

EXIT_DAMAGED = EXIT_BROKER_ERROR  # 1: damage found (verify), or left unrepaired (repair)
EXIT_IN_USE = 3  # a running broker holds the data directory

EXIT_CODES_EPILOG = (
    "\b\nExit codes:\n"
    "  0  every partition is sound (verify); repaired, or nothing to repair (repair)\n"
    "  1  damage found (verify); damage left that repair cannot fix (repair)\n"
    "  2  usage error (no such data directory, a bad option or setting)\n"
    "  3  a running broker holds the data directory: stop it first"
)


class DataDirInUse(CommandError):
    exit_code = EXIT_IN_USE


class UsageProblem(CommandError):
    exit_code = EXIT_USAGE


def _data_dir_options(command: Any) -> Any:
    command = click.option(
        "--partition",
        "partitions",
        multiple=True,
        metavar="TOPIC-N",
        help="Only this partition (its directory name, e.g. orders-0); may be repeated.",
    )(command)
    command = click.option(
        "--config",
        "config_file",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        help="The broker's TOML settings file, to find its data_dir (also WEIRMQ_CONFIG).",
    )(command)
    return click.option(
        "--data-dir",
        type=click.Path(file_okay=False, path_type=Path),
        default=None,
        help="The stopped broker's data directory [default: the broker's data_dir setting].",
    )(command)


@click.group()
def storage() -> None:
    """Check and repair a stopped broker's partition logs (offline)."""


# -- verify ------------------------------------------------------------------------------------


@storage.command(epilog=EXIT_CODES_EPILOG)
@_data_dir_options
@json_option
def verify(
    data_dir: Path | None, config_file: Path | None, partitions: tuple[str, ...], as_json: bool
) -> None:
    """Check every segment of every partition: batch CRCs, contiguous offsets, indexes.

    Prints OK or the damaged ranges (file, position, offsets) per partition."""
    from weirmq.storage.verify import verify_data_dir

    directory = _resolve_data_dir(data_dir, config_file)
    with _locked(directory):
        report = verify_data_dir(directory, _only(partitions))
    _check_partitions_found(report, partitions)
    if as_json:
        print_json(report.to_json())
    else:
        _print_report(report)
    damaged = [p for p in report.partitions if not p.ok]
    if damaged:
        note(
            f"{plural(len(damaged), 'partition')} of {len(report.partitions)} damaged; "
            f"`weirmq storage repair --data-dir {directory} --dry-run` shows what repair "
            "would give up"
        )
        raise SystemExit(EXIT_DAMAGED)
    note(f"verified {plural(len(report.partitions), 'partition')} in {directory}: all sound")


def _print_report(report: DataDirReport) -> None:
    for partition in report.partitions:
        status = "OK" if partition.ok else "DAMAGED"
        print_line(f"{partition.name}  {status}  {_summary(partition)}")
        for finding in partition.findings:
            print_line(f"    {_describe(report.data_dir, finding)}")


def _summary(partition: PartitionReport) -> str:
    if not partition.segments:
        return "empty"
    last = partition.end_offset - 1
    span = "no records" if last < partition.first_offset else f"{partition.first_offset}..{last}"
    return (
        f"offsets {span}, {plural(len(partition.segments), 'segment')}, "
        f"{partition.size_bytes:,} bytes"
    )


def _describe(data_dir: Path, finding: Finding) -> str:
    where = f"{_relative(data_dir, finding.path)} from position {finding.position:,}"
    size = f", {finding.bytes:,} bytes" if finding.bytes else ""
    return f"{finding.kind}: offsets {finding.offsets} ({where}{size}): {finding.problem}"


# -- repair ------------------------------------------------------------------------------------


@storage.command(epilog=EXIT_CODES_EPILOG)
@_data_dir_options
@click.option(
    "--quarantine",
    "quarantine_segments",
    is_flag=True,
    help="Move each damaged segment whole into quarantine/ instead of truncating it at its "
    "first bad batch (its intact records are given up too).",
)
@click.option("--dry-run", is_flag=True, help="Print what would be done; change nothing.")
@json_option
def repair(
    data_dir: Path | None,
    config_file: Path | None,
    partitions: tuple[str, ...],
    quarantine_segments: bool,
    dry_run: bool,
    as_json: bool,
) -> None:
    """Make damaged partitions servable again, giving up their damaged ranges.

    Truncates a damaged segment at its first bad batch (or, with --quarantine, moves it
    aside), records the offsets given up, and prints what was lost. Nothing damaged is
    deleted: whatever leaves a log goes to quarantine/ in the data directory. A compaction
    swap the broker was stopped in is finished first, as the broker's start would (the
    segments it replaces are deleted; the cleaned ones hold their records)."""
    from weirmq.storage.repair import apply_plan, plan_repair
    from weirmq.storage.verify import verify_data_dir

    directory = _resolve_data_dir(data_dir, config_file)
    left: list[PartitionReport] = []
    with _locked(directory):
        report = verify_data_dir(directory, _only(partitions))
        _check_partitions_found(report, partitions)
        plans = plan_repair(report, quarantine_segments=quarantine_segments)
        if not dry_run and plans:
            try:
                apply_plan(plans, directory)
            except OSError as exc:
                raise CommandError(f"repair of {directory} stopped: {exc}") from exc
            after = verify_data_dir(directory, {plan.name for plan in plans})
            left = [p for p in after.partitions if not p.ok]
    if as_json:
        print_json(
            {
                "data_dir": str(directory),
                "dry_run": dry_run,
                "partitions": [plan.to_json() for plan in plans],
                "still_damaged": [p.to_json() for p in left],
            }
        )
    else:
        for plan in plans:
            _print_plan(directory, plan, dry_run)
    _repair_summary(directory, plans, left, dry_run)


def _print_plan(data_dir: Path, plan: PartitionPlan, dry_run: bool) -> None:
    for step in plan.steps:
        print_line(f"{plan.name}: {_step_sentence(data_dir, step, dry_run)}")
    for finding in plan.unrepaired:
        print_line(f"{plan.name}: not repaired: {_describe(data_dir, finding)}")
    lost = ", ".join(f"{a}..{b - 1}" for a, b in plan.lost) or "no offsets"
    verb = "would lose" if dry_run else "lost"
    count = sum(b - a for a, b in plan.lost)
    print_line(
        f"{plan.name}: {verb} {lost} ({plural(count, 'offset')}, "
        f"{plan.lost_bytes:,} bytes moved to quarantine)"
    )


def _step_sentence(data_dir: Path, step: Step, dry_run: bool) -> str:
    path = _relative(data_dir, step.path)
    if step.what == "truncate":
        sentence = (
            f"truncate {path} at position {step.position:,} (the bytes after it go to "
            f"{_relative(data_dir, step.detail)}/)"
        )
    elif step.what == "move":
        sentence = f"move {path} to {_relative(data_dir, step.detail)}/"
    elif step.what == "create":
        sentence = f"create the empty segment {path}, where appends go on"
    elif step.what == "finish-swaps":
        sentence = f"finish the log cleaner's interrupted swap in {path} ({step.detail})"
    else:
        sentence = f"record offsets {step.detail} as given up (in {path}/lost-offsets)"
    return f"would {sentence}" if dry_run else f"{sentence}: done"


def _repair_summary(
    directory: Path, plans: list[PartitionPlan], left: list[PartitionReport], dry_run: bool
) -> None:
    if not plans:
        note(f"nothing to repair in {directory}")
        return
    if dry_run:
        note(f"dry run: nothing changed in {directory}")
        return
    if left:
        names = ", ".join(p.name for p in left)
        note(f"still damaged after repair: {names}; see `weirmq storage verify`")
        raise SystemExit(EXIT_DAMAGED)
    note(
        f"repaired {plural(len(plans), 'partition')}: the broker serves "
        f"{'it' if len(plans) == 1 else 'them'} at its next start"
    )


# -- shared ------------------------------------------------------------------------------------


def _resolve_data_dir(data_dir: Path | None, config_file: Path | None) -> Path:
    from weirmq.settings import SettingsError, load_settings

    try:
        settings = load_settings(config_file, overrides={"data_dir": data_dir})
    except SettingsError as exc:
        raise UsageProblem(str(exc)) from exc
    directory = Path(settings.data_dir)
    if not directory.is_dir():
        raise UsageProblem(f"no data directory at {directory}")
    return directory.resolve()


def _locked(directory: Path) -> DataDirLock:
    """The data directory's lock, or a one-line refusal naming the broker holding it."""
    from weirmq.storage.lock import DataDirLock, DataDirLockedError

    try:
        return DataDirLock.acquire(directory)
    except DataDirLockedError as exc:
        holder = "pid unknown" if exc.holder_pid is None else f"pid {exc.holder_pid}"
        raise DataDirInUse(
            f"{directory} is in use by a running WeirMQ broker ({holder}); stop the broker "
            "first: `weirmq storage` works on a stopped broker's data directory only"
        ) from None
    except OSError as exc:
        raise CommandError(f"cannot lock {directory}: {exc}") from exc


def _only(partitions: tuple[str, ...]) -> set[str] | None:
    return set(partitions) if partitions else None


def _check_partitions_found(report: DataDirReport, wanted: tuple[str, ...]) -> None:
    found = {p.name for p in report.partitions}
    missing = sorted(set(wanted) - found)
    if missing:
        raise UsageProblem(f"no partition directory {', '.join(missing)} in {report.data_dir}")


def _relative(data_dir: Path, path: str) -> str:
    try:
        return str(Path(path).relative_to(data_dir))
    except ValueError:
        return path
