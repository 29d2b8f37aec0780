"""Loading models, strictly: the Hub or local folders with pre-flight checks (hub), what visitors may load
(policy), parameter counts and the memory check (memory), torch threads per model on the CPU (cpu_threads),
and where the shipped assets are (assets)."""
