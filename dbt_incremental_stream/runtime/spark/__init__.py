"""The Spark backend: the session tuned for ticks (:mod:`.session`), Z-sets as Spark
DataFrames and the crossings between Spark and Arrow (:mod:`.zsets`, the DataFrame twins of
:mod:`..arrow.kernels`), the DataFrame evaluator's operators (:mod:`.evaluate`), and the
arranged operators run inside Spark tasks for a large tick (:mod:`.tasks`)."""
