"""The ``dbt-stream`` command: the engine's commands plus ``serve``, which reads dbt's
profile and so lives on this side of the boundary, and ``--profiles-dir``/``--target`` for
the commands that read a compiled project (``dbt compile`` runs first, for that target)."""
from __future__ import annotations

import argparse
import sys

from dbt_incremental_stream.cli import main as engine_main

SERVE = """
With --profiles-dir or --target, `models`, `explain` and `equivalence` run `dbt compile` for
that profile and target first (without them they read what target/ holds).

Keep the deployed streaming models running (after `dbt run`; Ctrl-C or SIGTERM stops after the
current tick):

    dbt-stream serve --interval 1 --port 9187      # /metrics (Prometheus) and /status (JSON)
"""
COMPILED = ("models", "explain", "equivalence")


def compile_parser() -> argparse.ArgumentParser:
    """The flags that make `models`, `explain` and `equivalence` run `dbt compile` first."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--profiles-dir", help="compile first, with the profiles.yml in this directory")
    parser.add_argument("--target", "-t", help="compile first, for this target of the profile")
    parser.add_argument("--project-dir", default=".", help="the dbt project to compile")
    parser.add_argument("--target-path", default="target", help="where dbt compiles it to")
    return parser


def compiled_first(argv: list[str]) -> list[str] | None:
    """The arguments without ``--profiles-dir``/``--target``, after ``dbt compile`` with
    them (None: it failed, and said why); unchanged when neither is given."""
    known, rest = compile_parser().parse_known_args(argv)
    if known.profiles_dir is None and known.target is None:
        return argv
    from dbt.cli.main import dbtRunner

    args = ["compile", "--project-dir", known.project_dir, "--target-path", known.target_path, "--quiet"]
    args += ["--profiles-dir", known.profiles_dir] if known.profiles_dir else []
    args += ["--target", known.target] if known.target else []
    result = dbtRunner().invoke(args)
    if not result.success:
        print(f"dbt-stream: `dbt {' '.join(args)}` failed: {result.exception or 'see its output above'}",
              file=sys.stderr)
        return None
    return [*rest, "--project-dir", known.project_dir, "--target-path", known.target_path]


def main(argv: list[str] | None = None) -> int:
    from .serve import main as serve

    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in COMPILED:
        compiled = compiled_first(argv)
        if compiled is None:
            return 1
        argv = compiled
    return engine_main(argv, {"serve": serve}, SERVE)


if __name__ == "__main__":
    sys.exit(main())
