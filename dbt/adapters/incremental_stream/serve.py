"""``dbt-stream serve``: the project's streaming models kept running, configured the way
dbt is — the profile (with ``env_var()`` secrets) gives Spark, the state location and
Kafka; the compiled project (``target/manifest.json``) says which models should stream.
Models are deployed by ``dbt run``; serve ticks what is deployed.

While serve runs, ``dbt run``/``test``/``show`` and BI clients work on the same project
through it: serve's Spark exposes a Spark Connect endpoint (the one process that owns the
catalog and the state), and ``dbt run`` hands its streaming models to serve to deploy."""
from __future__ import annotations

import argparse
import os
from argparse import Namespace
from pathlib import Path

from dbt_incremental_stream.dbt_manifest import DbtProject
from dbt_incremental_stream.errors import StreamError
from dbt_incremental_stream.project import Project
from dbt_incremental_stream.runtime.spark.session import session
from dbt_incremental_stream.server import Server, configure_logging, log

from .connections import IncrementalStreamCredentials


def credentials(project_dir: Path, profiles_dir: str | None, target: str | None) -> IncrementalStreamCredentials:
    """The profile's target as dbt renders it."""
    import yaml
    from dbt.config.profile import Profile
    from dbt.config.renderer import ProfileRenderer
    from dbt.flags import set_from_args
    from dbt_common.context import set_invocation_context

    profiles_dir = profiles_dir or os.environ.get("DBT_PROFILES_DIR") or (
        str(project_dir) if (project_dir / "profiles.yml").exists() else str(Path.home() / ".dbt"))
    name = yaml.safe_load((project_dir / "dbt_project.yml").read_text()).get("profile")
    set_invocation_context(os.environ)
    set_from_args(Namespace(PROFILES_DIR=profiles_dir), {})
    profile = Profile.render(ProfileRenderer({}), name, None, target, None)
    if not isinstance(profile.credentials, IncrementalStreamCredentials):
        raise StreamError(f"profile {name!r} target {profile.target_name!r} is not of type incremental_stream")
    return profile.credentials


def parser() -> argparse.ArgumentParser:
    """Serve's flags (the docs' CLI reference is generated from this parser)."""
    parser = argparse.ArgumentParser(
        prog="dbt-stream serve",
        description="Keep the project's deployed streaming models running: a tick every --interval seconds, "
                    "configured by the dbt profile (Spark, the state location, Kafka). dbt and BI clients "
                    "work through it while it runs; SIGTERM or Ctrl-C stops it after the current tick.")
    parser.add_argument("--project-dir", default=".", help="the dbt project (default: the current directory)")
    parser.add_argument("--profiles-dir", help="where profiles.yml is (default: as dbt finds it)")
    parser.add_argument("--target", help="the profile's target (default: its `target:`)")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between ticks (default 1)")
    parser.add_argument("--max-records", type=int, help="most records per source and tick (default: the profile's "
                                                        "max_records_per_tick, else all)")
    parser.add_argument("--port", type=int, default=9187, help="HTTP port for /metrics and /status (0: any free "
                                                               "port, -1: none; default 9187)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--connect-port", type=int, default=15002, help="Spark Connect port for dbt and BI clients "
                                                                        "(-1: none; default 15002)")
    parser.add_argument("--log-format", choices=["text", "json"], default="text",
                        help="a line of text per tick, or a JSON object per event (default text)")
    parser.add_argument("--max-ticks", type=int, help="stop after this many committed ticks")
    return parser


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    configure_logging(args.log_format)
    project_dir = Path(args.project_dir).resolve()
    creds = credentials(project_dir, args.profiles_dir, args.target)
    os.chdir(project_dir)  # the catalog (metastore_db/, spark-warehouse/) is where dbt has it
    want = _streaming_models(project_dir)
    connect = {} if args.connect_port < 0 else {
        "spark.plugins": "org.apache.spark.sql.connect.SparkConnectPlugin",
        "spark.connect.grpc.binding.address": args.host, "spark.connect.grpc.binding.port": str(args.connect_port)}

    def open_project() -> Project:
        project = Project(spark, creds.state_path(project_dir), kafka=creds.kafka_settings,
                          max_records=args.max_records or creds.max_records_per_tick)
        if want is not None and want - set(project.models):
            log.warning(f"streaming models not deployed yet: {sorted(want - set(project.models))}; run `dbt run` "
                        "to deploy them", extra={"event": "warning"})
        return project

    server = Server(open_project, interval=args.interval, port=None if args.port < 0 else args.port,
                    host=args.host, max_ticks=args.max_ticks,
                    info={"connect": None if not connect else f"sc://{args.host}:{args.connect_port}"})
    server.catch_signals()  # a signal while Spark starts: stop without a tick
    spark = session(creds.master, {**creds.server_side_parameters, **connect}, hive=True)
    return server.run()


def _streaming_models(project_dir: Path) -> set[str] | None:
    """The relations of the compiled project's streaming models (None: not compiled)."""
    try:
        compiled = DbtProject(project_dir)
    except StreamError as e:
        log.warning(f"{e}; serving the deployed models as they are", extra={"event": "warning"})
        return None
    return {m.relation for m in compiled.models.values() if m.streaming}
