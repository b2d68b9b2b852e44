"""``weirmq bench``: run the benchmark suite (`weirmq.bench`) and report its figures.

The command only parses options and checks what would fail late (matplotlib for
``--plot``, a file we could not write) before a run that takes minutes; the work is in
`weirmq.bench.runner`.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import click

from weirmq.bench.workloads import WORKLOADS

USAGE_EXIT_CODE = 2
# The clients a workload drives besides confluent-kafka (a dependency of weirmq itself):
# they come with the `bench` extra, which `make run`'s light install leaves out.
WORKLOAD_MODULES = {"amqp": ("pika",), "sqs": ("boto3", "moto")}


@click.command()
@click.option("--quick", is_flag=True,
              help="A reduced set in under two minutes (for CI): fewer, shorter cases.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="Write every figure, the parameters and the machine here.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="Draw the figures into this PNG (needs weirmq[bench]).")
@click.option("--bootstrap", metavar="HOST:PORT", default=None,
              help="Measure this Kafka-compatible broker instead of starting our own.")
@click.option("--broker-pid", type=int, default=None,
              help="With --bootstrap: the broker's process id on this machine, to report "
                   "its CPU and memory too.")
@click.option("--workload", "workloads", multiple=True, type=click.Choice(list(WORKLOADS)),
              help="Run only this workload (repeatable) [default: all].")
@click.option("--dir", "work_dir", type=click.Path(file_okay=False, path_type=Path),
              default=Path("."), show_default=True,
              help="Where our brokers' temporary data directories go (the disk measured).")
@click.option("--from", "from_file", type=click.Path(exists=True, dir_okay=False,
                                                     path_type=Path),
              default=None, help="Run nothing: render the table (and --plot) of a saved "
                                 "--json file.")
def bench(quick: bool, json_path: Path | None, plot_path: Path | None, bootstrap: str | None,
          broker_pid: int | None, workloads: tuple[str, ...], work_dir: Path,
          from_file: Path | None) -> None:
    """Measure throughput, latency, scaling and footprint of a Kafka-compatible broker.

    Without --bootstrap every case starts a fresh WeirMQ broker on 127.0.0.1 in a
    temporary directory. The load comes from confluent-kafka clients in separate
    processes. Progress goes to stderr, the table to stdout. See docs/benchmarks.md.
    """
    from weirmq.bench import runner

    if plot_path is not None and importlib.util.find_spec("matplotlib") is None:
        raise click.UsageError("--plot needs matplotlib: pip install 'weirmq[bench]'")
    chosen = workloads or tuple(WORKLOADS)
    missing = sorted(
        {(name, module) for name in chosen for module in WORKLOAD_MODULES.get(name, ())
         if importlib.util.find_spec(module) is None}
    )
    if missing and from_file is None:
        needs = ", ".join(f"{name} needs {module}" for name, module in missing)
        raise click.UsageError(f"{needs}: pip install 'weirmq[bench]', or leave those "
                               "workloads out with --workload")
    if broker_pid is not None and bootstrap is None:
        raise click.UsageError("--broker-pid goes with --bootstrap (our own broker is watched "
                               "anyway)")
    if from_file is not None:
        document = json.loads(from_file.read_text())
        runner.write(document, None, plot_path)
        return
    document = runner.run(quick=quick, workloads=chosen,
                          bootstrap=bootstrap, broker_pid=broker_pid, work_parent=work_dir)
    runner.write(document, json_path, plot_path)
    if runner.failed(document):
        click.echo("weirmq bench: some cases failed (see above)", err=True)
        sys.exit(1)
