"""Measuring what the decoders do: eval (WER, DNSMOS, MCD-DTW, NLL, speedups), sweep (speed against fidelity),
bench (AR vs speculative vs transformers' assisted generation), and the reports they write."""
