"""The ``dbt-stream`` command: the engine's commands plus ``serve``, which reads dbt's
profile and so lives on this side of the boundary."""
from __future__ import annotations

import sys

from dbt_incremental_stream.cli import main as engine_main

SERVE = """
Keep the deployed streaming models running (after `dbt run`; Ctrl-C or SIGTERM stops after the
current tick):

    dbt-stream serve --interval 1 --port 9187      # /metrics (Prometheus) and /status (JSON)
"""


def main(argv: list[str] | None = None) -> int:
    from .serve import main as serve

    return engine_main(argv, {"serve": serve}, SERVE)


if __name__ == "__main__":
    sys.exit(main())
