"""State on disk, under a state location: the manifest that commits a tick and the spines
of Parquet batches (:mod:`.state`, which owns ``_manifest/`` and ``state/``), the
arrangements (:mod:`.arrangement`, which owns ``arrangements/``), what a location is
(:mod:`.location`), and reads of what the last commit holds (:mod:`.contents`)."""
