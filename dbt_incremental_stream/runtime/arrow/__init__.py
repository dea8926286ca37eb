"""The Arrow backend: the per-bucket work of a tick (:mod:`.kernels`), window functions
over a partition's ordered rows (:mod:`.windows`) and the Spark SQL expressions Arrow
evaluates exactly as Spark does (:mod:`.expressions`), as Arrow/numpy functions over
weighted batches. Nothing here imports Spark: ``tests/fast`` holds each
kernel to a Python model of Spark's answer, and the twin harness to Spark itself."""
