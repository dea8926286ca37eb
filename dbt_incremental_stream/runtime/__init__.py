"""The runtime: a circuit run one tick at a time, on arrangements (in the driver or in
Spark tasks) or by the DataFrame evaluator, and committed atomically.

    pipeline.py          the entry point: sources and views in, one consistent tick at a time
    circuit.py           the sources and views as one circuit, the types of its nodes
    plan.py              the arranged plan: what each operator reads of its state, by which key
    arranged.py          each operator once, over arrangements: a tick's values, as the plan says
    on_arrangements.py   where a tick on arrangements runs: the driver, or Spark tasks
    on_dataframes.py     a tick by the DataFrame evaluator (what arrangements decline)
    ticks.py             what a tick hands on: changes, how it ran, the clock, data errors
    expiry.py            the retention bound of each trace: rows that leave as time moves
    arrow/               the Arrow backend, no Spark: kernels, Spark-exact expressions
    spark/               the Spark backend: the session, Z-sets as DataFrames, tasks
    storage/             state on disk: manifest and batches, arrangements, the location
"""
