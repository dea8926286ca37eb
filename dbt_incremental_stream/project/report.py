"""What one tick of a project read and wrote: told to serve's status and metrics, and
returned by ``dbt run``."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class TickReport:
    """What one tick read and wrote, per Kafka source and sink."""

    tick: int
    offsets: dict[str, int] = field(default_factory=dict)  # offsets read per source
    rows_in: dict[str, int] = field(default_factory=dict)  # records that became changes
    dead: dict[str, int] = field(default_factory=dict)  # records sent to the dead letters
    lag: dict[str, int] = field(default_factory=dict)  # offsets left to read after the tick
    rows_out: dict[str, int] = field(default_factory=dict)  # messages written per sink
    tables: dict[str, str] = field(default_factory=dict)  # table sources read: how ("3 added files")
    failed: dict[str, str] = field(default_factory=dict)  # models set aside: relation → error
    redone: bool = False  # the tick a crash cut short, read again on the same offset ranges
    seconds: float = 0.0
    #: where the time went: read (Kafka and table sources), the pipeline's own split
    #: (spark, driver, write, commit), outputs (sinks, changelogs, dead letters), publish
    split: dict[str, float] = field(default_factory=dict)
    path: str = ""  # where the pipeline ran it: "arranged" (driver), "tasks" or "dataframe"
    why: str | None = None  # why it did not run on arrangements in the driver
