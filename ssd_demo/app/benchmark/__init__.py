"""The Benchmark tab: the speed-fidelity map of the acceptance rules, drawn from a sweep."""
