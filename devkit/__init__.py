"""What the tests, the benchmarks and the examples share, and the installed package does
not ship: topics and records for a local broker (:mod:`.kafka`), the TPC-H refresh
workload (:mod:`.tpch`) and the shop example's events (:mod:`.shop`)."""
